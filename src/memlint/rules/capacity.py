"""MEM1xx: does the worst-case step fit on the configured GPU?

Silent when unsure: no GPU configured, or no estimate (an unknown value, an unknown
model), means no capacity finding; MEM0xx notes say what is missing.
"""

from __future__ import annotations

from typing import Iterator

from memlint.estimate import GIB, estimate, max_batch, max_seq
from memlint.rules.base import Context, Finding, Rule, Sample
from memlint.rules.samples import script
from memlint.vocab import size_text


def per_gpu(ctx: Context) -> str:
    s = ctx.setup
    return f" per GPU ({s.gpus} GPUs, {s.shard})" if s is not None and s.gpus > 1 else ""


class ExceedsGpuRule(Rule):
    """
    ## What it does
    Compares the estimated peak of the worst-case training step (the longest micro-batch
    padding can produce) with the configured GPU's memory, and says by how much it is
    over, the largest micro-batch that fits and the longest sequence that fits at the
    configured micro-batch.

    ## Why is this bad?
    The run will stop with `CUDA out of memory`: at the first step when every batch is
    padded to the maximum length, or at whichever step first draws the longest sample.

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

    ## Options
    The GPU: `--gpu NAME|GiB` or `gpu = "A100-80GB"` in `[tool.memlint]`. Without one,
    memlint reports the fit on common GPUs and raises no capacity finding.
    """

    code = "MEM101"
    name = "exceeds-gpu-memory"
    severity = "error"
    summary = "the estimated peak does not fit in the configured GPU's memory"
    VALID = (Sample(script(batch=1), gpu="RTX4090"), Sample(script(batch=8, recompute=False)))
    INVALID = (Sample(script(batch=8, recompute=False), gpu="RTX4090", at="per_device_train_batch_size"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        est, gpu, s = ctx.estimate, ctx.gpu, ctx.setup
        if est is None or gpu is None or est.peak <= gpu[1]:
            return
        label, total, cbytes = gpu
        fit_b = max_batch(s, ctx.accounting, total, cbytes)
        if fit_b:
            advice = f"largest micro-batch that fits: {fit_b}"
            fit_s = max_seq(s, ctx.accounting, total, cbytes)
            if fit_s:
                advice += f"; longest sequence at micro-batch {s.batch}: {fit_s}"
        else:
            fit_s = max_seq(s.with_(batch=1), ctx.accounting, total, cbytes)
            state = est.bytes("weights") + est.bytes("gradients") + est.bytes("optimizer")
            if fit_s:
                advice = f"not even micro-batch 1 × {s.seq} fits; longest sequence at micro-batch 1: {fit_s}"
            else:
                least = estimate(s.with_(batch=1, seq=128), ctx.accounting, cbytes).peak
                advice = (f"not even micro-batch 1 × 128 fits ({size_text(least)}: weights, gradients and optimizer "
                          f"state {size_text(state)}, the optimizer step and overhead)")
        msg = (f"estimated peak {size_text(est.peak)}{per_gpu(ctx)} exceeds {label} ({size_text(total)}) by "
               f"{size_text(est.peak - total)} at micro-batch {s.batch} × {s.seq} ({est.peak_phase}); {advice}")
        yield self.finding(
            ctx, msg, "per_device_batch",
            related=(("max_length", "max_length set here"), ("model_id", "model set here"),
                     ("gradient_checkpointing", "gradient checkpointing set here")),
            hint="lower the micro-batch (raise gradient_accumulation_steps to keep the effective batch), "
                 "turn on gradient checkpointing, or use LoRA/QLoRA",
            peak_bytes=est.peak, gpu=label, gpu_bytes=total, max_batch=fit_b,
        )


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

    ## Options
    `min-headroom` (fraction of the GPU's memory, default 0.10).
    """

    code = "MEM102"
    name = "low-headroom"
    severity = "warning"
    summary = "fits on the configured GPU with less than 10 % headroom"
    options = {"min-headroom": 0.10}
    VALID = (Sample(script(batch=1), gpu="RTX4090"), Sample(script(batch=8, recompute=False), gpu="RTX4090"))
    INVALID = (Sample(script(batch=1), gpu="13.5", at="per_device_train_batch_size"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        est, gpu = ctx.estimate, ctx.gpu
        if est is None or gpu is None or est.peak > gpu[1]:
            return
        label, total, _ = gpu
        free = total - est.peak
        if free >= float(self.opts["min-headroom"]) * total:
            return
        yield self.finding(
            ctx, f"fits on {label} with only {size_text(free)} ({free / total:.0%}) to spare: estimated peak "
                 f"{size_text(est.peak)}{per_gpu(ctx)} of {size_text(total)}",
            "per_device_batch", related=(("max_length", "max_length set here"),),
            hint="leave a margin for fragmentation, evaluation and checkpointing",
            peak_bytes=est.peak, gpu=label, gpu_bytes=total,
        )


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

        est, gpu, s = ctx.estimate, ctx.gpu, ctx.setup
        v = ctx.plan.get("eval_batch")
        # The library default (8) only matters if the script evaluates, which memlint
        # cannot always tell: an explicit value says it does.
        if est is None or gpu is None or est.peak > gpu[1] or not v.known or v.source == "library-default":
            return
        if not isinstance(v.value, int) or v.value < 1:
            return
        ev = eval_estimate(s, v.value, ctx.accounting, gpu[2])
        if ev.peak <= gpu[1]:
            return
        yield self.finding(
            ctx, f"evaluation at per_device_eval_batch_size={v.value} × {ev.seq} needs {size_text(ev.peak)} "
                 f"(logits {size_text(ev.logits)}, weights and optimizer state {size_text(ev.weights + ev.optimizer)}) "
                 f"and exceeds {gpu[0]} ({size_text(gpu[1])}); training fits at {size_text(est.peak)}",
            "eval_batch", related=(("per_device_batch", "training micro-batch set here"),),
            hint="lower per_device_eval_batch_size", eval_peak_bytes=ev.peak, gpu_bytes=gpu[1],
        )


def refit(ctx: Context, **changes) -> "tuple[int, bool | None]":
    """Peak of the same run with `changes`, and whether it fits the configured GPU."""
    e = estimate(ctx.setup.with_(**changes), ctx.accounting, ctx.gpu[2] if ctx.gpu else None)
    return e.peak, (e.peak <= ctx.gpu[1] if ctx.gpu else None)
