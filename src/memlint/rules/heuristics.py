"""MEM4xx: heuristics that are right often enough to be worth knowing, off by default."""

from __future__ import annotations

from typing import Iterator

from memlint.rules.base import Context, Finding, Rule, Sample
from memlint.rules.samples import script
from memlint.vocab import size_text


class EvalBatchDefaultRule(Rule):
    """
    ## What it does
    Reports `per_device_eval_batch_size` left at the library default (8) when the
    training micro-batch is smaller and the eval batch of 8 would not fit on the GPU.

    ## Why is this bad?
    Scripts that shrink the training micro-batch to fit often forget the eval one. If the
    script evaluates during training, the first evaluation runs out of memory. memlint
    cannot always tell whether a script evaluates, hence off by default.

    ## When it fires
    Off by default: the eval batch is the library default (8), the script may not evaluate,
    and memlint cannot always tell.

    ## Example
    ```python
    TrainingArguments(per_device_train_batch_size=1, eval_strategy="steps")
    ```

    ## Use instead
    ```python
    TrainingArguments(per_device_train_batch_size=1, per_device_eval_batch_size=1,
                      eval_strategy="steps")
    ```
    """

    code = "MEM401"
    name = "eval-batch-library-default"
    severity = "warning"
    default_enabled = False
    summary = "per_device_eval_batch_size left at 8 where 8 would not fit"
    VALID = (Sample(script(batch=1, args="per_device_eval_batch_size=1"), gpu="RTX4090"),)
    INVALID = (Sample(script(batch=1, recompute=False), gpu="RTX4090", at="TrainingArguments("),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        from memlint.estimate.evaluation import eval_estimate

        v = ctx.plan.get("eval_batch")
        est, gpu = ctx.estimate, ctx.gpu
        if est is None or gpu is None or v.source != "library-default" or not isinstance(v.value, int):
            return
        if v.value <= ctx.setup.batch or ctx.fit.status == "over":
            return
        ev = eval_estimate(ctx.setup, v.value, ctx.accounting)
        if ctx.fit_of(ev.peak).status != "over":
            return
        yield self.finding(ctx, f"per_device_eval_batch_size is the library default {v.value}: evaluation would need "
                                f"{size_text(ev.peak)} on {gpu[0]} ({size_text(gpu[1])})", "eval_batch",
                           hint=f"per_device_eval_batch_size={ctx.setup.batch}")


class BatchCouldGrowRule(Rule):
    """
    ## What it does
    Reports micro-batch 1 with gradient accumulation on a GPU that would fit a larger
    micro-batch at the same effective batch.

    ## Why is this bad?
    It is not a memory problem, it is slow: a micro-batch of 1 leaves the GPU idle
    between small kernels. Trading accumulation steps for micro-batch keeps the
    effective batch and the optimization the same.

    ## When it fires
    Off by default (a throughput hint, not a memory one): micro-batch 1 with accumulation
    where a larger micro-batch at the same effective batch fits with the headroom.

    ## Example
    ```python
    TrainingArguments(per_device_train_batch_size=1, gradient_accumulation_steps=16)
    ```

    ## Use instead
    ```python
    TrainingArguments(per_device_train_batch_size=4, gradient_accumulation_steps=4)
    ```
    """

    code = "MEM402"
    name = "micro-batch-could-grow"
    severity = "note"
    default_enabled = False
    summary = "micro-batch 1 with accumulation where a larger micro-batch fits"
    VALID = (Sample(script(batch=1, args="gradient_accumulation_steps=1"), gpu="A100-80GB"),)
    INVALID = (Sample(script(batch=1, args="gradient_accumulation_steps=16"), gpu="A100-80GB",
                      at="per_device_train_batch_size"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        from memlint.estimate.levers import largest_batch

        est, gpu, s = ctx.estimate, ctx.gpu, ctx.setup
        if est is None or gpu is None or s.batch != 1 or s.grad_accum < 2 or ctx.fit.status == "over":
            return
        best = largest_batch(s, gpu, ctx.accounting, ctx.min_headroom, limit=s.grad_accum)
        # the largest divisor of the accumulation that fits keeps the effective batch exact
        b = max((d for d in range(2, best + 1) if s.grad_accum % d == 0), default=1)
        if b < 2:
            return
        yield self.finding(ctx, f"micro-batch 1 × accumulation {s.grad_accum}: micro-batch {b} × accumulation "
                                f"{s.grad_accum // b} fits on {gpu[0]} with the same effective batch",
                           "per_device_batch", related=(("grad_accum", "accumulation set here"),))
