"""Score `memlint plan` on real public training files against hand labels (docs/realworld.md, round 3).

    python benchmarks/realworld.py MANIFEST.json [MANIFEST.json ...] [--no-command] [--show-misses]

A manifest is a JSON list of entries: {"id", "repo", "commit", "root" (the checkout, with the
repository's files at their real paths), "path" (the file, relative to root), "command" (how
the repository launches it, or null), "labels": {field: value}}. Checkouts are made with the
`fetch` tool and `git archive` (no repository file is copied into memlint). memlint runs as a
subprocess from the checkout's root, as a user would: `memlint plan --format json PATH`, or
`memlint plan --format json -- COMMAND` when the entry has a launch command.

A label says what the file does when run as its command runs it (null: not knowable from the
checkout). Vocabulary differences are settled here, not in memlint: "unset" dtype, "default"
attention and "trainer-default" optimizer match a library-default value; "ddp" is memlint's
"none" over several GPUs; DeepSpeed's own Adam variants are memlint's "deepspeed_adam"; transformers'
"adamw_8bit" and "adamw_bnb_8bit" name one optimizer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

FIELDS = ("model_id", "method", "lora_r", "quant_bits", "torch_dtype", "per_device_batch", "grad_accum",
          "max_length", "padding", "packing", "gradient_checkpointing", "optimizer", "precision",
          "attn_implementation", "distributed", "num_gpus", "trainer")
_DEEPSPEED_ADAM = {"deepspeed-adamw", "deepspeed-fusedadam", "deepspeed-adam", "deepspeed_fused_adam", "deepspeed_adam",
                   "deepspeed-cpuadam"}
_ALIASES = {"optimizer": {"decoupled_adamw": "decoupled_adamw", "decoupled_lionw": "decoupled_lionw"},
            "attn_implementation": {"xformers": "sdpa"}, "distributed": {"ddp": "none"}}
# transformers' two names of one optimizer: OptimizerNames.ADAMW_8BIT and ADAMW_BNB both build bitsandbytes' AdamW with
# optim_bits=8 (trainer.py get_optimizer_cls_and_kwargs, 4.36 to 5.x)
_SAME_OPTIMIZER = {"adamw_8bit": "adamw_bnb_8bit"}


def agree(field: str, label, got: dict | None, labels: dict) -> bool | None:
    """Whether memlint's field matches the label; None when the field is not scored."""
    value = got.get("value") if got else None
    source = got.get("source", "unknown") if got else "unknown"
    if field == "lora_r" and labels.get("method") == "full":
        return None
    if label is None:
        if field == "quant_bits":  # not quantized is a value
            return source != "unknown" and value is None
        return source in ("unknown", "placeholder") or value is None  # a placeholder is kept as written, not known
    if source == "unknown":
        return False
    if field == "torch_dtype" and label == "unset":
        return source == "library-default"
    if field == "attn_implementation" and label == "default":
        return source == "library-default"
    if field == "optimizer" and label == "trainer-default":
        return source == "library-default"
    if field == "optimizer" and label in _DEEPSPEED_ADAM:
        return value == "deepspeed_adam"
    label = _ALIASES.get(field, {}).get(label, label) if isinstance(label, str) else label
    if field == "optimizer" and isinstance(value, str) and isinstance(label, str):
        value, label = _SAME_OPTIMIZER.get(value, value), _SAME_OPTIMIZER.get(label, label)
    if field == "model_id" and isinstance(value, str) and isinstance(label, str):
        return value.rstrip("/") == label.rstrip("/")
    if isinstance(label, list) or isinstance(value, list):
        return sorted(map(str, label if isinstance(label, list) else [label])) == sorted(map(str, value if isinstance(value, list) else [value]))
    return value == label


def run_entry(entry: dict, use_command: bool, memlint: list[str]) -> tuple[dict | None, int, str]:
    root = Path(entry["root"])
    command = entry.get("command") if use_command else None
    if command:
        # a command documented as "run from examples/" names its script relative to that folder
        script = next((w for w in _split(command) if w.endswith((".py", ".yaml", ".yml"))), None)
        if script and not command.lstrip().startswith("cd ") and not (root / script).exists() and (root / Path(entry["path"]).parent / script).exists():
            root = root / Path(entry["path"]).parent
    argv = [*memlint, "plan", "--format", "json"]
    argv += ["--", *_split(command)] if command else [entry["path"]]
    try:
        proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, -1, "timeout"
    doc = None
    if proc.returncode == 0:
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            return None, proc.returncode, "not JSON: " + proc.stdout[:200]
        if isinstance(doc, list):  # a launcher that runs several scripts: the entry's own file
            # a notebook that trains by running a script (`!python train.py ...`): the script it launches
            launched = [d for d in doc if (d.get("via") or "").rsplit(":", 1)[0].endswith(entry["path"])]
            own = next((d for d in doc if d.get("path", "").endswith(entry["path"])), None)
            untrained = own is not None and (own.get("plan", {}).get("trainer") or {}).get("source", "unknown") == "unknown"
            doc = launched[0] if launched and (own is None or untrained) else own or (doc[0] if doc else None)
    return doc, proc.returncode, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def _split(command: str) -> list[str]:
    import shlex

    return shlex.split(command, posix=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifests", nargs="+")
    ap.add_argument("--no-command", action="store_true", help="read the files alone, ignoring the launch commands")
    ap.add_argument("--show-misses", action="store_true", help="print every field memlint read differently")
    ap.add_argument("--memlint", default=f"{sys.executable}{' -P' if sys.version_info >= (3, 11) else ''} -m memlint", help="how to run memlint (-P: the checkout's own modules never shadow the standard library's)")
    args = ap.parse_args()
    entries = [e for m in args.manifests for e in json.loads(Path(m).read_text(encoding="utf-8"))]
    memlint = args.memlint.split()
    right: Counter = Counter()
    scored: Counter = Counter()
    misses: dict[str, list[str]] = defaultdict(list)
    with_estimate = with_answer = tracebacks = exit2 = folder_named = 0
    unsized: list[str] = []
    repos = set()
    for e in entries:
        repos.add(e["repo"])
        doc, rc, err = run_entry(e, not args.no_command, memlint)
        if rc not in (0, 1):
            exit2 += rc == 2
            tracebacks += "Traceback" in err or rc not in (0, 1, 2)
            print(f"{e['id']}: exit {rc}: {err}")
            for f in FIELDS:
                if agree(f, e["labels"].get(f), None, e["labels"]) is not None:
                    scored[f] += 1
                    misses[e["id"]].append(f"{f}: no plan")
            continue
        plan = doc.get("plan", {}) if doc else {}
        if doc and doc.get("estimate") is not None:
            with_estimate += 1
            folder_named += "assumed_from" in doc["estimate"].get("model", {})
        elif doc:
            with_answer += doc.get("conditional") is not None
            unsized.append(f"{e['id']}: {doc.get('no_estimate')}")
        for f in FIELDS:
            ok = agree(f, e["labels"].get(f), plan.get(f), e["labels"])
            if ok is None:
                continue
            scored[f] += 1
            right[f] += ok
            if not ok:
                got = plan.get(f) or {}
                misses[e["id"]].append(f"{f}: label {e['labels'].get(f)!r}, memlint {got.get('value')!r} ({got.get('source')})")
    total_r, total_s = sum(right.values()), sum(scored.values())
    print(f"{len(entries)} files from {len(repos)} repositories"
          + (" (files alone, no launch commands)" if args.no_command else ""))
    print(f"plan fields right: {total_r}/{total_s} = {total_r / max(total_s, 1):.1%}")
    print(f"files with an estimate and no --assume: {with_estimate}/{len(entries)} = {with_estimate / len(entries):.1%}"
          f" (of which {folder_named} sized on the checkpoint a missing folder's name names, said as an assumption)")
    print(f"files with an estimate or a conditional answer: {with_estimate + with_answer}/{len(entries)} = "
          f"{(with_estimate + with_answer) / len(entries):.1%}")
    print(f"exit 2: {exit2}, tracebacks: {tracebacks}")
    if args.show_misses:
        print("no estimate:")
        for line in unsized:
            print(f"  {line}")
    for f in FIELDS:
        if scored[f]:
            print(f"  {f:24s} {right[f]:3d}/{scored[f]:3d}  {right[f] / scored[f]:6.1%}")
    if args.show_misses:
        for eid, ms in misses.items():
            print(f"{eid}:")
            for m in ms:
                print(f"    {m}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
