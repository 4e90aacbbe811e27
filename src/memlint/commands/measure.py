"""`memlint measure`: run (or trace, without CUDA) the configuration's training step beside its estimate."""

from __future__ import annotations

import argparse
import importlib.util
import json

from memlint.errors import MemlintError


def run(args: argparse.Namespace) -> int:
    from memlint.commands.common import console
    from memlint.commands.common import min_headroom
    from memlint.commands.estimate import setup_from_args
    from memlint.estimate import estimate
    from memlint.report.estimate_view import gpu_targets
    from memlint.report.measure_view import render, to_json

    if args.fused_loss:
        # the measured model runs transformers' own loss; liger-kernel needs Triton on a GPU
        raise MemlintError("measure runs transformers' loss, not a fused one: --fused-loss is for `memlint estimate`")
    if args.offload_activations:
        raise MemlintError("measure keeps activations on the device: --offload-activations is for `memlint estimate`")
    from memlint.commands.common import go_online
    from memlint.commands.estimate import warn_positions

    go_online(args)
    setup = setup_from_args(args)
    targets = gpu_targets(args.gpu) if args.gpu else []
    warn_positions(setup)
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        raise MemlintError("memlint measure needs torch and transformers: pip install 'torch-memlint[measure]'")
    from memlint.measure import measure
    from memlint.measure.quiet import quiet

    from memlint import progress

    device = {"cpu": "trace"}.get(args.device, args.device)
    # a step traces in seconds (an 8B QLoRA in 5-25 s): its phases on stderr, in a terminal, after a second
    with progress.showing(f"measuring {setup.model.id}", enabled=progress.wanted(args.quiet)):
        with quiet():  # transformers' FutureWarnings, bitsandbytes' kernel notices: not memlint's output
            m = measure(setup, device=device)
    doc = m.to_json()
    est = estimate(setup, args.accounting)
    headroom = min_headroom()
    if args.format == "json":
        print(json.dumps(to_json(setup, doc, est, targets, headroom), indent=2))
    else:
        render(setup, doc, est, console(), targets, headroom)
    return 0


def add_parser(sub) -> None:
    from memlint.commands.estimate import setup_flags, target_flags

    ms = sub.add_parser("measure", help="run (or trace, without CUDA) the real training step and measure it")
    setup_flags(ms)
    target_flags(ms)
    ms.add_argument("--device", default="auto",
                    help="auto | cuda | cpu | trace. cpu and trace both trace the step on the CPU with fake tensors (no "
                         "memory used; CUDA's kernels emulated: its autocast op lists, SDPA kernel choice, fused "
                         "dropout); `%%memcheck --device cpu` is different: real tensors in host memory")
    ms.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
    ms.set_defaults(func=run)
