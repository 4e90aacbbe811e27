"""MEM3xx: PEFT and quantization settings that cost memory or precision."""

from __future__ import annotations

from typing import Iterator

from memlint.gpu import Gpu
from memlint.rules.base import Context, Finding, Fix, Rule, Sample
from memlint.rules.capacity import refit
from memlint.rules.samples import script
from memlint.vocab import size_text

_LORA = "r=16, lora_alpha=32, target_modules='all-linear'"


class NoDoubleQuantRule(Rule):
    """
    ## What it does
    Reports 4-bit quantization without double quantization (the quantization constants
    quantized again, `bnb_4bit_use_double_quant=True`).

    ## Why is this bad?
    Each block of 64 weights keeps an fp32 absmax constant: 0.5 bits per parameter.
    Double quantization stores them in 8 bits with a second-level fp32 constant per 256
    blocks, 0.127 bits per parameter, saving about 0.37 bits per quantized parameter
    (≈ 0.35 GiB on an 8B model) at no cost in quality (QLoRA paper, §3).

    ## When it fires
    A 4-bit base whose double quantization is off. With a GPU configured it is a warning
    only where the run does not fit or is tight (under MEM102's headroom), and silent where
    it fits with room to spare; without a GPU, or without an estimate, it is a note.

    ## Example
    ```python
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
    ```

    ## Use instead
    ```python
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                       bnb_4bit_use_double_quant=True)
    ```
    """

    code = "MEM301"
    name = "missing-double-quant"
    severity = "warning"
    advice = True
    summary = "4-bit quantization without double quantization"
    fix = Fix("add bnb_4bit_use_double_quant=True", "safe", "double-quant")
    VALID = (Sample(script(bnb="load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True",
                           lora=_LORA)),
             Sample(script(bnb="load_in_4bit=True, bnb_4bit_quant_type='nf4'", lora=_LORA), gpu="RTX4090"))
    INVALID = (Sample(script(bnb="load_in_4bit=True, bnb_4bit_quant_type='nf4'", lora=_LORA), gpu="5.5",
                      at="BitsAndBytesConfig("),
               Sample(script(bnb="load_in_4bit=True, bnb_4bit_quant_type='nf4'", lora=_LORA),
                      at="BitsAndBytesConfig(", severity="note"))

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.value("quant_bits") != 4 or not ctx.known("double_quant") or ctx.value("double_quant"):
            return
        level = self.advice_severity(ctx) if ctx.estimate is not None else "note"
        if level is None:
            return
        saved = ""
        if ctx.estimate is not None:
            peak_dq, fit_dq = refit(ctx, double_quant=True)
            saved = f": double quantization saves {size_text(ctx.estimate.peak - peak_dq)}"
            if fit_dq is not None and fit_dq.ok:
                saved += f" and fits on {ctx.gpu[0]}"
        at = "double_quant" if ctx.plan.get("double_quant").span else "quant_bits"
        yield self.finding(ctx, f"4-bit base without double quantization{saved} (0.37 bits per quantized weight)",
                           at, hint="bnb_4bit_use_double_quant=True", fix=self.fix, severity=level)


def _bf16_gpu(ctx: Context) -> bool | None:
    if ctx.gpu is None:
        return None
    return Gpu(*ctx.gpu).supports("bf16")


class Fp16ComputeRule(Rule):
    """
    ## What it does
    Reports fp16 compute (`bnb_4bit_compute_dtype=torch.float16`, `fp16=True`) where
    bf16 is available: a bf16 checkpoint, or a GPU that supports bf16 (Ampere and
    newer).

    ## Why is this bad?
    fp16 has 5 exponent bits: activations of models trained in bf16 overflow it, which
    shows up as `nan` losses or a loss scaler that keeps skipping steps. bf16 costs the
    same memory and has fp32's range.

    ## When it fires
    fp16 compute where the configured GPU supports bf16, or (without a GPU) the checkpoint
    is bf16. It is a note: bf16 and fp16 take the same memory, so it never decides whether
    the run fits and never fails a check.

    ## Example
    ```python
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float16)
    TrainingArguments(fp16=True)
    ```

    ## Use instead
    ```python
    BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    TrainingArguments(bf16=True)
    ```
    """

    code = "MEM302"
    name = "fp16-compute-where-bf16-fits"
    severity = "note"
    summary = "fp16 compute dtype with a bf16-capable GPU or a bf16 checkpoint"
    VALID = (Sample(script(precision="bf16=True"), gpu="A100-80GB"), Sample(script(precision="fp16=True"), gpu="T4"))
    INVALID = (Sample(script(precision="fp16=True"), gpu="A100-80GB", at="fp16=True"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        at = None
        if ctx.value("compute_dtype") in ("fp16", "float16"):
            at = "compute_dtype"
            if ctx.plan.get("compute_dtype").span is None and ctx.value("precision") == "amp-fp16":
                at = "precision"  # a framework default that follows fp16: true; point at that key
        elif ctx.value("precision") == "amp-fp16":
            at = "precision"
        if at is None:
            return
        bf16 = _bf16_gpu(ctx)
        ckpt = ctx.setup.model.torch_dtype if ctx.setup is not None else None
        if bf16 is False:
            return  # a T4 or V100: fp16 is the only half precision there
        if bf16 is None and ckpt != "bfloat16":
            return
        why = f"{ctx.gpu[0]} supports bf16" if bf16 else f"the checkpoint is bf16 ({ctx.setup.model.id})"
        yield self.finding(ctx, f"fp16 compute where bf16 is available ({why}): fp16 overflows where bf16 does not, "
                                "at the same memory", at, hint="use bf16 (bf16=True, bnb_4bit_compute_dtype=torch.bfloat16)")


class BareLoadIn4bitRule(Rule):
    """
    ## What it does
    Reports 4-bit loading without a quantization type: `load_in_4bit=True` passed bare
    to `from_pretrained`, or a `BitsAndBytesConfig` without `bnb_4bit_quant_type`.

    ## Why is this bad?
    bitsandbytes' defaults are FP4 without double quantization, not the NF4 +
    double-quant that QLoRA describes and most tutorials assume; NF4 is the better
    4-bit format for normally distributed weights, and the bare flag is deprecated in
    transformers in favour of `quantization_config`.

    ## When it fires
    4-bit loading whose quant type is bitsandbytes' default (fp4). It is a note: the
    format changes the quality of the quantized base, not its memory (MEM301 says what
    the missing double quantization costs), so it never fails a check.

    ## Example
    ```python
    AutoModelForCausalLM.from_pretrained(model_id, load_in_4bit=True)
    ```

    ## Use instead
    ```python
    AutoModelForCausalLM.from_pretrained(model_id, quantization_config=BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16))
    ```
    """

    code = "MEM303"
    name = "bare-load-in-4bit"
    severity = "note"
    summary = "load_in_4bit without a quant type: bitsandbytes defaults to FP4, no double quant"
    fix = Fix('add bnb_4bit_quant_type="nf4" to the BitsAndBytesConfig', "safe", "nf4-quant-type")
    VALID = (Sample(script(bnb="load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True",
                           lora=_LORA)),)
    INVALID = (Sample(script(model_kw="load_in_4bit=True", lora=_LORA), at="load_in_4bit=True"),
               Sample(script(bnb="load_in_4bit=True", lora=_LORA), at="BitsAndBytesConfig("))

    def check(self, ctx: Context) -> Iterator[Finding]:
        qt = ctx.plan.get("quant_type")
        if ctx.value("quant_bits") != 4 or qt.source != "library-default" or qt.value not in (None, "fp4"):
            return  # some wrappers (unsloth) default to nf4 themselves
        dq = "" if ctx.value("double_quant") else ", no double quantization"
        yield self.finding(ctx, f"4-bit loading without bnb_4bit_quant_type: bitsandbytes uses {qt.value or 'fp4'}{dq}; "
                                "QLoRA uses nf4 with double quantization",
                           "quant_type" if qt.span else "quant_bits", hint='bnb_4bit_quant_type="nf4"', fix=self.fix)


class PagedOptimizerRule(Rule):
    """
    ## What it does
    Notes a paged optimizer (`paged_adamw_8bit`, `paged_adamw_32bit`, …): its state lives
    in CUDA unified memory, which `torch.cuda.max_memory_allocated()` does not count.

    ## Why is this bad?
    It is not a bug, but it changes what you measure: the allocator's counters miss the
    optimizer state, `nvidia-smi` shows it, and under memory pressure the driver pages it
    to CPU memory (slower steps instead of an OOM). Compare memlint's estimate with
    `nvidia-smi`, not with `max_memory_allocated()`, for this state.

    ## When it fires
    A paged optimizer, always. It is a note: memlint reports the paged state beside the
    peak, not in it, and the note says why measured and estimated figures then differ.

    ## Example
    ```python
    TrainingArguments(optim="paged_adamw_8bit")
    ```

    ## Use instead
    Keep it, knowingly; or `optim="adamw_bnb_8bit"` to keep the state in the allocator.
    """

    code = "MEM304"
    name = "paged-optimizer-unmeasured"
    severity = "note"
    summary = "paged optimizer state lives outside max_memory_allocated()"
    VALID = (Sample(script(optim="adamw_torch")),)
    INVALID = (Sample(script(optim="paged_adamw_8bit"), at="optim="),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        optim = ctx.value("optimizer")
        if not isinstance(optim, str) or not optim.startswith("paged_"):
            return
        size = f" ({size_text(ctx.estimate.paged_optimizer)})" if ctx.estimate is not None else ""
        yield self.finding(ctx, f"{optim}: the optimizer state{size} lives in CUDA unified memory, outside "
                                "torch.cuda.max_memory_allocated(); under pressure it is paged to CPU", "optimizer")


class FullFinetuneWherePeftFitsRule(Rule):
    """
    ## What it does
    Reports full fine-tuning that does not fit on the configured GPU when LoRA or QLoRA
    (rank 16 on all linear layers, same micro-batch and sequence) would.

    ## Why is this bad?
    Full fine-tuning keeps gradients and optimizer state for every parameter: with
    AdamW in mixed precision about 16 bytes per parameter before activations. LoRA
    trains well under 1 % of them, and QLoRA also stores the frozen base in 4 bits.

    ## When it fires
    With a GPU configured: a full fine-tune that does not fit where LoRA or QLoRA (rank 16 on
    all linear layers, the run's micro-batch and sequence, a bf16 base under bf16 autocast) would
    fit with MEM102's headroom (the same verdict MEM101 and `memlint estimate` give; a method that
    would only fit tight is not offered).

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B")
    Trainer(model=model, ...)  # 24 GB card
    ```

    ## Use instead
    ```python
    model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"))
    ```
    """

    code = "MEM305"
    name = "full-finetune-where-peft-fits"
    severity = "warning"
    summary = "full fine-tuning does not fit, LoRA or QLoRA would"
    VALID = (Sample(script("meta-llama/Llama-3.2-1B", batch=1), gpu="RTX4090"),)
    INVALID = (Sample(script("meta-llama/Llama-3.1-8B", batch=1), gpu="RTX4090", at="from_pretrained("),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        from memlint.estimate.levers import LEVERS, apply

        est, s, f = ctx.estimate, ctx.setup, ctx.fit
        if f is None or s.method != "full" or f.status != "over":
            return
        gpu = ctx.gpu
        opts = []
        by_key = {lv.key: lv for lv in LEVERS}
        for lever in (by_key["lora"], by_key["qlora"]):  # the same LoRA and QLoRA as MEM101's advice and --compare
            step = lever.make(s)
            o = apply(s, [step], ctx.accounting) if step is not None else None
            if o is not None:
                opts.append((lever.title, o))
        # memlint.gpu's one notion of fit, as MEM101 weighs its suggestion: with the headroom, a paged
        # optimizer state counted as held
        fitting = [f"{label} (r=16, all linear layers) {size_text(o.peak)}" for label, o in opts
                   if ctx.fit_of(o.held).ok]
        if not fitting:
            return
        yield self.finding(ctx, f"full fine-tuning needs {size_text(est.peak)} and does not fit on {gpu[0]} ({size_text(gpu[1])}); "
                                f"{' or '.join(fitting)} would", "method",
                           related=(("model_id", "model set here"),), hint="train adapters with peft (LoRA/QLoRA)")
