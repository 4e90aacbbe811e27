"""Round 4: patterns of real training files met on held-out repositories (docs/realworld.md, round 4).

Each test is a synthetic excerpt of a shape met in public scripts; the comment says which shape."""

from pathlib import Path

from memlint.extract import extract_file, extract_source


def _fields(src: str, *names: str) -> dict:
    plan = extract_source(src, "train.py")
    return {n: plan.fields[n].value for n in names}


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


_ARGPARSE = '''import argparse
from transformers import AutoModelForCausalLM
p = argparse.ArgumentParser()
p.add_argument("--model_name_or_path")
p.add_argument("--per_device_train_batch_size", type=int, default=16)
args = p.parse_args()
model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path)
'''


def test_a_launcher_that_cds_into_the_script_folder_first(tmp_path: Path):
    # finetune/scripts/run.sh: `cd "$(dirname "${BASH_SOURCE[0]}")/../sft/"` (or `cd ../sft/`) on its own
    # line, then `deepspeed main.py ...`: main.py is in finetune/sft, not beside the launcher
    from memlint.extract.shell import launcher_targets

    body = " \\\n\t--model_name_or_path /base_model --per_device_train_batch_size 2\n"
    root = _write(tmp_path, {"finetune/sft/main.py": _ARGPARSE,
                             "finetune/scripts/a.sh": '#!/bin/bash\ncd "$(dirname "${BASH_SOURCE[0]}")/../sft/"\n\ndeepspeed main.py' + body,
                             "finetune/scripts/b.sh": "cd ../sft/ || exit 1\ndeepspeed main.py" + body,
                             "finetune/scripts/c.sh": 'HERE=$(cd "$(dirname "$0")" && pwd)\ncd $HERE/../sft\npython main.py' + body})
    for name in ("a.sh", "b.sh", "c.sh"):
        [target] = launcher_targets(root / "finetune/scripts" / name, f"finetune/scripts/{name}", [root])
        assert target.path.resolve() == (root / "finetune/sft/main.py").resolve(), name
        plan = extract_file(target.path, launch=target.launch)
        assert plan.fields["model_id"].value == "/base_model", name
