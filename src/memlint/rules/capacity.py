"""MEM1xx: does the worst-case step fit on the configured GPU?

Silent when unsure: no GPU configured, or no estimate (an unknown value, an unknown
model), means no capacity finding; MEM0xx notes say what is missing.
"""

from __future__ import annotations

from typing import Iterator

from memlint.gpu import MIN_HEADROOM, Fit
from memlint.plan import assume_args
from memlint.rules.base import Context, Finding, Fix, Rule, Sample
from memlint.rules.samples import script
from memlint.vocab import size_text


def per_gpu(ctx: Context) -> str:
    s = ctx.setup
    return f" per GPU ({s.gpus} GPUs, {s.shard})" if s is not None and s.gpus > 1 else ""


class ExceedsGpuRule(Rule):
    """
    ## What it does
    Compares the estimated peak of the worst-case training step (the longest micro-batch
    padding can produce) with the configured GPU's memory and, when it does not fit, names
    the cheapest set of changes that does: every lever memlint knows (a fused cross-entropy,
    an 8-bit or paged optimizer, gradient checkpointing, a smaller micro-batch with more
    accumulation, LoRA, QLoRA, double quantization, SDPA, a shorter max_length) that is not
    already on is re-estimated alone and in small combinations, and the cheapest combination
    that fits with the headroom is named with the line each change goes on. The help line
    ranks the levers by what each saves here.

    ## Why is this bad?
    The run will stop with `CUDA out of memory`: at the first step when every batch is
    padded to the maximum length, or at whichever step first draws the longest sample.

    ## When it fires
    Only with a GPU configured and an estimate (every value known): the estimated peak is
    larger than the GPU's memory. It is an error: the run does not fit.

    ## Example
    ```python
    # Llama-3.2-1B, full fine-tuning on a 24 GB card
    args = TrainingArguments(per_device_train_batch_size=8, gradient_checkpointing=False)
    ```

    ## Use instead
    ```python
    args = TrainingArguments(per_device_train_batch_size=2, gradient_accumulation_steps=4,
                             gradient_checkpointing=True)
    ```

    ## Fix
    Unsafe (`--fix --unsafe-fixes`): the suggestion's values written where the script sets them
    (`per_device_train_batch_size` and `gradient_accumulation_steps`, `gradient_checkpointing`,
    `attn_implementation`, `optim`, `use_liger_kernel`, `max_length`, ...). It changes the run's
    step time (and, for SDPA or a fused loss, its numerics in the last bits), hence unsafe. A
    suggestion that changes the method (LoRA, QLoRA) offers no fix.

    ## Options
    The GPU: `--gpu NAME|GiB` or `gpu = "A100-80GB"` in `[tool.memlint]`. Without one,
    memlint reports the fit on common GPUs and raises no capacity finding. The headroom a
    suggestion leaves is MEM102's `min-headroom`.
    """

    code = "MEM101"
    name = "exceeds-gpu-memory"
    severity = "error"
    summary = "the estimated peak does not fit in the configured GPU's memory"
    fix = Fix("apply the suggestion at the lines it names", "unsafe", "suggestion")
    VALID = (Sample(script(batch=1), gpu="RTX4090"), Sample(script(batch=8, recompute=False)))
    INVALID = (Sample(script(batch=8, recompute=False), gpu="RTX4090", at="per_device_train_batch_size"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        from memlint.estimate.levers import cheapest, singles

        est, f, s = ctx.estimate, ctx.fit, ctx.setup
        if f is None or f.status != "over":
            return
        label, total = f.gpu.label, f.gpu.total
        best = cheapest(s, f.gpu, ctx.accounting, ctx.min_headroom, plan_only=True)
        if best is not None:
            advice = f"fits with {' and '.join(spell(ctx, st) for st in best.steps)}: {size_text(best.peak)} on {label}"
            if best.estimate.paged_optimizer and not est.paged_optimizer:
                advice += f" (+{size_text(best.estimate.paged_optimizer)} of paged optimizer state)"
            if best.fit.status == "tight":
                advice += f" ({best.fit.text()})"
        else:
            advice = _nothing_fits(ctx)
        ranked = singles(s, ctx.accounting, plan_only=True)[:6]
        held = est.peak + est.paged_optimizer  # a paged state is still held: paging it saves nothing
        hint = ("levers by what each saves here: " + ", ".join(f"{o.label} −{size_text(held - o.held)}"
                                                                for o in ranked)) if ranked else None
        msg = (f"estimated peak {size_text(est.peak)}{per_gpu(ctx)} exceeds {label} ({size_text(total)}) by "
               f"{size_text(est.peak - total)} at micro-batch {s.batch} × {s.seq} ({est.peak_phase}); {advice}")
        data = {}
        fix = None
        if best is not None:
            data["suggestion"] = {"changes": [{"lever": st.lever, "words": st.words, "plan": dict(st.plan or {})}
                                              for st in best.steps],
                                  "assume": assumptions(best.plan or {}), "peak_bytes": best.peak}
            if best.plan:  # the same values, written at the lines that set them (memlint.fix's "suggestion")
                fix = Fix(self.fix.title, "unsafe", "suggestion", {"changes": [
                    {"field": name, "value": value, "line": _line(ctx, name)} for name, value in best.plan.items()]})
        yield self.finding(
            ctx, msg, "per_device_batch",
            related=(("max_length", "max_length set here"), ("model_id", "model set here"),
                     ("gradient_checkpointing", "gradient checkpointing set here")),
            hint=hint, fix=fix, peak_bytes=est.peak, gpu=label, gpu_bytes=total, **data,
        )


def _line(ctx: Context, name: str) -> int | None:
    """The line of this file that sets plan field `name` (None: set elsewhere, or nowhere)."""
    span = ctx.span_of(name, fallback=False)
    return span.line if span is not None and span.path == ctx.plan.path else None


def _nothing_fits(ctx: Context) -> str:
    """What to say when no combination of levers fits: how far the smallest step is."""
    from memlint.estimate import estimate

    s, est = ctx.setup, ctx.estimate
    state = est.bytes("weights") + est.bytes("gradients") + est.bytes("optimizer")
    least = estimate(s.with_(batch=1, seq=128), ctx.accounting).peak
    return (f"no change memlint knows fits: micro-batch 1 × 128 alone needs {size_text(least)} (weights, gradients "
            f"and optimizer state {size_text(state)}, the optimizer step and overhead); a larger GPU, more GPUs with "
            f"sharding, or CPU offload")


def spell(ctx: Context, st) -> str:
    """A lever's step as the script says it, with the line it goes on: 'gradient_checkpointing=True at train.py:15'."""
    at = next(iter(st.plan), None) if st.plan else None
    span = ctx.span_of(at, fallback=False) if at else None
    words = st.words
    if ctx.plan.kind not in ("python", "notebook"):
        words = _config_words(ctx, st, span)
    return f"{words} at {ctx.where(span)}" if span is not None else words


def _config_words(ctx: Context, st, span) -> str:
    """In a YAML/JSON config: the key written on the line and its new value ('micro_batch_size: 1')."""
    import re

    from memlint.estimate.levers import LEVER_TITLE

    line = ctx.lines[span.line - 1] if span is not None and span.path == ctx.plan.path and span.line <= len(ctx.lines) else ""
    m = re.match(r"""^\s*(?:-\s*)?["']?([A-Za-z_][\w.\-]*)["']?\s*:""", line)
    if m is None or not st.plan:
        return LEVER_TITLE[st.lever] + (f" ({st.words})" if st.lever in ("micro-batch", "max-length") else "")
    field, value = next(iter(st.plan.items()))
    value = str(value).lower() if isinstance(value, bool) else value
    value = _config_value(ctx.plan.kind, field, value)
    rest = ""
    if st.lever == "micro-batch":
        rest = f" (gradient accumulation {ctx.setup.grad_accum} → {st.plan['grad_accum']})"
    return f"{m.group(1)}: {value}{rest}"


def _config_value(kind: str, field: str, value):
    """A plan value as the framework's config spells it (frameworks.json "config_values": NeMo's
    activations_checkpoint_granularity takes 'full', not true), else the value."""
    from memlint import data

    fw = data.load("frameworks.json")["frameworks"].get(kind, {})
    return fw.get("config_values", {}).get(field, {}).get(str(value), value)


def assumptions(plan: dict) -> list[str]:
    """Plan values as `--assume key=value` arguments (what the suggestion is, in plan terms)."""
    return assume_args(plan)


class LowHeadroomRule(Rule):
    """
    ## What it does
    Reports a configuration that fits on the configured GPU with less than a set
    fraction of its memory to spare (10 % by default).

    ## Why is this bad?
    The estimate is exact for the tensors PyTorch allocates but not for everything
    around them: allocator fragmentation over a long run, a evaluation pass, a
    checkpoint save, another process on the GPU. A run this close to the limit tends to
    fail hours in.

    ## Example
    A peak of 23.2 GiB on a 24 GiB card.

    ## Use instead
    Leave a margin: a smaller micro-batch with more accumulation, or recompute on.

    ## When it fires
    With a GPU configured: the peak fits but leaves less than `min-headroom` of the GPU free.
    The same headroom is what `memlint estimate` calls "tight" and `memlint diff` fails on.

    ## Options
    `min-headroom` (fraction of the GPU's memory, default 0.10): the one headroom every front
    door uses (estimate, plan, check, diff, %memcheck).
    """

    code = "MEM102"
    name = "low-headroom"
    severity = "warning"
    summary = "fits on the configured GPU with less than 10 % headroom"
    options = {"min-headroom": MIN_HEADROOM}
    VALID = (Sample(script(batch=1), gpu="RTX4090"), Sample(script(batch=8, recompute=False), gpu="RTX4090"))
    INVALID = (Sample(script(batch=1), gpu="13.5", at="per_device_train_batch_size"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        f = ctx.fit
        if f is None or f.status != "tight":
            return
        from memlint.estimate.levers import cheapest

        est = ctx.estimate
        label, total, free = f.gpu.label, f.gpu.total, f.free
        best = cheapest(ctx.setup, f.gpu, ctx.accounting, ctx.min_headroom, plan_only=True)
        hint = "leave a margin for fragmentation, evaluation and checkpointing"
        if best is not None and best.fit.ok:
            hint = (f"{' and '.join(spell(ctx, st) for st in best.steps)} leaves {size_text(best.fit.free)} "
                    f"({best.fit.free / total:.0%}): {size_text(best.peak)}")
        yield self.finding(
            ctx, f"fits on {label} with only {size_text(free)} ({free / total:.0%}) to spare, under the "
                 f"{f.min_headroom:.0%} headroom: estimated peak {size_text(est.peak)}{per_gpu(ctx)} of {size_text(total)}",
            "per_device_batch", related=(("max_length", "max_length set here"),),
            hint=hint, peak_bytes=est.peak, gpu=label, gpu_bytes=total,
        )


class UnsupportedOnGpuRule(Rule):
    """
    ## What it does
    Reports a run that needs a capability the configured GPU does not have: bf16 compute
    (`bf16=True`, `bnb_4bit_compute_dtype=torch.bfloat16`) or FlashAttention-2 on a GPU older
    than Ampere (compute capability 8.0), such as a T4. The capabilities are data
    (`data/gpus.json`).

    ## Why is this bad?
    The run does not start, whatever its memory: transformers refuses `bf16=True` on a GPU
    without bf16 ("Your setup doesn't support bf16/gpu"), newer PyTorch builds emulate bf16 at
    a fraction of fp16's speed, and flash-attn has no kernels for it.

    ## When it fires
    With a GPU configured whose entry in `data/gpus.json` says it lacks the capability. It is
    an error: `memlint estimate` says "no" in its fits column for the same reason.

    ## Example
    ```python
    TrainingArguments(bf16=True)  # on a T4
    ```

    ## Use instead
    ```python
    TrainingArguments(fp16=True)
    ```
    """

    code = "MEM104"
    name = "unsupported-on-gpu"
    severity = "error"
    summary = "the run needs bf16 or FlashAttention-2, which the configured GPU lacks"
    VALID = (Sample(script(precision="fp16=True", dtype="torch.float16"), gpu="T4"),
             Sample(script(precision="bf16=True"), gpu="L4"))
    INVALID = (Sample(script(precision="bf16=True"), gpu="T4", at="bf16=True"),
               Sample(script(precision="fp16=True", dtype="torch.float16", attn="flash_attention_2"), gpu="T4",
                      at="flash_attention_2"))

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.gpu is None or ctx.setup is None:
            return
        f = ctx.fit_of(ctx.estimate.peak if ctx.estimate is not None else 0)
        g = f.gpu
        cc = (g.entry or {}).get("compute_capability")
        arch = f" (compute capability {cc})" if cc else ""
        if "bf16" in f.missing:
            at = "precision" if ctx.plan.get("precision").span else "compute_dtype"
            yield self.finding(
                ctx, f"bf16 compute on {g.label}{arch}, which has no bf16: transformers refuses bf16=True there, "
                     "newer PyTorch emulates it at a fraction of fp16's speed", (at, "compute_dtype"),
                hint="fp16=True (and bnb_4bit_compute_dtype=torch.float16), or a bf16 GPU (Ampere or newer)")
        if "flash_attention_2" in f.missing:
            yield self.finding(
                ctx, f'attn_implementation="flash_attention_2" on {g.label}{arch}: FlashAttention-2 needs compute '
                     "capability 8.0 (Ampere) or newer", "attn_implementation", hint='attn_implementation="sdpa"')


class EvalBatchExceedsGpuRule(Rule):
    """
    ## What it does
    Estimates the evaluation step that the Trainer runs between training steps (weights
    and optimizer state still resident, full-vocabulary logits for the eval micro-batch)
    and reports an eval micro-batch that does not fit although the training one does.

    ## Why is this bad?
    The run trains happily until the first evaluation, often after an hour, and then
    runs out of memory: `per_device_eval_batch_size` is usually set larger than the
    training micro-batch ("no gradients, so it is cheaper"), but the logits and their
    fp32 upcast grow with it, and the optimizer state has not gone anywhere.

    ## When it fires
    With a GPU configured and an explicit `per_device_eval_batch_size`: the training step fits
    and the evaluation step does not. It is an error: the run stops at its first evaluation.

    ## Example
    ```python
    TrainingArguments(per_device_train_batch_size=1, per_device_eval_batch_size=32,
                      eval_strategy="steps")
    ```

    ## Use instead
    ```python
    TrainingArguments(per_device_train_batch_size=1, per_device_eval_batch_size=4,
                      eval_strategy="steps")
    ```
    """

    code = "MEM103"
    name = "eval-batch-exceeds-gpu"
    severity = "error"
    summary = "the eval micro-batch does not fit although the training one does"
    VALID = (Sample(script(batch=1, args="per_device_eval_batch_size=2"), gpu="RTX4090"),)
    INVALID = (Sample(script(batch=1, args="per_device_eval_batch_size=32"), gpu="RTX4090",
                      at="per_device_eval_batch_size"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        from memlint.estimate.evaluation import eval_estimate

        est, gpu, s, f = ctx.estimate, ctx.gpu, ctx.setup, ctx.fit
        v = ctx.plan.get("eval_batch")
        # The library default (8) only matters if the script evaluates, which memlint
        # cannot always tell: an explicit value says it does.
        if f is None or f.status == "over" or not v.known or v.source == "library-default":
            return
        if not isinstance(v.value, int) or v.value < 1:
            return
        ev = eval_estimate(s, v.value, ctx.accounting)
        if ctx.fit_of(ev.peak).status != "over":
            return
        yield self.finding(
            ctx, f"evaluation at per_device_eval_batch_size={v.value} × {ev.seq} needs {size_text(ev.peak)} "
                 f"(logits {size_text(ev.logits)}, weights and optimizer state {size_text(ev.weights + ev.optimizer)}) "
                 f"and exceeds {gpu[0]} ({size_text(gpu[1])}); training fits at {size_text(est.peak)}",
            "eval_batch", related=(("per_device_batch", "training micro-batch set here"),),
            hint="lower per_device_eval_batch_size", eval_peak_bytes=ev.peak, gpu_bytes=gpu[1],
        )


def refit(ctx: Context, **changes) -> "tuple[int, Fit | None]":
    """Peak of the same run with `changes`, and its fit on the configured GPU (None without one). A change memlint
    does not model for this run (Setup refuses it: gradient checkpointing on BART) saves nothing: the run's own
    peak, no fit."""
    from memlint.errors import MemlintError
    from memlint.estimate import estimate

    try:
        changed = ctx.setup.with_(**changes)
    except MemlintError:
        return ctx.estimate.peak, None
    e = estimate(changed, ctx.accounting)
    return e.peak, ctx.fit_of(e.peak)
