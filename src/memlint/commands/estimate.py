"""`memlint estimate`: one training configuration from flags -> the estimate table or JSON."""

from __future__ import annotations

import argparse
from typing import Any
import json

from memlint.errors import MemlintError


def setup_flags(p: argparse.ArgumentParser) -> None:
    """The training configuration flags `estimate` and `measure` share."""
    from memlint.estimate.setup import RECOMPUTE_POLICIES
    from memlint.library.api import attention
    from memlint.library.defaults import run_default

    def dflt(name: str) -> dict:
        """A flag's default from the table estimate, plan and %memcheck share, with where it comes from."""
        d = run_default(name)
        shown = {True: "on", False: "off"}.get(d.value, d.value) if isinstance(d.value, bool) else d.value
        return {"default": d.value, "help_default": f"default: {shown}; {d.why}".replace("%", "%%")}

    def flag(*names: str, key: str, help: str = "", **kw) -> None:
        d = dflt(key)
        g.add_argument(*names, default=d["default"], help=f"{help} ({d['help_default']})".lstrip(), **kw)

    g = p.add_argument_group("training configuration", "defaults: one table (data/library_defaults.json run_defaults) "
                             "that plan and %%memcheck also take, library defaults at the installed versions")
    g.add_argument("--model", required=True, help="model id (catalog, HF cache) or a local directory with config.json")
    g.add_argument("--method", choices=("full", "lora", "qlora"), default="full")
    flag("--lora-r", key="lora_r", type=int, metavar="N")
    flag("--lora-targets", key="lora_targets", metavar="all-linear|q_proj,v_proj,…")
    flag("--lora-dropout", key="lora_dropout", type=float, metavar="P")
    g.add_argument("--modules-to-save", default="", metavar="NAMES",
                   help="peft's modules_to_save, comma-separated (embed_tokens,lm_head): each a trained full copy of "
                        "that module beside the adapters")
    g.add_argument("--peft-task-type", default="auto", metavar="TYPE",
                   help="peft's LoraConfig task_type: SEQ_CLS / TOKEN_CLS train an encoder's classifier as a "
                        "modules_to_save copy, none leaves it frozen (default auto: the encoder head's)")
    g.add_argument("--use-dora", action=argparse.BooleanOptionalAction, default=False,
                   help="DoRA (LoraConfig(use_dora=True)): a magnitude vector per adapted layer, the weight norm every forward")
    g.add_argument("--quant", choices=("none", "nf4", "fp4", "int8", "gptq", "awq", "hqq"), default=None,
                   help="base weight quantization: bitsandbytes nf4/fp4/int8, a GPTQ / AWQ int4 checkpoint, or HQQ "
                        "(HqqConfig, quantized on load; --bits) "
                        "(default: the checkpoint's quantization_config, else nf4 for qlora, none otherwise)")
    g.add_argument("--group-size", type=int, default=None, metavar="G",
                   help="GPTQ / AWQ weights per fp16 scale, HQQ weights per scale and zero; -1: per column "
                        "(default: the checkpoint's, else 64 for hqq, 128 otherwise)")
    g.add_argument("--bits", type=int, default=4, metavar="N",
                   help="HQQ bits per weight (HqqConfig nbits: 8, 6, 5, 4, 3, 2, 1; default 4)")
    g.add_argument("--double-quant", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--kbit-prep", action=argparse.BooleanOptionalAction, default=None,
                   help="prepare_model_for_kbit_training upcasts non-quantized weights to fp32 (default: what the "
                        "--objective's TRL trainer does at the installed TRL version; SFT no longer calls it from 0.26)")
    flag("--dtype", key="dtype", choices=("fp32", "bf16", "fp16"), help="dtype the weights are loaded in")
    g.add_argument("--precision", choices=("fp32", "amp-bf16", "amp-fp16", "pure-bf16", "master-fp32"), default=None,
                   help=f"({dflt('precision')['help_default']})")
    flag("--optim", key="optim", metavar="NAME", help="HF Trainer optim name")
    flag("--galore-rank", key="galore_rank", type=int, metavar="R", help="GaLore's projection rank (galore_* optim)")
    g.add_argument("--galore-targets", default=None, metavar="attn,mlp|all-linear|REGEX",
                   help=f"GaLore's optim_target_modules (default: {','.join(run_default('galore_targets').value)})")
    _vision_flags(g)
    flag("--batch", key="batch", type=int, metavar="N", help="micro-batch per GPU")
    flag("--seq", key="seq", type=int, metavar="N", help="longest sequence in a micro-batch")
    flag("--grad-accum", key="grad_accum", type=int, metavar="N")
    flag("--recompute", key="recompute", action=argparse.BooleanOptionalAction, help="gradient checkpointing")
    g.add_argument("--recompute-every", type=int, default=1, metavar="N",
                   help="with --recompute, checkpoint only every Nth decoder layer (torchtune ac_mode: selective, "
                        "ac_option: N; default: 1, every layer)")
    g.add_argument("--recompute-policy", choices=RECOMPUTE_POLICIES, default="full",
                   help="with --recompute, what a checkpointed layer keeps: full (only its input; default) or op-sac "
                        "(torchtitan's op-level selective checkpointing: every second mm output and the attention "
                        "output and logsumexp kept, the rest recomputed)")
    flag("--attn", key="attn", choices=tuple(attention()))
    _loss_and_step_flags(g)
    _model_code_flags(g, flag)
    _parallel_flags(g)


def _loss_and_step_flags(g: Any) -> None:
    """The loss kernel, float8, offloading, the optimizer step's place and the objective."""
    from memlint.estimate.setup import OBJECTIVES

    g.add_argument("--fused-loss", action=argparse.BooleanOptionalAction, default=False,
                   help="fused/chunked linear cross-entropy (Liger, Cut Cross-Entropy): no full-vocabulary logits")
    g.add_argument("--chunked-loss", type=int, default=0, metavar="K",
                   help="torchtune's CEWithChunkedOutputLoss: K bf16 logit chunks, each upcast to fp32 in turn (0: off)")
    g.add_argument("--float8", choices=("none", "all", "layers"), default="none",
                   help="torchao float8 training (convert_to_float8_training / accelerate fp8): the linears made "
                        "Float8Linear, every one (all) or the decoder's (layers: lm_head kept)")
    g.add_argument("--compiled-loss", action=argparse.BooleanOptionalAction, default=False,
                   help="the cross-entropy under torch.compile (torchtune compile: true, TrainingArguments(torch_compile="
                        "True)): no fp32 upcast or log-softmax kept, only the logsumexp")
    g.add_argument("--compiled-layers", action=argparse.BooleanOptionalAction, default=False,
                   help="the decoder layers under torch.compile: RMSNorm keeps its rsqrt only, the MLP activation is "
                        "recomputed (inductor's partition, measured on CPU)")
    g.add_argument("--float8-all-gather", action=argparse.BooleanOptionalAction, default=False,
                   help="FSDP2 all-gathers the float8 linears' shards in float8 (torchao / torchtitan "
                        "enable_fsdp_float8_all_gather): 1-byte unsharded weights, no weight casts")
    g.add_argument("--offload-activations", action=argparse.BooleanOptionalAction, default=False,
                   help="activation offloading (TRL's activation_offloading): saved activations copied to CPU")
    g.add_argument("--optimizer-in-bwd", action=argparse.BooleanOptionalAction, default=False,
                   help="optimizer step fused into backward (torchtune's optimizer_in_bwd): no full gradient buffer")
    g.add_argument("--objective", choices=OBJECTIVES, default="sft",
                   help="TRL trainer objective: preference trainers stack chosen+rejected rows, DPO/KTO add a reference pass")
    g.add_argument("--ref-model", choices=("auto", "none", "copy", "adapter-disabled", "precomputed"), default="auto",
                   help="reference for dpo/kto (default: a frozen copy for a full fine-tune, adapters disabled for peft)")
    g.add_argument("--trl-sft", action=argparse.BooleanOptionalAction, default=False,
                   help="the sft objective run by TRL's SFTTrainer (what its compute_loss keeps of the logits at "
                        "--trl-version: the fused LM head from 1.15), not transformers' Trainer")
    g.add_argument("--trl-version", default=None, metavar="X.Y",
                   help="TRL version whose step layout to model (default: the installed one, else the newest known)")


def _model_code_flags(g: Any, flag: Any) -> None:
    """Which model class and whose model code: the output head (encoders), transformers' modules or LitGPT's."""
    g.add_argument("--head", choices=("auto", "causal-lm", "sequence-classification", "token-classification", "masked-lm"),
                   default="auto", help="the output head, the class the script loads (auto: causal-lm for a decoder, "
                   "sequence-classification for an encoder such as BERT / RoBERTa)")
    flag("--num-labels", key="num_labels", type=int, metavar="N", help="labels of a classification head")
    g.add_argument("--target-len", type=int, default=None, metavar="N",
                   help="an encoder-decoder's (T5's) target length, the decoder's tokens (default: the source length, "
                   "--seq, assumed)")
    g.add_argument("--model-code", choices=("transformers", "litgpt"), default="transformers",
                   help="whose model code runs the step: transformers' modules (peft, the HF loss), or LitGPT's GPT "
                        "(fused qkv, LoRAQKVLinear, chunked lm_head + chunked cross-entropy; bf16-true: --precision "
                        "pure-bf16 --dtype bf16; its QLoRA uses PagedAdamW: --optim paged_adamw_32bit)")
    g.add_argument("--litgpt-version", default=None, metavar="X.Y.Z",
                   help="with --model-code litgpt, the LitGPT version whose code to model (default: the installed "
                        "one, else the newest known; 0.1.0 is lit-gpt of 2023)")


def _parallel_flags(g: Any) -> None:
    """How the run is spread over GPUs: data parallelism with ZeRO/FSDP sharding, tensor and context parallelism."""
    g.add_argument("--gpus", type=int, default=1, metavar="N")
    g.add_argument("--shard", choices=("none", "zero1", "zero2", "zero3", "fsdp", "fsdp_shard_grad_op", "fsdp_hybrid"),
                   default="none")
    g.add_argument("--nodes", type=int, default=1, metavar="M", help="nodes the GPUs span (fsdp_hybrid shards within one)")
    g.add_argument("--offload", choices=("none", "optimizer", "params"), default="none")
    g.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor-parallel degree: attention and MLP linears split N ways (data parallel over GPUs / (N × CP))")
    g.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=False,
                   help="sequence parallelism with TP: norms and residual stream split by the sequence (Megatron --sequence-parallel)")
    g.add_argument("--cp", type=int, default=1, metavar="N",
                   help="context-parallel degree: the sequence split over N ranks, ring attention (approximate)")
    g.add_argument("--tp-stack", choices=("transformers", "torchtitan", "megatron"), default="transformers",
                   help="whose TP plan: which of embeddings / lm_head / loss are vocab-parallel (default: transformers' tp_plan='auto')")
    g.add_argument("--loss-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="vocab-parallel loss over the TP ranks (default: the stack's; torchtitan and Megatron on)")


def _vision_flags(g) -> None:
    """A vision-language model's images and what of its tower trains (estimate/vision.py)."""
    g.add_argument("--images", type=int, default=None, metavar="N",
                   help="images per sample for a vision-language model (default: 1 for a VLM, said in the assumptions)")
    g.add_argument("--image-size", default=None, metavar="HxW",
                   help="each image's size before the processor's resize (default: the largest --image-max-pixels allows)")
    g.add_argument("--image-max-pixels", type=int, default=None, metavar="PIXELS",
                   help="the processor's max_pixels (LLaMA-Factory image_max_pixels; default: the processor's, "
                        "data/vision.json)")
    g.add_argument("--image-min-pixels", type=int, default=None, metavar="PIXELS", help="the processor's min_pixels")
    g.add_argument("--train-vision", action=argparse.BooleanOptionalAction, default=False,
                   help="a full fine-tune also trains the vision tower (LLaMA-Factory freeze_vision_tower: false; "
                        "default: frozen, LLaMA-Factory's default)")
    g.add_argument("--train-projector", action=argparse.BooleanOptionalAction, default=None,
                   help="the merger / multi-modal projector trains (default: as --train-vision)")


def setup_from_args(args: argparse.Namespace):
    from memlint.catalog import resolve
    from memlint.estimate.setup import Setup
    from memlint.library.defaults import run_default
    from memlint.library.versions import installed_version

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
    images = args.images if args.images is not None else (1 if model.vision else 0)
    return Setup(
        images=images, image_size=_image_size(args.image_size), image_max_pixels=args.image_max_pixels,
        image_min_pixels=args.image_min_pixels, train_vision=args.train_vision, train_projector=args.train_projector,
        model=model, method=args.method, quant_group_size=group, quant_bits=args.bits, lora_r=args.lora_r, lora_targets=targets,
        lora_dropout=args.lora_dropout, use_dora=args.use_dora,
        modules_to_save=tuple(t.strip() for t in args.modules_to_save.split(",") if t.strip()),
        peft_task_type=None if args.peft_task_type.lower() == "none" else (
            "auto" if args.peft_task_type == "auto" else args.peft_task_type.upper()), quant=quant, double_quant=args.double_quant, dtype=args.dtype,
        precision=precision, optim=args.optim, batch=args.batch, seq=args.seq, grad_accum=args.grad_accum,
        recompute=args.recompute, attn=args.attn, gpus=args.gpus, shard=args.shard, offload=args.offload,
        nodes=args.nodes, kbit_prep=_kbit_prep(args, quant), fused_loss=args.fused_loss, chunked_loss=args.chunked_loss,
        offload_activations=args.offload_activations, optimizer_in_bwd=args.optimizer_in_bwd, float8=args.float8,
        float8_all_gather=args.float8_all_gather, compiled_loss=args.compiled_loss, compiled_layers=args.compiled_layers,
        recompute_every=args.recompute_every, recompute_policy=args.recompute_policy, galore_rank=args.galore_rank, galore_targets=_galore_targets(args.galore_targets),
        objective=args.objective, ref_model=args.ref_model, trl_version=args.trl_version or installed_version("trl"),
        trl_sft=args.trl_sft,
        task_head=args.head, num_labels=args.num_labels, target_len=args.target_len,
        tp=args.tp, sequence_parallel=args.sequence_parallel, cp=args.cp, tp_stack=args.tp_stack,
        loss_parallel=args.loss_parallel,
        model_code=args.model_code,
        litgpt_version=(args.litgpt_version or installed_version("litgpt")) if args.model_code == "litgpt" else None,
    )


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
    p.add_argument("--gpu", metavar="NAME|GiB", help="GPU to check against (default: the common GPUs)")
    p.add_argument("--accounting", choices=("real", "textbook"), default=accounting)
    p.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    from memlint.commands.common import check_chart_flags, console, emit_chart, min_headroom
    from memlint.estimate import estimate
    from memlint.report.estimate_view import gpu_targets, render, to_json

    check_chart_flags(args)
    setup = setup_from_args(args)
    targets = gpu_targets(args.gpu)
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
    add_chart_flags(e)
    e.set_defaults(func=run)
