"""MEM2xx: sequence length, padding, micro-batch, recompute, attention and logits."""

from __future__ import annotations

from typing import Iterator

from memlint.rules.base import Context, Finding, Fix, Rule, Sample
from memlint.rules.capacity import refit
from memlint.rules.samples import script
from memlint.vocab import size_text


def _seq_bytes(est) -> int:
    return est.bytes("activations") + est.bytes("logits")


class PadToMaxLengthRule(Rule):
    """
    ## What it does
    Reports tokenization or a collator that pads every sample to `max_length`.

    ## Why is this bad?
    Every micro-batch then costs what the worst one costs: activations and logits at
    `batch × max_length` on every step, however short the samples are. The peak is what
    it would be anyway (memlint sizes every run for its longest micro-batch), but every
    step pays it in compute.

    ## When it fires
    Whenever a tokenizer call or collator pads to `max_length` and the run does not pack.
    It is a note: padding changes what a typical step costs, not the peak, so it never
    decides whether the run fits and never fails a check.

    ## Example
    ```python
    tokenizer(batch["text"], truncation=True, max_length=2048, padding="max_length")
    ```

    ## Use instead
    Pad per batch with the collator:
    ```python
    tokenizer(batch["text"], truncation=True, max_length=2048)
    ...
    Trainer(..., data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    ```
    """

    code = "MEM201"
    name = "pad-to-max-length"
    severity = "note"
    summary = "every sample is padded to max_length, so every batch costs the worst case"
    fix = Fix("pad per batch in the collator instead of to max_length", "safe", "dynamic-padding")
    VALID = (Sample(script()), Sample(script(padding="longest")))
    INVALID = (Sample(script(padding="max_length"), at='padding="max_length"'),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.value("padding") != "max_length" or ctx.value("packing") is True:
            return
        L = ctx.value("max_length")
        cost = ""
        if ctx.estimate is not None:
            cost = f" ({size_text(_seq_bytes(ctx.estimate))} of activations and logits at {ctx.setup.batch} × {ctx.setup.seq})"
        yield self.finding(
            ctx, f"padding='max_length' pads every sample to {L or 'max_length'} tokens: every micro-batch "
                 f"costs the worst case in compute{cost}; the peak is the same with per-batch padding",
            "padding", related=(("max_length", "max_length set here"),),
            hint="pad per batch (a padding collator) instead", fix=self.fix,
        )


class LongestSampleSetsPeakRule(Rule):
    """
    ## What it does
    Reports padding to the longest sample in each micro-batch, with a large
    `max_length` and neither length grouping nor packing: the step that draws the
    longest sample sets the peak, and memlint says what that step costs against a
    typical one.

    ## Why is this bad?
    The first seed article's story: a LoRA run on a 24 GB card is fine for 200 steps and
    runs out of memory at step 213, whose micro-batch holds one 8,192-token document;
    padding makes all four samples 8,192 tokens long, 8× the activations of a typical
    batch. Measuring a few typical steps does not reveal it.

    ## Example
    ```python
    tokenizer(batch["text"], truncation=True, max_length=8192)
    TrainingArguments(per_device_train_batch_size=4)
    ```

    ## When it fires
    With padding to the longest sample, no packing or length grouping, a `max_length` at
    least `min-ratio` times `typical-length`, and the worst step costing at least `min-ratio`
    times a typical one. With a GPU configured it is a warning only where the worst step does
    not fit or is tight (under MEM102's headroom), and silent where it fits with room to
    spare: then the longest sample is harmless. Without a GPU it is a note.

    ## Use instead
    Size the run for the longest micro-batch; make it happen first with
    `group_by_length=True` (the Trainer puts the longest batch first), or pack samples,
    or truncate to a length that fits.

    ## Options
    `typical-length` (tokens in a typical padded batch, default 1024) and
    `min-ratio` (report when the worst step costs at least this many times a typical
    one in activations and logits, default 2).
    """

    code = "MEM202"
    name = "longest-sample-sets-peak"
    severity = "warning"
    advice = True
    summary = "padding to the longest sample: the step that draws it sets the peak"
    options = {"typical-length": 1024, "min-ratio": 2.0}
    fix = Fix("add group_by_length=True (the longest batch comes first)", "unsafe", "group-by-length")
    VALID = (Sample(script(batch=4, max_length=8192, args="group_by_length=True")),
             Sample(script(batch=4, max_length=1024)),
             Sample(script(batch=4, max_length=8192), gpu="H200"))  # the longest batch fits with room
    INVALID = (Sample(script(batch=4, max_length=8192), gpu="RTX4090", at="max_length=8192"),
               Sample(script(batch=4, max_length=8192), at="max_length=8192", severity="note"))

    def check(self, ctx: Context) -> Iterator[Finding]:
        est, s = ctx.estimate, ctx.setup
        if est is None or ctx.value("padding") != "longest":
            return
        if ctx.value("packing") is True or ctx.value("group_by_length") is True:
            return
        level = self.advice_severity(ctx)
        typical = int(self.opts["typical-length"])
        if level is None or s.seq < typical * float(self.opts["min-ratio"]):
            return
        from memlint.estimate import estimate

        usual = estimate(s.with_(seq=typical), ctx.accounting)
        worst, base = _seq_bytes(est), _seq_bytes(usual)
        if base and worst < float(self.opts["min-ratio"]) * base:
            return
        fits = ""
        if ctx.fit is not None and ctx.fit_of(usual.peak).status != "over" and ctx.fit.status == "over":
            fits = f"; on {ctx.gpu[0]} the typical step fits and this one does not"
        elif ctx.fit is not None:
            fits = (f"; on {ctx.gpu[0]} that step does not fit" if ctx.fit.status == "over" else
                    f"; on {ctx.gpu[0]} that step leaves less than the {ctx.min_headroom:.0%} headroom")
        step = (f"a step that draws a {s.seq}-token sample pads all {s.batch} samples to {s.seq} tokens"
                if s.batch > 1 else f"a step that draws a {s.seq}-token sample")
        yield self.finding(
            ctx, f"padding to the longest sample: {step}: {size_text(worst)} of activations and logits (peak "
                 f"{size_text(est.peak)}) vs {size_text(base)} for a typical {typical}-token {'batch' if s.batch > 1 else 'sample'}{fits}",
            "max_length", related=(("padding", "padding set here"), ("per_device_batch", "batch set here")),
            hint="size the run for the longest batch; group_by_length=True makes it the first step, packing or "
                 "truncation removes it", fix=self.fix, severity=level, worst_bytes=worst, typical_bytes=base,
        )


class RecomputeOffRule(Rule):
    """
    ## What it does
    Reports gradient checkpointing (activation recompute) turned off where turning it
    on would make the run fit on the configured GPU, or would save more than a set
    fraction of the peak.

    ## Why is this bad?
    Without recompute every decoder layer keeps its intermediate tensors for backward;
    activations grow with `batch × seq × layers` and dominate the peak at long sequences.
    Recompute keeps only each layer's input and re-runs one layer at a time in backward,
    for about a third more compute.

    ## Example
    ```python
    TrainingArguments(per_device_train_batch_size=4, gradient_checkpointing=False)
    ```

    ## Use instead
    ```python
    TrainingArguments(per_device_train_batch_size=4, gradient_checkpointing=True,
                      gradient_checkpointing_kwargs={"use_reentrant": False})
    ```

    ## When it fires
    Recompute is off (said so in the script or by a library default) and turning it on
    saves at least `min-saving` of the peak, or makes the run fit with the headroom. With a
    GPU configured it is a warning only where the run does not fit or is tight, and silent
    where it fits with room to spare (recompute then only costs compute). Without a GPU it
    is a note.

    ## Options
    `min-saving` (fraction of the peak, default 0.25).
    """

    code = "MEM203"
    name = "recompute-off"
    severity = "warning"
    advice = True
    summary = "gradient checkpointing is off where turning it on fits the GPU or saves a lot"
    options = {"min-saving": 0.25}
    fix = Fix("turn on gradient_checkpointing in the training arguments", "safe", "gradient-checkpointing")
    VALID = (Sample(script(batch=4, recompute=True)), Sample(script(batch=1, max_length=256, recompute=False)),
             Sample(script(batch=4, recompute=False), gpu="H200"))  # fits with room: recompute only costs compute
    INVALID = (Sample(script(batch=4, recompute=False), gpu="RTX4090", at="gradient_checkpointing=False"),
               Sample(script(batch=4, recompute=False), at="gradient_checkpointing=False", severity="note"))

    def check(self, ctx: Context) -> Iterator[Finding]:
        est, s = ctx.estimate, ctx.setup
        level = self.advice_severity(ctx)
        if est is None or level is None or s.recompute or not ctx.known("gradient_checkpointing"):
            return
        if s.model_code == "litgpt":  # LitGPT has no such setting on one device (it checkpoints Blocks under FSDP)
            return
        peak_on, fit_on = refit(ctx, recompute=True)
        saved = est.peak - peak_on
        rescues = fit_on is not None and fit_on.ok
        if not rescues and saved < float(self.opts["min-saving"]) * est.peak:
            return
        tail = f" and makes it fit on {ctx.gpu[0]}" if rescues else ""
        yield self.finding(
            ctx, f"gradient checkpointing is off: turning it on saves {size_text(saved)} ({saved / est.peak:.0%}) of the "
                 f"{size_text(est.peak)} peak{tail}",
            "gradient_checkpointing", related=(("per_device_batch", "batch set here"),),
            hint="gradient_checkpointing=True (about a third more compute)", fix=self.fix, severity=level,
            saved_bytes=saved, peak_with_recompute=peak_on,
        )


class EagerAttentionRule(Rule):
    """
    ## What it does
    Reports `attn_implementation="eager"` where SDPA would save memory.

    ## Why is this bad?
    Eager attention materialises the `batch × heads × seq × seq` score and probability
    matrices in every layer (and keeps them for backward); SDPA and FlashAttention
    never do. At 4,096 tokens that is gigabytes per micro-batch.

    ## Example
    ```python
    AutoModelForCausalLM.from_pretrained(model_id, attn_implementation="eager")
    ```

    ## Use instead
    ```python
    AutoModelForCausalLM.from_pretrained(model_id, attn_implementation="sdpa")
    ```

    ## When it fires
    Eager attention where SDPA would save at least `min-saving`, at any length (a large
    micro-batch at 1,024 tokens keeps as many scores as a small one at 4,096). With a GPU
    configured it is a warning only where the run does not fit or is tight, and silent where
    it fits with room to spare. Without a GPU it is a note. SDPA is also the first lever of
    MEM101's advice: it costs nothing and is faster.

    ## Options
    `min-length` (tokens below which it stays silent, default 0: the saving decides) and
    `min-saving` (bytes saved by SDPA before reporting, default 1 GiB).
    """

    code = "MEM204"
    name = "eager-attention-long-sequence"
    severity = "warning"
    advice = True
    summary = "eager attention materialises seq² scores where SDPA would save memory"
    options = {"min-length": 0, "min-saving": 1 << 30}
    VALID = (Sample(script(attn="sdpa", max_length=4096)), Sample(script(attn="eager", max_length=512)),
             Sample(script(attn="eager", max_length=4096, recompute=False), gpu="B200"))
    INVALID = (Sample(script(attn="eager", max_length=4096, recompute=False), gpu="RTX4090",
                      at='attn_implementation="eager"'),
               Sample(script(attn="eager", max_length=4096, recompute=False), at='attn_implementation="eager"',
                      severity="note"),
               # a short sequence at a large micro-batch: SDPA is the change that fits
               Sample(script(attn="eager", max_length=1024, batch=4, recompute=False), gpu="24",
                      at='attn_implementation="eager"'))

    def check(self, ctx: Context) -> Iterator[Finding]:
        est, s = ctx.estimate, ctx.setup
        level = self.advice_severity(ctx)
        if est is None or level is None or s.attn != "eager" or s.seq < int(self.opts["min-length"]):
            return
        peak_sdpa, fit_sdpa = refit(ctx, attn="sdpa")
        saved = est.peak - peak_sdpa
        if saved < int(self.opts["min-saving"]):
            return
        tail = ""
        if fit_sdpa is not None and fit_sdpa.runs:
            tail = f" and fits on {ctx.gpu[0]}" if fit_sdpa.ok else f" and fits on {ctx.gpu[0]}, tight"
        yield self.finding(
            ctx, f"eager attention at {s.seq} tokens keeps {s.batch}×{s.model.heads}×{s.seq}² scores per layer: SDPA would "
                 f"save {size_text(saved)} of the {size_text(est.peak)} peak{tail}",
            "attn_implementation", related=(("max_length", "max_length set here"),),
            hint='attn_implementation="sdpa" (or "flash_attention_2")', severity=level, saved_bytes=saved,
        )


class LargeLogitsRule(Rule):
    """
    ## What it does
    Reports full-vocabulary logits that take a large share of the peak: a large
    vocabulary at a long sequence, where the loss materialises `batch × seq × vocab`
    logits, their fp32 upcast and log-softmax.

    ## Why is this bad?
    With a 128k–256k vocabulary the logits of one 8k-token sample are gigabytes, as much
    as all the layers' activations with recompute on. Recompute does not help; the loss
    is computed at once over the whole sequence.

    ## Example
    Llama-3 (128,256 tokens) or Gemma (256,000) at 8,192 tokens per sample.

    ## Use instead
    A chunked or fused linear-cross-entropy loss that never materialises the full
    logits (Liger Kernel's `FusedLinearCrossEntropy`, Apple's Cut Cross-Entropy), a
    shorter maximum length, or a smaller micro-batch.

    Silent when the run already uses a fused loss (`use_liger_kernel=True`, axolotl's
    `liger_fused_linear_cross_entropy` or `cut_cross_entropy`, LLaMA-Factory's
    `enable_liger_kernel`): memlint then counts one chunk of logits, not the full tensor.

    ## When it fires
    A vocabulary of at least `min-vocab` tokens, no fused loss, and logits of at least
    `min-fraction` of the allocated peak. With a GPU configured it is a warning only where
    the run does not fit or is tight (under MEM102's headroom), and silent where it fits
    with room to spare: a share of the peak alone says nothing about fit. Without a GPU it
    is a note.

    ## Options
    `min-vocab` (default 100,000) and `min-fraction` (of the allocated peak, default 0.2).
    """

    code = "MEM205"
    name = "large-fp32-logits"
    severity = "warning"
    advice = True
    summary = "full-vocabulary fp32 logits take a large share of the peak"
    options = {"min-vocab": 100_000, "min-fraction": 0.2}
    VALID = (Sample(script("Qwen/Qwen2.5-0.5B", max_length=512)), Sample(script("openai-community/gpt2", max_length=1024)),
             Sample(script("meta-llama/Llama-3.2-1B", batch=2, max_length=8192, args="use_liger_kernel=True")),
             # a Qwen2.5-0.5B QLoRA run with room to spare on an 80 GB card: large logits, no warning
             Sample(script("Qwen/Qwen2.5-0.5B", batch=4, bnb="load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                           "bnb_4bit_use_double_quant=True", lora="r=16, target_modules='all-linear'"), gpu="A100-80GB"))
    INVALID = (Sample(script("meta-llama/Llama-3.2-1B", batch=2, max_length=8192), gpu="RTX4090", at="MODEL_ID ="),
               Sample(script("meta-llama/Llama-3.2-1B", batch=2, max_length=8192), at="MODEL_ID =", severity="note"))

    def check(self, ctx: Context) -> Iterator[Finding]:
        est, s = ctx.estimate, ctx.setup
        level = self.advice_severity(ctx)
        if est is None or level is None or s.fused_loss or s.model.vocab < int(self.opts["min-vocab"]):
            return
        from memlint.estimate.activations import autocast_weight_copies

        logits = est.bytes("logits")  # the estimate table's figure, quoted as it is
        # The logits component also holds autocast's half copy of an fp32 lm_head (k-bit prep
        # upcasts it), which a fused loss keeps: the share that decides is the logits' own, and
        # what a fused loss saves is re-estimated.
        head_copy = autocast_weight_copies(s)[1] if est.accounting == "real" else 0
        if (logits - head_copy) / max(est.allocated_peak, 1) < float(self.opts["min-fraction"]):
            return
        dt = s.compute_dtype
        what = f"{dt} logits, their fp32 upcast and log-softmax" if dt != "fp32" else "fp32 logits and log-softmax"
        if s.chunked_loss:
            what = f"torchtune's chunked cross-entropy: {s.chunked_loss} {dt} logit chunks and their fp32 log-softmax"
        if s.objective != "sft":
            rows = "chosen + rejected rows" if s.objective in ("dpo", "orpo", "cpo", "simpo") else "rows"
            amp = s.precision in ("amp-bf16", "amp-fp16")
            what = (f"{'fp32' if amp else dt} logits of the {rows}"
                    + (" (accelerate upcasts the model's outputs)" if amp else "") + ", kept for the log-probs' backward"
                    + (", and the reference forward's" if s.reference in ("copy", "adapter-disabled") else ""))
        if head_copy:
            what += f", autocast's {size_text(head_copy)} copy of the fp32 lm_head"
        saving = ""
        if s.objective == "sft" and not s.seq2seq:  # (an encoder-decoder's fused loss is not modelled: refused)
            peak_fused, fit_fused = refit(ctx, fused_loss=True, chunked_loss=0)
            saving = f"; a fused cross-entropy saves {size_text(est.peak - peak_fused)}"
            if fit_fused is not None and fit_fused.ok and not ctx.fit.ok:
                saving += f" and fits on {ctx.gpu[0]}"
        yield self.finding(
            ctx, f"logits over a {s.model.vocab:,}-token vocabulary at {s.batch} × {s.tgt if s.seq2seq else s.seq}"
                 f"{' (the target length)' if s.seq2seq else ''}: {size_text(logits)} of the "
                 f"{size_text(est.peak)} peak ({what}){saving}",
            ("model_id", "max_length"), related=(("max_length", "max_length set here"), ("per_device_batch", "batch set here")),
            hint=("a shorter target length (max_target_length)" if s.seq2seq else
                  "a fused/chunked cross-entropy (use_liger_kernel=True, Cut Cross-Entropy) or a shorter max_length"),
            severity=level, logits_bytes=logits, materialised_bytes=logits - head_copy,
        )
