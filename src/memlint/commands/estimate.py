"""`memlint estimate`: one training configuration from flags -> the estimate table or JSON."""

from __future__ import annotations

import argparse
from typing import Any
import json

from memlint.errors import MemlintError


def setup_flags(p: argparse.ArgumentParser) -> None:
    """The training configuration flags `estimate` and `measure` share: each plan field's flag from its declaration
    (plan/fields.py), grouped as the plan is; the few whose conversion the table cannot say are written here."""
    from memlint.estimate.setup import PRECISIONS, RECOMPUTE_POLICIES
    from memlint.library.api import attention
    from memlint.library.defaults import run_default
    from memlint.plan.fields import FIELDS, GROUPS

    groups = {g: p.add_argument_group(g) for g in GROUPS}
    p.description = ("defaults: one table (data/library_defaults.json run_defaults) that plan and %memcheck also "
                     "take, library defaults at the installed versions")

    def dflt(name: str) -> tuple[Any, str]:
        """A default from the table estimate, plan and %memcheck share, and where it comes from."""
        d = run_default(name)
        shown = {True: "on", False: "off"}.get(d.value, d.value) if isinstance(d.value, bool) else d.value
        return d.value, f"default: {shown}; {d.why}".replace("%", "%%")

    groups["model"].add_argument("--model", help="model id (catalog, HF cache) or a local directory with config.json "
                                                 "(required; --list-models shows the catalog)")
    for f in FIELDS:
        flag = f.flag
        if flag is None or flag.custom:
            continue
        kw: dict[str, Any] = {"dest": flag.dest, "default": flag.default}
        if flag.type is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw.update(type=flag.type, choices=flag.choices, metavar=flag.metavar)
        help_text = flag.help
        if f.default is not None:
            kw["default"], why = dflt(f.default)
            help_text = f"{help_text} ({why})".lstrip()
        groups[f.group].add_argument(flag.name, help=help_text or f.doc, **kw)

    g = groups["model"]
    g.add_argument("--head", choices=("auto", "causal-lm", "sequence-classification", "token-classification", "masked-lm"),
                   default="auto", help="the output head, the class the script loads (auto: causal-lm for a decoder, "
                   "sequence-classification for an encoder such as BERT / RoBERTa)")
    g = groups["adapters"]
    targets, why = dflt("lora_targets")
    g.add_argument("--lora-targets", default=targets, metavar="all-linear|q_proj,v_proj,…", help=f"({why})")
    g.add_argument("--modules-to-save", default="", metavar="NAMES",
                   help="peft's modules_to_save, comma-separated (embed_tokens,lm_head): each a trained full copy of "
                        "that module beside the adapters")
    g.add_argument("--peft-task-type", default="auto", metavar="TYPE",
                   help="peft's LoraConfig task_type: SEQ_CLS / TOKEN_CLS train an encoder's classifier as a "
                        "modules_to_save copy, none leaves it frozen (default auto: the encoder head's)")
    g = groups["quantization"]
    g.add_argument("--quant", choices=("none", "nf4", "fp4", "int8", "gptq", "awq", "hqq"), default=None,
                   help="base weight quantization: bitsandbytes nf4/fp4/int8, a GPTQ / AWQ int4 checkpoint, or HQQ "
                        "(HqqConfig, quantized on load; --bits) "
                        "(default: the checkpoint's quantization_config, else nf4 for qlora, none otherwise)")
    g.add_argument("--group-size", type=int, default=None, metavar="G",
                   help="GPTQ / AWQ weights per fp16 scale, HQQ weights per scale and zero; -1: per column "
                        "(default: the checkpoint's, else 64 for hqq, 128 otherwise)")
    g.add_argument("--bits", type=int, default=4, metavar="N",
                   help="HQQ bits per weight (HqqConfig nbits: 8, 6, 5, 4, 3, 2, 1; default 4)")
    g.add_argument("--kbit-prep", action=argparse.BooleanOptionalAction, default=None,
                   help="prepare_model_for_kbit_training upcasts non-quantized weights to fp32 (default: what the "
                        "--objective's TRL trainer does at the installed TRL version; SFT no longer calls it from 0.26)")
    g = groups["precision and memory"]
    g.add_argument("--precision", choices=PRECISIONS, default=None,
                   help=f"({dflt('precision')[1]})")
    attn, why = dflt("attn")
    g.add_argument("--attn", choices=tuple(attention()), default=attn, help=f"({why})")
    g.add_argument("--recompute-policy", choices=RECOMPUTE_POLICIES, default="full",
                   help="with --recompute, what a checkpointed layer keeps: full (only its input; default) or op-sac "
                        "(torchtitan's op-level selective checkpointing: every second mm output and the attention "
                        "output and logsumexp kept, the rest recomputed)")
    groups["optimizer"].add_argument(
        "--galore-targets", default=None, metavar="attn,mlp|all-linear|REGEX",
        help=f"GaLore's optim_target_modules (default: {','.join(run_default('galore_targets').value)})")
    _vision_flags(groups["vision"])
    _objective_flags(groups["trainer"])
    _model_code_flags(groups["model"])
    _parallel_flags(groups["parallelism"])


def _objective_flags(g: Any) -> None:
    """The objective and the TRL version whose step layout to model (not plan fields: the trainer says them)."""
    from memlint.estimate.setup import OBJECTIVES

    g.add_argument("--objective", choices=OBJECTIVES, default="sft",
                   help="TRL trainer objective: preference trainers stack chosen+rejected rows, DPO/KTO add a reference pass")
    g.add_argument("--trl-version", default=None, metavar="X.Y",
                   help="TRL version whose step layout to model (default: the installed one, else the newest known)")
    g.add_argument("--trl-sft", action=argparse.BooleanOptionalAction, default=False,
                   help="the sft objective run by TRL's SFTTrainer (what its compute_loss keeps of the logits at "
                        "--trl-version: the fused LM head from 1.15), not transformers' Trainer")
    g.add_argument("--logps-framework", choices=("openrlhf",), default=None,
                   help="a framework whose own preference step runs instead of TRL's (openrlhf: the reference's log-probs "
                        "first, the policy's logits materialised in fp32)")
    # not a plan field: plans do not turn it on (torchtune's published compile row shows the loss's saving only)
    g.add_argument("--trainer-optimizer", action=argparse.BooleanOptionalAction, default=True,
                   help="the optimizer is built by transformers' Trainer from --optim (under a bitsandbytes 8-bit "
                        "optimizer every embedding keeps 32-bit state); --no-trainer-optimizer: the script builds it")
    g.add_argument("--compiled-layers", action=argparse.BooleanOptionalAction, default=False,
                   help="the decoder layers under torch.compile: RMSNorm keeps its rsqrt only, the MLP activation is "
                        "recomputed (inductor's partition, measured on CPU)")


def _model_code_flags(g: Any) -> None:
    """Whose model code runs the step: transformers' modules or LitGPT's (not a plan field: the framework says it)."""
    g.add_argument("--model-code", choices=("transformers", "litgpt"), default="transformers",
                   help="whose model code runs the step: transformers' modules (peft, the HF loss), or LitGPT's GPT "
                        "(fused qkv, LoRAQKVLinear, chunked lm_head + chunked cross-entropy; bf16-true: --precision "
                        "pure-bf16 --dtype bf16; its QLoRA uses PagedAdamW: --optim paged_adamw_32bit)")
    g.add_argument("--litgpt-version", default=None, metavar="X.Y.Z",
                   help="with --model-code litgpt, the LitGPT version whose code to model (default: the installed "
                        "one, else the newest known; 0.1.0 is lit-gpt of 2023)")


def _parallel_flags(g: Any) -> None:
    """Sharding and the nodes the GPUs span (--gpus, --tp, --cp ... come from the plan fields' declarations)."""
    g.add_argument("--shard", choices=("none", "zero1", "zero2", "zero3", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid"),
                   default="none")
    g.add_argument("--nodes", type=int, default=1, metavar="M", help="nodes the GPUs span (fsdp_hybrid shards within one)")
    g.add_argument("--loss-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="vocab-parallel loss over the TP ranks (default: the stack's; torchtitan and Megatron on)")


def _vision_flags(g) -> None:
    """A vision-language model's images (--image-max-pixels, --train-vision ... come from the declarations)."""
    g.add_argument("--images", type=int, default=None, metavar="N",
                   help="images per sample for a vision-language model (default: 1 for a VLM, said in the assumptions)")
    g.add_argument("--image-size", default=None, metavar="HxW",
                   help="each image's size before the processor's resize (default: the largest --image-max-pixels allows)")


def setup_from_args(args: argparse.Namespace):
    from memlint.catalog import resolve
    from memlint.estimate.setup import Setup
    from memlint.library.defaults import run_default
    from memlint.library.versions import installed_version
    from memlint.plan.fields import FIELDS

    model = resolve(args.model)
    pre = (model.quantization or {}) if args.quant is None else {}
    quant = args.quant or pre.get("quant_method")
    if quant is None:
        quant = "nf4" if args.method == "qlora" else "none"
    group = args.group_size or pre.get("group_size") or (64 if quant == "hqq" else 128)
    if args.bits != 4 and quant != "hqq":
        raise MemlintError("--bits sets HQQ's nbits: it needs --quant hqq")
    precision = args.precision or run_default("precision").value
    if args.precision is None and args.dtype == "fp16" and precision == "amp-bf16":
        precision = "amp-fp16"  # autocast in the weights' half format
    targets: tuple[str, ...] | str = args.lora_targets
    if targets != "all-linear":
        targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
        if not targets:
            raise MemlintError("--lora-targets is empty")
    if args.method == "full" and (args.lora_targets != run_default("lora_targets").value
                                  or args.lora_r != run_default("lora_r").value or args.use_dora):
        raise MemlintError("--lora-r/--lora-targets/--use-dora need --method lora or qlora")
    if args.method == "full" and args.adapter_dtype is not None:
        raise MemlintError("--adapter-dtype is the LoRA adapters' dtype: it needs --method lora or qlora")
    images = args.images if args.images is not None else (1 if model.vision else 0)
    # every declared flag that sets one Setup attribute (plan/fields.py); unset (None) keeps Setup's default
    declared = {f.flag.dest: getattr(args, f.flag.dest) for f in FIELDS
                if f.flag is not None and not f.flag.custom and f.flag.dest is not None
                and getattr(args, f.flag.dest, None) is not None}
    return Setup(
        **declared, precision=precision, images=images, image_size=_image_size(args.image_size),
        model=model, quant_group_size=group, quant_bits=args.bits, lora_targets=targets,
        modules_to_save=tuple(t.strip() for t in args.modules_to_save.split(",") if t.strip()),
        peft_task_type=None if args.peft_task_type.lower() == "none" else (
            "auto" if args.peft_task_type == "auto" else args.peft_task_type.upper()), quant=quant,
        attn=args.attn, shard=args.shard, nodes=args.nodes, kbit_prep=_kbit_prep(args, quant),
        recompute_policy=args.recompute_policy, galore_targets=_galore_targets(args.galore_targets),
        objective=args.objective, trl_version=args.trl_version or installed_version("trl"), trl_sft=args.trl_sft,
        logps_framework=args.logps_framework,
        compiled_layers=args.compiled_layers, trainer_optimizer=args.trainer_optimizer,
        task_head=args.head, loss_parallel=args.loss_parallel, model_code=args.model_code,
        litgpt_version=(args.litgpt_version or installed_version("litgpt")) if args.model_code == "litgpt" else None,
    )


def warn_positions(setup) -> None:
    """`--seq` past the model's positions (config.json max_position_embeddings): a warning on stderr; the estimate
    is still made at that length (a run with rope scaling can go past it)."""
    import sys

    from memlint.vocab import printable

    cap = setup.model.arch.get("max_position_embeddings")
    if isinstance(cap, int) and setup.seq > cap:
        print(printable(f"memlint: warning: --seq {setup.seq:,} is past {setup.model.id}'s {cap:,} positions "
                        f"(max_position_embeddings): the model was not trained that long (rope scaling may extend it)"),
              file=sys.stderr)


def _image_size(text: str | None) -> tuple[int, int] | None:
    """--image-size HxW (448x448, 1280x720): height by width in pixels."""
    if text is None:
        return None
    parts = text.lower().replace("×", "x").split("x")
    try:
        h, w = (int(p) for p in parts)
    except ValueError:
        raise MemlintError(f"--image-size {text!r}: expected HxW in pixels, e.g. 448x448") from None
    return h, w


def _galore_targets(text: str | None) -> tuple[str, ...] | str:
    """--galore-targets: "all-linear", a regex (one entry with regex characters), or names matched as transformers does."""
    from memlint.library.defaults import run_default

    if text is None:
        return tuple(run_default("galore_targets").value)  # Setup's default, as a tuple
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise MemlintError("--galore-targets is empty")
    return names[0] if len(names) == 1 and (names[0] == "all-linear" or any(c in names[0] for c in ".*[(|")) else names


def _kbit_prep(args: argparse.Namespace, quant: str) -> bool:
    if args.kbit_prep is not None:
        return args.kbit_prep
    if getattr(args, "model_code", "transformers") == "litgpt":
        return False  # LitGPT quantizes through Fabric's BitsandbytesPrecision: no peft upcast
    from memlint.library.api import kbit_prep, trl_trainer

    return kbit_prep(trl_trainer(args.objective))[0]


def target_flags(p: argparse.ArgumentParser, accounting: str | None = "real") -> None:
    """What `estimate` and `measure` check against and how they print it."""
    from memlint.commands.common import add_online_flag

    add_online_flag(p)
    p.add_argument("--gpu", metavar="NAME|GiB", help="GPU to check against (default: the common GPUs)")
    p.add_argument("--accounting", choices=("real", "textbook"), default=accounting)
    p.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    from memlint.commands.common import check_chart_flags, console, emit_chart, min_headroom
    from memlint.estimate import estimate
    from memlint.report.estimate_view import gpu_targets, render, to_json

    if getattr(args, "list_gpus", False) or getattr(args, "list_models", False):
        from memlint.report.lists import list_gpus, list_models

        (list_gpus if args.list_gpus else list_models)(console(), args.format)
        return 0
    if not args.model:
        raise MemlintError("--model is required: a model id, a local directory with config.json "
                           "(memlint estimate --list-models lists the catalog)")
    from memlint.commands.common import go_online

    check_chart_flags(args)
    go_online(args)
    setup = setup_from_args(args)
    targets = gpu_targets(args.gpu)  # a usage error before any warning
    warn_positions(setup)
    headroom = min_headroom()
    est = estimate(setup, args.accounting)  # one peak, whichever GPU it is checked against
    if args.format == "json":
        print(json.dumps(to_json(est, targets, headroom), indent=2))
    else:
        render(est, targets, console(), min_headroom=headroom)
    emit_chart(args, [(None, est)], console(), terminal=args.format != "json")
    return 0


def add_parser(sub) -> None:
    from memlint.commands.common import add_chart_flags

    e = sub.add_parser("estimate", help="estimate per-GPU memory for a configuration")
    setup_flags(e)
    target_flags(e)
    lists = e.add_argument_group("what memlint knows")
    lists.add_argument("--list-gpus", action="store_true",
                       help="list the GPUs --gpu takes: memory, bf16 / FlashAttention-2, aliases, and the source")
    lists.add_argument("--list-models", action="store_true",
                       help="list the bundled catalog: every model id with its parameter count and family")
    add_chart_flags(e)
    e.set_defaults(func=run)
