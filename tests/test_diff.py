"""`memlint diff` on throwaway git repositories: numbers, the lines named, formats, budgets."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.diff import carry_line, run_diff
from memlint.estimate import GIB

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

BASE_SCRIPT = '''\
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

MODEL = "Qwen/Qwen2.5-0.5B"
model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype="bfloat16")


def tokenize(batch):
    return tok(batch["text"], truncation=True, max_length=1024, padding="max_length")


args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=2,
    bf16=True,
    gradient_checkpointing=True,
)
trainer = Trainer(model=model, args=args)
trainer.train()
'''
# Batch 2 -> 4 on line 13 and gradient checkpointing dropped (line 15 of the base).
HEAD_SCRIPT = BASE_SCRIPT.replace("per_device_train_batch_size=2", "per_device_train_batch_size=4").replace(
    "    gradient_checkpointing=True,\n", "")


def sh(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    r = tmp_path / "repo"
    r.mkdir()
    sh(r, "init", "-q", "-b", "main")
    (r / "train.py").write_text(BASE_SCRIPT)
    (r / "util.py").write_text("def helper():\n    return 1\n")
    sh(r, "add", ".")
    sh(r, "commit", "-qm", "base")
    sh(r, "checkout", "-qb", "feature")
    (r / "train.py").write_text(HEAD_SCRIPT)
    (r / "util.py").write_text("def helper():\n    return 2\n")
    sh(r, "commit", "-qam", "bigger batch")
    monkeypatch.chdir(r)
    return r


def plan_estimate(tmp_path: Path, text: str, capsys) -> dict:
    """The same script through `memlint plan --format json`, outside any repository."""
    d = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "train.py").write_text(text)
    capsys.readouterr()
    assert main(["plan", str(d / "train.py"), "--gpu", "A100-80GB", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["estimate"]


def run(capsys, *argv):
    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_peaks_and_components_equal_the_plan_estimates_of_both_versions(repo, tmp_path, capsys):
    before = plan_estimate(tmp_path, BASE_SCRIPT, capsys)
    after = plan_estimate(tmp_path, HEAD_SCRIPT, capsys)
    code, out, _ = run(capsys, "--gpu", "A100-80GB", "--output-format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["base_name"] == "merge-base with main"
    assert doc["base"] == sh(repo, "rev-parse", "main").strip()
    [f] = doc["files"]  # util.py is not a training script
    assert f["path"] == "train.py" and f["status"] == "modified"
    assert f["before"]["peak"] == before["peak"] and f["after"]["peak"] == after["peak"]
    assert f["before"]["components"] == before["components"]
    assert f["after"]["components"] == after["components"]
    assert f["delta"]["peak"] == after["peak"] - before["peak"] > 0
    assert f["delta"]["components"]["activations"] == (after["components"]["activations"]
                                                       - before["components"]["activations"])
    # Twice the batch without recompute: the activations grow far more than twice.
    assert after["components"]["activations"] > 4 * before["components"]["activations"]


def test_changed_fields_are_named_with_their_working_tree_lines(repo, capsys):
    code, out, _ = run(capsys, "--output-format", "json")
    changes = {c["field"]: c for c in json.loads(out)["files"][0]["changes"]}
    assert set(changes) == {"per_device_batch", "gradient_checkpointing"}
    batch, gc = changes["per_device_batch"], changes["gradient_checkpointing"]
    assert (batch["key"], batch["before"], batch["after"], batch["kind"], batch["line"]) == (
        "per_device_train_batch_size", 2, 4, "changed", 13)
    # Removed: TrainingArguments' default (False) applies; the line is where it stood.
    assert (gc["key"], gc["before"], gc["after"], gc["kind"], gc["line"]) == (
        "gradient_checkpointing", True, False, "removed", 15)


def test_concise_names_the_peak_change_and_the_lines(repo, capsys):
    r = run_diff(cwd=repo, gpu="A100-80GB")
    f = r.files[0]
    b, a = f.before.peak / GIB, f.after.peak / GIB
    code, out, _ = run(capsys, "--gpu", "A100-80GB")
    assert code == 0
    first, comps = out.splitlines()
    assert first == (f"train.py: peak {b:.2f} → {a:.2f} GiB (+{a - b:.2f}, +{(a - b) * 100 / b:.0f}%) on A100-80GB: "
                     "per_device_train_batch_size 2 → 4 at train.py:13; gradient_checkpointing removed at train.py:15")
    assert comps.startswith("  activations +") and comps.endswith(" GiB")


def test_github_annotates_each_changed_line(repo, capsys):
    code, out, _ = run(capsys, "--output-format", "github")
    lines = out.splitlines()
    assert [line.split("::")[1] for line in lines] == [
        "warning title=memlint diff,file=train.py,line=13",
        "warning title=memlint diff,file=train.py,line=15",
    ]
    assert lines[0].split("::", 2)[2].startswith("train.py:13: per_device_train_batch_size 2 → 4: peak ")
    assert "%25" in lines[0]  # the percentage's % is escaped as GitHub's toolkit does


def test_markdown_is_one_table_with_a_row_per_script(repo, capsys):
    code, out, _ = run(capsys, "--output-format", "markdown", "--gpu", "A100-80GB")
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert rows[0] == "| script | peak before | peak after | change | by component (GiB) | caused by |"
    assert len(rows) == 3
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    assert cells[0] == "`train.py`"
    assert cells[3].startswith("**+")
    assert cells[5] == ("`per_device_train_batch_size` 2 → 4 (train.py:13)<br>"
                        "`gradient_checkpointing` removed (train.py:15)")


def test_budget_flag_and_config_make_it_exit_1(repo, capsys):
    r = run_diff(cwd=repo)
    grew = r.files[0].peak_delta
    assert run(capsys, "--max-increase", f"{grew // 2}B")[0] == 1
    assert run(capsys, "--max-increase", f"{grew}B")[0] == 0  # at the budget is within it
    pct = grew * 100 / r.files[0].before.peak
    assert run(capsys, "--max-increase", f"{pct - 1:.1f}%")[0] == 1
    assert run(capsys, "--max-increase", f"{pct + 1:.1f}%")[0] == 0
    (repo / "pyproject.toml").write_text('[tool.memlint]\nmax-increase = "1MiB"\n')
    code, out, _ = run(capsys)
    assert code == 1 and out.splitlines()[0].endswith("[fails: over the budget of 1MiB]")
    assert run(capsys, "--max-increase", "100GiB")[0] == 0  # the flag overrides the file


def test_a_smaller_peak_never_exceeds_the_budget(repo, capsys):
    (repo / "train.py").write_text(BASE_SCRIPT.replace("per_device_train_batch_size=2", "per_device_train_batch_size=1"))
    code, out, _ = run(capsys, "main", "--max-increase", "0B", "--output-format", "json")
    f = json.loads(out)["files"][0]
    assert code == 0 and f["delta"]["peak"] < 0 and not f["over_budget"]


def test_explicit_base_paths_and_new_untracked_scripts(repo, capsys):
    (repo / "sub").mkdir()
    (repo / "sub" / "new_train.py").write_text(HEAD_SCRIPT)
    code, out, _ = run(capsys, "main", "sub", "--output-format", "json")
    [f] = json.loads(out)["files"]
    assert (f["path"], f["status"], f["before"], f["changes"]) == ("sub/new_train.py", "added", None, [])
    assert f["after"]["peak"] > 0
    code, out, _ = run(capsys, "HEAD")  # no working-tree change to train.py against HEAD
    [line] = out.splitlines()
    assert line.startswith("sub/new_train.py: peak ") and line.endswith(" GiB (new)")


def test_renamed_script_is_compared_with_its_old_self(repo, capsys):
    sh(repo, "mv", "train.py", "finetune.py")
    code, out, _ = run(capsys, "--output-format", "json")
    [f] = json.loads(out)["files"]
    assert (f["path"], f["old_path"], f["status"]) == ("finetune.py", "train.py", "renamed")
    assert {c["field"] for c in f["changes"]} == {"per_device_batch", "gradient_checkpointing"}


def test_syntax_error_at_head_says_so_instead_of_an_estimate(repo, capsys):
    (repo / "train.py").write_text(HEAD_SCRIPT.replace("bf16=True,", "bf16=True,,"))
    code, out, _ = run(capsys)
    assert code == 0
    assert out.startswith("train.py: peak was ") and "no estimate now: cannot read: SyntaxError" in out


@pytest.mark.parametrize("argv,needle", [
    (["no-such-ref-or-file"], "neither a file nor a revision"),
    (["--max-increase", "lots"], "not a size"),
    (["--gpu", "V100-ish"], "unknown GPU"),
])
def test_bad_input_is_one_line_and_exit_2(repo, capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_outside_git_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.py").write_text(BASE_SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"memlint: error: {tmp_path.resolve()}: not a git repository "
                                        "(memlint diff compares git revisions)"]


def test_no_default_branch_asks_for_a_base(tmp_path, monkeypatch, capsys):
    sh(tmp_path, "init", "-q", "-b", "trunk")
    (tmp_path / "train.py").write_text(BASE_SCRIPT)
    sh(tmp_path, "add", ".")
    sh(tmp_path, "commit", "-qm", "one")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys)
    assert code == 2 and "name a BASE" in err
    assert run(capsys, "HEAD")[0] == 0


@pytest.mark.parametrize("line,expected", [
    (3, 3),    # before every hunk
    (10, 12),  # after two lines inserted after old line 5
    (14, 16),  # deleted (old 14-15, git numbers the deletion after new line 15): where it stood
    (20, 20),  # after the insertion and the deletion: +2 -2
    (31, 31),  # inside a replaced hunk: same offset
    (32, 31),  # past the replacement's end: its last line
])
def test_carry_line_follows_insertions_deletions_and_replacements(line, expected):
    hunks = [(5, 0, 6, 2), (14, 2, 15, 0), (30, 3, 30, 2)]
    assert carry_line(line, hunks) == expected


def test_options_may_sit_between_base_and_paths(repo, capsys):
    (repo / "other.py").write_text(HEAD_SCRIPT)
    code, out, _ = run(capsys, "main", "--gpu", "A100-80GB", "train.py", "--output-format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["gpu"]["name"] == "A100-80GB"
    assert [f["path"] for f in doc["files"]] == ["train.py"]  # other.py is outside the paths given


AXOLOTL = """\
base_model: meta-llama/Llama-3.1-8B
load_in_4bit: true
adapter: qlora
lora_r: 16
lora_target_linear: true
sequence_len: 2048
micro_batch_size: 1
gradient_accumulation_steps: 4
gradient_checkpointing: true
bf16: true
"""


@pytest.mark.skipif(importlib.util.find_spec("memlint.extract.configs") is None,
                    reason="needs the YAML config readers (memlint.extract.configs)")
def test_a_yaml_config_change_names_its_key_and_line(repo, capsys):
    (repo / "qlora.yml").write_text(AXOLOTL)
    sh(repo, "add", "qlora.yml")
    sh(repo, "commit", "-qm", "config")
    (repo / "qlora.yml").write_text(AXOLOTL.replace("micro_batch_size: 1", "micro_batch_size: 4"))
    code, out, _ = run(capsys, "HEAD", "qlora.yml")
    first = out.splitlines()[0]
    assert first.startswith("qlora.yml: peak ") and first.endswith(": micro_batch_size 1 → 4 at qlora.yml:7")


def test_deleted_scripts_and_unreadable_files(repo, capsys):
    sh(repo, "rm", "-q", "train.py")
    (repo / "latin1.py").write_bytes(b"MODEL = '\xe9'\n")
    (repo / "package.json").write_text('{"name": "x"}')
    code, out, err = run(capsys)
    assert code == 0
    [line] = out.splitlines()
    assert line.startswith("train.py: peak was ") and line.endswith(" GiB (deleted)")
    assert "memlint diff: skipped latin1.py: latin1.py: not UTF-8 (byte 9)" in err
    assert "package.json" not in out + err


def test_the_same_peak_with_and_without_a_gpu(repo, capsys):
    peaks = {(f.before.peak, f.after.peak) for gpu in (None, "A100-80GB", "T4", "24")
             for f in run_diff(cwd=repo, gpu=gpu).files}
    assert len(peaks) == 1
    outs = [run(capsys, *(["--gpu", g] if g else []))[1].split(" on ")[0].split(":")[1] for g in (None, "RTX4090")]
    assert outs[0].startswith(" peak ") and outs[0].split("(")[0] == outs[1].split("(")[0]


def test_a_change_that_stops_fitting_fails_without_a_budget(repo, capsys):
    r = run_diff(cwd=repo)
    before, after = r.files[0].before.peak, r.files[0].after.peak
    gpu = f"{(before + after) / 2 / GIB:.1f}"  # the base fits (with the headroom), the change does not
    code, out, err = run(capsys, "--gpu", gpu)
    assert code == 1
    assert f"no longer fits {gpu} GiB" in out and "[fails: no longer fits" in out
    assert "stops fitting" in err
    code, out, _ = run(capsys, "--gpu", gpu, "--output-format", "json")
    f = json.loads(out)["files"][0]
    assert f["worse_fit"] is True and f["fit"] == {"before": "fits", "after": "over"}
    assert run(capsys, "--gpu", "H200")[0] == 0  # fits at both ends: no failure
