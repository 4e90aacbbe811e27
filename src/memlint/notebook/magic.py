"""`%memcheck` / `%%memcheck`: the estimate from live notebook objects, the rules' risks,
and the worst-case step measured on the attached GPU (or traced on CPU without one).

Load with `%load_ext memlint`. IPython, torch and transformers are imported in memlint.notebook only.
"""

from __future__ import annotations

import os
import random
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Integer, Unicode

from memlint.errors import MemlintError
from memlint.gpu import MIN_HEADROOM
from memlint.notebook.result import MemcheckResult
from memlint.vocab import GIB, READABLE_SUFFIXES


@magics_class
class MemcheckMagics(Magics):
    """`%memcheck trainer`, `%memcheck model --batch 4 --seq 2048`, `%memcheck train.py`,
    `%%memcheck` (the cell, statically; `--run` runs it afterwards)."""

    gpu = Unicode(None, allow_none=True,
                  help="GPU to check against (a name from memlint's table or a size in GiB); "
                       "default: [tool.memlint] gpu, else the attached GPU").tag(config=True)
    confirm = Bool(True, help="Measure the worst-case step after estimating it (CUDA when available, "
                              "else the fake-tensor trace on CPU)").tag(config=True)
    device = Unicode("auto", help="auto | cuda | cpu | trace: cpu runs real tensors in host memory, on the model in "
                                  "place (host memory checked against the step's trace first); trace runs fake tensors "
                                  "(no memory)").tag(config=True)
    steps = Integer(2, help="training steps to measure (step 1 creates the optimizer state)").tag(config=True)

    @magic_arguments()
    @argument("target", nargs="?", default=None,
              help="a Trainer, a model (with --seq), or a script/config path; omit for %%%%memcheck")
    @argument("--gpu", default=None, help="GPU name or size in GiB (e.g. A100-80GB, 24)")
    @argument("--batch", type=int, default=None, help="micro-batch (default: the Trainer's; 1 for a model)")
    @argument("--seq", type=int, default=None, help="sequence length (default: the dataset's worst micro-batch)")
    @argument("--confirm", dest="confirm", action="store_const", const=True, default=None,
              help="measure the worst-case step (default on)")
    @argument("--no-confirm", dest="confirm", action="store_const", const=False, help="estimate only")
    @argument("--device", default=None, choices=("auto", "cuda", "cpu", "trace"),
              help="where to confirm: cuda; cpu = real tensors in host memory, on your model in place (the step's "
                   "trace is checked against the available host memory first); trace = fake tensors, no memory "
                   "(what auto does without CUDA)")
    @argument("--steps", type=int, default=None, help="training steps to measure (1-3)")
    @argument("--assume", action="append", default=[], metavar="KEY=VALUE",
              help="value for a field a script leaves unknown (static checks)")
    @argument("--run", action="store_true", help="%%%%memcheck: run the cell after checking it")
    @argument("-q", "--quiet", action="store_true", help="display nothing; the result is still returned")
    @line_cell_magic
    def memcheck(self, line: str, cell: str | None = None) -> MemcheckResult | None:
        """Will this fine-tuning run fit on the GPU? Estimate from the live objects, then measure."""
        args = parse_argstring(self.memcheck, line)
        # magic_arguments formats usage as reST ("::" and a wrapped block); one line reads better
        usage = "usage: " + " ".join(self.memcheck.parser.format_usage().replace("::", " ").split())
        if args.steps is not None and not 1 <= args.steps <= 3:
            raise UsageError(f"--steps must be 1, 2 or 3\n{usage}")
        for flag in ("batch", "seq"):
            if getattr(args, flag) is not None and getattr(args, flag) < 1:
                raise UsageError(f"--{flag} must be at least 1\n{usage}")
        rng = random.getstate()  # memlint's own work (its imports included) leaves `random` as it was
        try:
            result = self._memcheck(args, usage, cell)
        finally:
            random.setstate(rng)
        if cell is not None and args.run:
            self.shell.run_cell(cell)
        return result

    def _memcheck(self, args: Any, usage: str, cell: str | None) -> MemcheckResult:
        try:
            if cell is not None:
                if args.target is not None:
                    raise UsageError(f"%%memcheck reads the cell; it takes no target\n{usage}")
                result = self._static(args, cell=cell)
            elif args.target is None:
                raise UsageError(f"%memcheck needs a target: a Trainer, a model or a script path\n{usage}")
            elif args.run:
                raise UsageError(f"--run is for %%memcheck (a cell)\n{usage}")
            else:
                result = self._dispatch(args, usage)
        except MemlintError as exc:
            raise UsageError(f"memlint: {exc}") from None
        ip = self.shell
        if args.quiet:
            result._shown_in = ip.execution_count
        else:
            from IPython.display import display

            display(result)
            result._shown_in = ip.execution_count
        return result

    # ---- settings ---------------------------------------------------------------------
    def _settings(self) -> Any:
        from memlint.config import load_settings

        return load_settings(os.getcwd())

    def _gpu(self, args: Any, settings: Any) -> tuple[str, int, int] | None:
        from memlint.estimate import find_gpu

        name = args.gpu or self.gpu or (getattr(settings, "gpu", None) if settings is not None else None)
        return find_gpu(name) if name else None

    # ---- static: a file or a cell -------------------------------------------------------
    def _static(self, args: Any, cell: str | None = None, path: str | None = None) -> MemcheckResult:
        settings = self._settings()
        gpu = self._gpu(args, settings)
        from memlint.check import check_paths, check_source
        from memlint.config import Settings

        settings = settings or Settings()
        if cell is not None:
            files = [check_source(cell, "<cell>", settings=settings, gpu=gpu[0] if gpu else None,
                                  assume=tuple(args.assume))]
            return MemcheckResult("<cell>", "cell", gpu=gpu, files=files, min_headroom=settings.min_headroom)
        assert path is not None
        files = check_paths([path], settings, gpu=gpu[0] if gpu else None, assume=tuple(args.assume))
        notes = [] if files else [f"{path}: not a training script (it names no training framework)"]
        return MemcheckResult(path, "file", gpu=gpu, files=files, notes=notes, min_headroom=settings.min_headroom)

    # ---- live objects -----------------------------------------------------------------------
    def _dispatch(self, args: Any, usage: str) -> MemcheckResult:
        target = args.target
        ns = self.shell.user_ns
        if target not in ns and (target.endswith(READABLE_SUFFIXES) or os.path.sep in target):
            if not os.path.exists(target):
                raise UsageError(f"{target}: no such file\n{usage}")
            return self._static(args, path=target)
        try:
            obj = ns[target] if target in ns else self.shell.ev(target)
        except Exception as exc:  # any error evaluating the user's expression is a usage error
            raise UsageError(f"{target}: {type(exc).__name__}: {exc}\n{usage}") from None
        from memlint.notebook import live

        if isinstance(obj, (str, os.PathLike)) and os.path.isfile(obj):  # a variable naming a script
            return self._static(args, path=os.fspath(obj))
        if hasattr(obj, "args") and hasattr(obj, "train_dataset") and hasattr(obj, "model"):
            lp = live.from_trainer(obj, batch=args.batch, seq=args.seq)
            kind = "trainer"
        elif hasattr(obj, "config") and hasattr(obj, "named_parameters"):
            if args.seq is None:
                raise UsageError(f"a bare model needs --seq (and --batch, default 1)\n{usage}")
            lp = live.from_model(obj, batch=args.batch or 1, seq=args.seq)
            kind = "model"
        else:
            raise UsageError(f"{target} is a {type(obj).__name__}: expected a Trainer, a model or a script path"
                             f"\n{usage}")
        return self._live(args, lp, target, kind)

    def _live(self, args: Any, lp: Any, target: str, kind: str) -> MemcheckResult:
        import torch

        from memlint.estimate import estimate
        from memlint.notebook import confirm as confirming

        settings = self._settings()
        gpu = self._gpu(args, settings)
        device = args.device or self.device
        confirm = self.confirm if args.confirm is None else args.confirm
        notes = list(lp.notes)
        cuda = torch.cuda.is_available()
        if gpu is None and cuda and device in ("auto", "cuda"):
            from memlint.estimate import find_gpu

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            try:
                gpu = find_gpu(props.name)
            except MemlintError:
                gpu = (props.name, props.total_memory, find_gpu(f"{props.total_memory / GIB}")[2])
        est = estimate(lp.setup, "real")  # one peak, whichever GPU it is checked against
        confirmation = None
        if confirm and confirming.resolve_mode(device, lp.model) == "cpu":
            # a real CPU step past the host's memory takes the kernel with it: say so instead of running it
            short = confirming.host_shortfall(est)
            if short is not None:
                notes.append(short)
                confirm = False
        if confirm:
            from memlint import progress
            from memlint.measure.quiet import quiet

            if not cuda and device == "auto" and not args.quiet:
                print("memcheck: no CUDA device; confirming with the fake-tensor trace on CPU (no real memory used)")
            with progress.showing(f"memcheck {target}", enabled=progress.wanted(args.quiet)):
                with quiet():  # the libraries' warnings while memlint runs the step are not its report
                    confirmation = confirming.confirm(lp, device=device, steps=args.steps or self.steps)
        findings = self._risks(lp, est, gpu, settings)
        headroom = settings.min_headroom if settings is not None else MIN_HEADROOM
        return MemcheckResult(target, kind, setup=lp.setup, estimate=est, facts=lp.facts,
                              confirmation=confirmation, findings=findings, gpu=gpu, notes=notes,
                              min_headroom=headroom)

    def _risks(self, lp: Any, est: Any, gpu: Any, settings: Any) -> list[Any]:
        """The rules over the live plan: check_plan's own context when it can estimate the
        model from its id, else the same rules over the live Setup and estimate."""
        from memlint.check import check_plan, run_rules
        from memlint.config import Settings
        from memlint.estimate.from_plan import PlannedSetup
        from memlint.rules.base import Context
        from memlint.rules.registry import select

        settings = settings or Settings()
        result = check_plan(lp.plan, settings=settings, gpu=gpu[0] if gpu and _known_gpu(gpu[0]) else None)
        if result.context.estimate is not None:
            return list(result.findings)
        ctx = Context(lp.plan, planned=PlannedSetup(lp.setup, (), tuple(lp.notes)), estimate=est, gpu=gpu,
                      accounting=settings.accounting, min_headroom=settings.min_headroom)
        rules = select(settings.select, settings.extend_select, settings.ignore)
        return sorted(run_rules(ctx, rules, settings), key=lambda f: (f.span.line, f.code))


def _known_gpu(name: str) -> bool:
    from memlint.estimate import find_gpu

    try:
        find_gpu(name)
    except MemlintError:
        return False
    return True


def load_ipython_extension(ip: Any) -> None:
    """`%load_ext memlint`: register %memcheck / %%memcheck. rich is imported here, with the
    global `random` state put back: rich.style draws getrandbits(24) on import, and the first
    %memcheck must not move the user's seeded sequence."""
    state = random.getstate()
    try:
        import rich.console  # noqa: F401
        import rich.style  # noqa: F401
        import rich.table  # noqa: F401
    finally:
        random.setstate(state)
    ip.register_magics(MemcheckMagics)
