"""MEM0xx: what memlint could not read or resolve. Notes never fail a run."""

from __future__ import annotations

from typing import Iterator

from memlint.rules.base import Context, Finding, Rule, Sample
from memlint.rules.samples import script


class SyntaxErrorRule(Rule):
    """
    ## What it does
    Reports a file that memlint could not parse (a syntax error in a script or a
    notebook cell, broken YAML or JSON in a config), at the position the parser stopped,
    and a file it did not read: not a regular file (a FIFO, a device), or over a budget
    (`max-file-size`, a script's size), also when a script or config follows it.

    ## Why is this bad?
    Nothing in the file can be checked: no plan, no estimate, no other finding. A broken
    training script will also fail when launched, after the job has waited in a queue.

    ## When it fires
    The file does not parse. A note: nothing in it was checked, and it never fails a run.

    ## Example
    ```python
    args = TrainingArguments(per_device_train_batch_size=4
    ```

    ## Use instead
    ```python
    args = TrainingArguments(per_device_train_batch_size=4)
    ```
    """

    code = "MEM001"
    name = "syntax-error"
    severity = "note"
    summary = "the file could not be parsed, so nothing in it was checked"
    VALID = (Sample(script()),)
    INVALID = (Sample("import torch\nargs = TrainingArguments(per_device_train_batch_size=4\n", at="TrainingArguments"),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        for d in ctx.plan.diagnostics:
            if d.kind in ("syntax-error", "unreadable", "not-read"):  # not-read: a file it follows, refused
                yield self.finding(ctx, d.message, d.span)


class UnknownModelRule(Rule):
    """
    ## What it does
    Reports a model id that memlint cannot resolve offline: not in its catalog, not a
    local directory with a `config.json`, and not in the local Hugging Face cache.

    ## Why is this bad?
    Without the model's configuration there are no exact parameter counts, so no
    estimate and no capacity finding. memlint never downloads a config and never sets
    `trust_remote_code`.

    ## When it fires
    The model id resolves nowhere offline. A note: without the model there is no estimate,
    so no capacity finding either way. Also a note when the script names a local checkpoint
    folder that is not on this machine (`~/model_weights/llama-7b`) whose name is a catalogued
    checkpoint's: the estimate is sized on that checkpoint, and the note says it assumes so.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained("my-org/private-7b")
    ```

    ## Use instead
    Point memlint at a local copy of the config (a directory with `config.json`), or
    download the model into the Hugging Face cache, or pass a known architecture with
    `--assume model_id=meta-llama/Llama-3.1-8B`.
    """

    code = "MEM002"
    name = "unknown-model"
    severity = "note"
    summary = "the model id is not in the catalog, a local directory or the HF cache"
    VALID = (Sample(script("meta-llama/Llama-3.1-8B")),)
    INVALID = (Sample(script("my-org/surely-not-a-real-model-7b"), at="MODEL_ID ="),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.model_error:
            yield self.finding(ctx, f"no estimate: {ctx.model_error}", "model_id",
                               hint="pass --assume model_id=<a catalog id of the same architecture>")
            return
        model = ctx.setup.model if ctx.setup is not None else None
        if model is not None and model.assumed_from:
            from memlint.estimate.from_plan import assumed_model_note

            yield self.finding(ctx, assumed_model_note(model), "model_id",
                               hint=f"pass --assume model_id={model.id} to say so, or a local path with config.json")


class UnknownValueRule(Rule):
    """
    ## What it does
    Reports a value the estimate needs (model id, micro-batch, maximum sequence length)
    that the script does not settle statically: it comes from the command line, an
    environment variable or a config file given at run time.

    ## Why is this bad?
    memlint does not guess: an unknown micro-batch or sequence length means no estimate
    and no capacity findings for this file, so a run that cannot fit goes unreported.

    ## When it fires
    A value the estimate needs (the model, the micro-batch, the maximum length, the GPU count
    of a sharded run) is unknown statically. A note: memlint never guesses a capacity finding.

    ## Example
    ```python
    parser.add_argument("--max_length", type=int, required=True)
    ```

    ## Use instead
    Give the value a default in the script, or tell memlint the value you launch with:
    `memlint train.py --assume max_length=4096` (or an `assume` table in
    `[tool.memlint]`).
    """

    code = "MEM003"
    name = "unknown-value"
    severity = "note"
    summary = "a value the estimate needs is unknown; says which --assume fills it"
    VALID = (Sample(script()),)
    INVALID = (Sample(script().replace("max_length=2048", "max_length=int(input())")),)

    def check(self, ctx: Context) -> Iterator[Finding]:
        if ctx.planned is None or ctx.plan.kind in ("deepspeed", "accelerate"):
            return  # a launcher config is not a training plan; --launch-config merges it into one
        for name in ctx.planned.missing:
            v = ctx.plan.get(name)
            why = f" ({v.chain[-1]})" if v.chain else ""
            flag = "--gpus N" if name == "num_gpus" else f"--assume {name}=…"
            if name == "num_gpus":
                why = f" (a {ctx.plan.value('distributed')} run is sharded over the GPUs it is launched on)"
            elif name == "distributed":
                why = " (a DeepSpeed config memlint could not read: the ZeRO stage decides what is sharded)"
                flag = "--assume distributed=zero1|zero2|zero3"
            yield self.finding(
                ctx, f"{name} is unknown{why}: no estimate for this file; pass {flag}",
                name if v.span else "distributed", hint=f"memlint {ctx.plan.path} {flag}", field=name,
            )


class UnknownConfigKeyRule(Rule):
    """
    ## What it does
    Reports a key in a framework config (axolotl, LLaMA-Factory, a TRL recipe,
    torchtune, DeepSpeed, accelerate) that the framework does not know, with the key it
    most likely meant.

    ## Why is this bad?
    Most frameworks ignore keys they do not know. A misspelt `max_seq_len` leaves the
    framework's default sequence length in place, and the run that was sized for 1024
    tokens trains at 4096, or runs out of memory, after it has been queued.

    ## When it fires
    A config key the framework does not know, with the closest key it does know (a misspelling),
    or one the framework refuses. A warning, the one in MEM0xx: the run would not train what the
    file says (a default sequence length instead of the one written), so it fails a check and a
    pre-commit hook, as a misspelt `[tool.memlint]` key does.

    ## Example
    ```yaml
    base_model: meta-llama/Llama-3.1-8B
    max_seq_len: 4096   # axolotl calls it sequence_len
    ```

    ## Use instead
    ```yaml
    base_model: meta-llama/Llama-3.1-8B
    sequence_len: 4096
    ```
    """

    code = "MEM004"
    name = "unknown-config-key"
    severity = "warning"
    summary = "a config key the framework does not know (and silently ignores)"

    def check(self, ctx: Context) -> Iterator[Finding]:
        for d in ctx.plan.diagnostics:
            if d.kind == "unknown-key":
                yield self.finding(ctx, d.message, d.span)


class BadConfigValueRule(Rule):
    """
    ## What it does
    Reports a config value memlint refuses to read or that has the wrong type: a YAML
    `!!python/...` tag (memlint never constructs Python objects from a config), a string
    where the framework expects a number.

    ## Why is this bad?
    A `!!python/object` tag runs code when an unsafe loader reads the file; a value of the
    wrong type is either rejected by the framework at launch or silently coerced.

    ## When it fires
    A config value memlint refuses to read (a YAML tag that would construct an object) or of
    the wrong type. A note: memlint says what it could not read, and never fails a run on it.

    ## Example
    ```yaml
    micro_batch_size: !!python/object/apply:os.system ["echo hi"]
    ```

    ## Use instead
    ```yaml
    micro_batch_size: 2
    ```
    """

    code = "MEM005"
    name = "bad-config-value"
    severity = "note"
    summary = "a config value memlint will not read (python tags) or of the wrong type"

    def check(self, ctx: Context) -> Iterator[Finding]:
        for d in ctx.plan.diagnostics:
            if d.kind == "bad-value":
                yield self.finding(ctx, d.message, d.span)
