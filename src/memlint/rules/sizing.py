"""Whether memlint could size the script at all, and the answer it gives when it could not."""

from __future__ import annotations

from typing import Iterator

from memlint.rules.base import Context, Finding, Rule, Sample
from memlint.rules.samples import script


class UnsizedRule(Rule):
    """
    ## What it does
    Reports a training script memlint could not size, with the answer it can give anyway:
    when the maximum sequence length is unknown (no truncation, a data-dependent length), the
    longest sequence per sample that fits on the target GPU at the script's micro-batch; when the
    model is unknown (it comes from the command line, or is a private checkpoint), what the rest
    of the plan costs on common checkpoints. The answer is conditional on the unknowns, never a
    guess.

    A note by default. With `require-estimate = true` in `[tool.memlint]` it is an error, so a
    pre-commit hook or CI job never silently passes a script it did not size.

    ## Why is this bad?
    A script memlint cannot size gets no capacity finding: a run that cannot fit goes unreported.

    ## When it fires
    On a training script (a trainer or a training loop was found) that has no estimate because
    its model, its maximum length or its micro-batch is unknown; with or without a GPU configured
    (without one, the answer names common GPUs). A note, or an error with `require-estimate`. It
    says nothing about fit itself: the conditional answer is what to compare with your GPU.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
    ```

    ## Use instead
    Give the value a default, run memlint with the launch command (`memlint check -- torchrun
    ... train.py --model_name_or_path X`), or `--assume model_id=...`.
    """

    code = "MEM006"
    name = "not-sized"
    severity = "note"
    summary = "memlint could not size the script; the answer conditional on what is unknown"
    VALID = (Sample(script()),)
    INVALID = (Sample(script().replace("max_length=2048", "max_length=int(input())")),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.estimate is not None or ctx.plan.kind in ("deepspeed", "accelerate"):
            return
        if not ctx.plan.get("trainer").known:
            return
        c = ctx.conditional
        if c is None and not ctx.require_estimate:
            return  # MEM002/MEM003 already say what is unknown; this rule adds the conditional answer
        unknown = ", ".join(c.unknown) if c is not None else ", ".join(ctx.planned.missing if ctx.planned else ("model_id",))
        answer = f"; {c.text()}" if c is not None else ""
        f = self.finding(ctx, f"not sized: {unknown} unknown{answer}", "model_id" if "model_id" in unknown else "max_length",
                         hint="run with the launch command (memlint check -- …) or --assume KEY=VALUE",
                         conditional=c.to_json() if c is not None else None)
        if ctx.require_estimate:
            from dataclasses import replace

            f = replace(f, severity="error", message=f.message + " (require-estimate)")
        yield f
