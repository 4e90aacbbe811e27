"""`memlint check` end to end: golden output per fixture, flags, config, noqa, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"
GOLDEN = ROOT / "fixtures" / "golden" / "check"
REGEN = os.environ.get("MEMLINT_REGEN") == "1"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


CONFIGS = ROOT / "fixtures" / "configs"


def _fixture_files():
    scripts = sorted(p for p in SCRIPTS.rglob("*") if p.suffix in (".py", ".ipynb"))
    return scripts + sorted(p for p in CONFIGS.glob("*") if p.suffix in (".yaml", ".yml", ".json"))


def _golden_name(path: Path) -> str:
    if path.is_relative_to(CONFIGS):
        return "configs__" + path.name + ".txt"
    return path.relative_to(SCRIPTS).as_posix().replace("/", "__") + ".txt"


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: p.name)
def test_concise_output_and_exit_code_match_golden(path, capsys, monkeypatch):
    """Scripts and framework configs: the same rules, the same output."""
    monkeypatch.chdir(ROOT)
    rel = path.relative_to(ROOT).as_posix()
    code, out, _ = run(capsys, "check", rel, "--gpu", "RTX4090", "--no-color")
    got = out + f"exit: {code}\n"
    golden = GOLDEN / _golden_name(path)
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8")


def test_bare_path_is_check_and_findings_exit_1(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run(capsys, "fixtures/scripts/branches.py", "--gpu", "RTX4090")
    assert code == 1
    assert out.startswith("fixtures/scripts/branches.py:")
    assert "MEM101" in out and "Found" in err and "Found" not in out


def test_concise_lines_are_path_line_col_code(capsys, monkeypatch):
    import re

    monkeypatch.chdir(ROOT)
    _, out, _ = run(capsys, "check", "fixtures/scripts", "--gpu", "RTX4090")
    for line in out.splitlines():  # a finding, or the file's answer after its findings
        assert (re.match(r"^[^:]+:(cell \d+:)?\d+:\d+: MEM\d{3} (\[\*\] )?(error|warning|note): ", line)
                or re.match(r"^[^:]+: (peak \d|no estimate)", line)), line


def test_exit_zero_select_ignore_and_fail_on(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    f = "fixtures/scripts/branches.py"
    code, out, _ = run(capsys, "check", f, "--gpu", "RTX4090", "--exit-zero")
    assert code == 0
    answer = out.splitlines()[-1]  # the run's own summary line, whatever its figures
    assert re.fullmatch(rf"{re.escape(f)}: peak [\d.]+ GiB, does not fit RTX4090: [\d.]+ GiB over its 24.0 GiB", answer)
    code, out, _ = run(capsys, "check", f, "--gpu", "RTX4090", "--select", "MEM2")
    assert code == 1 and {ln.split()[1] for ln in out.splitlines()[:-1]} == {"MEM201", "MEM203"}
    code, out, _ = run(capsys, "check", f, "--gpu", "RTX4090", "--ignore", "MEM1,MEM2,MEM3")
    assert code == 0 and out == answer + "\n"  # every finding ignored; the answer stays
    # notes never fail a run unless asked to
    unknown = "fixtures/scripts/all_unknown.py"
    code, out, _ = run(capsys, "check", unknown)
    assert code == 0 and "MEM003" in out
    assert run(capsys, "check", unknown, "--fail-on", "note")[0] == 1


def test_assume_fills_an_unknown_value(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    f = "fixtures/scripts/side_effects.py"
    _, before, _ = run(capsys, "check", f)
    assert "MEM003 note: max_length is unknown" in before and "--assume max_length=" in before
    _, after, err = run(capsys, "check", f, "--assume", "max_length=1024", "--assume", "model=facebook/opt-125m")
    assert "MEM003" not in after and "MEM002" not in after and f"{f}: peak" in after


def test_without_a_gpu_the_report_ends_with_the_fit_on_common_gpus(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run(capsys, "check", "fixtures/scripts/trl_sft_qlora.py")
    assert "MEM101" not in out
    # SFTTrainer's step (its fused LM head from trl 1.15: no full logits)
    assert out.splitlines()[-1] == ("fixtures/scripts/trl_sft_qlora.py: peak 9.1 GiB, smallest common GPU that fits: "
                                    "A10G (22.5 GiB) (--gpu NAME checks one)")
    assert code == 0 and "Found 2 findings (2 notes).\nNone at or above fail-on (warning): exit 0.\n" in err
    code, out, err = run(capsys, "check", "fixtures/scripts/trl_sft_qlora.py", "--gpu", "RTX4090")
    assert out.splitlines()[-1] == "fixtures/scripts/trl_sft_qlora.py: peak 9.1 GiB, fits RTX4090 with 14.9 GiB free"


def test_json_output_has_ruff_keys_and_numbers(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    _, out, _ = run(capsys, "check", "fixtures/scripts/branches.py", "--gpu", "RTX4090", "--output-format", "json")
    doc = json.loads(out)
    assert {"code", "filename", "location", "end_location", "message", "fix", "noqa_row", "url"} <= set(doc[0])
    [cap] = [d for d in doc if d["code"] == "MEM101"]
    assert cap["data"]["peak_bytes"] > cap["data"]["gpu_bytes"]


def test_statistics_and_output_file(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    target = tmp_path / "report.txt"
    code, out, _ = run(capsys, "check", "fixtures/scripts", "--gpu", "RTX4090", "--statistics", "-o", str(target))
    assert code == 1 and out == ""
    rows = target.read_text().splitlines()
    assert rows and all(len(r.split("\t")) == 3 for r in rows)
    assert any("\tMEM101" in r for r in rows)


def test_stdin_with_stdin_filename(capsys, monkeypatch):
    import io

    src = (SCRIPTS / "branches.py").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src)))
    code, out, _ = run(capsys, "check", "-", "--stdin-filename", "train.py", "--gpu", "RTX4090")
    assert code == 1 and out.startswith("train.py:") and "MEM101" in out


def test_noqa_and_file_level_noqa(tmp_path, capsys):
    from memlint.rules.samples import script

    src = script(batch=8, recompute=False, padding="max_length")
    f = tmp_path / "train.py"
    f.write_text(src)
    _, out, _ = run(capsys, "check", str(f))
    assert "MEM201" in out and "MEM203" in out
    lines = src.splitlines()
    pad = next(i for i, ln in enumerate(lines) if 'padding="max_length"' in ln)
    gc = next(i for i, ln in enumerate(lines) if "gradient_checkpointing=False" in ln)
    lines[pad] += "  # noqa: MEM201"
    lines[gc] += "  # noqa"
    f.write_text("\n".join(lines) + "\n")
    _, out, _ = run(capsys, "check", str(f))
    assert "MEM201" not in out and "MEM203" not in out
    lines[pad] = lines[pad].replace("MEM201", "MEM999")  # another code does not suppress
    f.write_text("\n".join(lines) + "\n")
    assert "MEM201" in run(capsys, "check", str(f))[1]
    f.write_text("# memlint: noqa\n" + src)
    code, out, _ = run(capsys, "check", str(f), "--gpu", "RTX4090")
    assert code == 0 and out == ""


def test_pyproject_settings_per_file_ignores_and_options(tmp_path, capsys, monkeypatch):
    from memlint.rules.samples import script

    (tmp_path / "train.py").write_text(script(batch=3, recompute=False))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.py").write_text(script(batch=3, recompute=False))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.memlint]\ngpu = "RTX4090"\nignore = ["MEM305"]\n'
        '[tool.memlint.per-file-ignores]\n"sub/*.py" = ["MEM1"]\n'
        '[tool.memlint.options.recompute-off]\nmin-saving = 0.99\n'
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "check", ".")
    assert "train.py" in out and "MEM101" in out and "MEM305" not in out
    assert "sub/other.py" not in [ln.split(":")[0] for ln in out.splitlines() if "MEM1" in ln]
    # min-saving 0.99: recompute-off reports only when recompute makes it fit — it does here
    assert "MEM203" in out and "makes it fit" in out
    code, out, _ = run(capsys, "check", ".", "--show-settings")
    assert code == 0 and "pyproject.toml" in out and "RTX4090" in out


@pytest.mark.parametrize("toml,needle", [
    ("[tool.memlint]\ngpuz = 'A100'\n", "unknown key `gpuz`"),
    ("[tool.memlint]\nselect = ['MEM9']\n", "unknown rule selector"),
    ("[tool.memlint]\ngpu = 'potato'\n", "potato"),
    ("[tool.memlint.options.MEM202]\ntypical = 3\n", "unknown option `typical`"),
    ("[tool.memlint\ngpu = 1\n", "invalid TOML"),
    ("[tool.memlint]\nassume = { batchsize = 2 }\n", "batchsize"),
])
def test_bad_configuration_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, toml, needle):
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "train.py").write_text("import torch\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "check", "train.py")
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_rule_command(capsys):
    code, out, _ = run(capsys, "rule", "MEM201")
    assert code == 0 and "pad-to-max-length" in out and "Why is this bad?" in out
    code, out, _ = run(capsys, "rule", "--all")
    assert code == 0 and len(out.splitlines()) >= 18 and "(off by default)" in out
    assert run(capsys, "rule", "MEM999")[0] == 2


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    out = {}
    out["binary"] = tmp / "weights.py"
    out["binary"].write_bytes(b"\x00\x01torch\x02" * 100)
    out["latin1"] = tmp / "latin1.py"
    out["latin1"].write_bytes("import torch\n# caf\xe9\n".encode("latin-1"))
    out["empty"] = tmp / "empty.py"
    out["empty"].write_text("")
    out["huge"] = tmp / "huge.py"
    out["huge"].write_text("import torch\n" + "x = 1\n" * 50_000)
    out["nested"] = tmp / "nested.py"
    out["nested"].write_text("import torch\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    out["notebook_shell"] = tmp / "nb.ipynb"
    out["notebook_shell"].write_text(json.dumps({"cells": [{"cell_type": "code", "source": "!pip install trl\nimport torch\n"}]}))
    out["broken_notebook"] = tmp / "broken.ipynb"
    out["broken_notebook"].write_text('{"cells": [{"source": "import torch"')
    links = tmp / "links"
    links.mkdir()
    (links / "loop").symlink_to(links)
    (links / "dangling.py").symlink_to(tmp / "missing.py")
    (links / "train.py").symlink_to(SCRIPTS / "branches.py")
    out["symlinks"] = links
    return out


@pytest.mark.parametrize("kind,code,needle", [
    ("binary", 0, "MEM001 note: not a text file"),
    ("latin1", 0, "MEM001 note: not UTF-8"),
    ("empty", 0, ""),
    ("huge", 0, ""),
    ("nested", 0, "MEM001"),
    ("notebook_shell", 0, ""),
    ("broken_notebook", 0, "MEM001 note: not a notebook"),
    ("symlinks", 0, ""),
])
def test_bad_input_is_a_finding_or_a_clean_pass_never_a_traceback(tmp_path, capsys, kind, code, needle):
    path = _bad_inputs(tmp_path)[kind]
    got, out, err = run(capsys, "check", str(path))
    assert got == code, (out, err)
    assert needle in out
    assert "Traceback" not in out + err


def test_missing_path_and_bad_flags_exit_2(capsys):
    code, out, err = run(capsys, "check", "no/such/file.py")
    assert code == 2 and "no such file" in err and err.count("\n") == 1
    for argv in (["check", ".", "--gpu", "potato"], ["check", ".", "--select", "XYZ"],
                 ["check", ".", "--output-format", "yaml"], ["check", ".", "--assume", "nonsense"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and "Traceback" not in err, argv


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_a_finding(tmp_path, capsys):
    f = tmp_path / "train.py"
    f.write_text("import torch\n")
    f.chmod(0)
    code, out, _ = run(capsys, "check", str(f))
    assert "MEM001 note: cannot read" in out


def test_directory_walk_respects_gitignore_and_skips_non_training_files(tmp_path, capsys):
    from memlint.rules.samples import script

    (tmp_path / "train.py").write_text(script(batch=8, recompute=False))
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "train.py").write_text(script(batch=8, recompute=False))
    (tmp_path / "util.py").write_text("def f():\n    return 1\n")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    _, out, _ = run(capsys, "check", str(tmp_path), "--gpu", "RTX4090")
    files = {ln.split(":")[0] for ln in out.splitlines()}
    assert files == {str(tmp_path / "train.py")}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _, out, _ = run(capsys, "check", str(tmp_path), "--gpu", "RTX4090")
    assert {ln.split(":")[0] for ln in out.splitlines()} == {str(tmp_path / "train.py")}


def test_check_never_imports_torch_or_transformers():
    code = ("import sys; from memlint.cli import main; rc = main(['check','fixtures/scripts','--gpu','RTX4090',"
            "'-q','--output-format','json']); bad=[m for m in sys.modules if m.split('.')[0] in "
            "('torch','transformers','peft','IPython')]; print(bad); sys.exit(3 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_notebook_findings_name_the_cell_and_the_line_in_it(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    from memlint.library.versions import pinned_versions

    nb = "fixtures/scripts/gemma_sft_notebook.ipynb"
    argv = ("check", nb, "--assume", "model=google/gemma-2-2b", "--gpu", "T4", "--no-cache")
    with pinned_versions({"trl": "1.14.2"}):  # an SFTTrainer that still materialises the logits: MEM101 on T4
        _test_notebook_findings(capsys, nb, argv)


def _test_notebook_findings(capsys, nb, argv):
    _, out, _ = run(capsys, *argv)
    assert f"{nb}:cell 4:5:5: MEM101" in out
    cells = json.loads(Path(nb).read_text())["cells"]
    code_cells = [c for c in cells if c["cell_type"] == "code"]
    src = code_cells[3]["source"]
    line = (src if isinstance(src, list) else src.splitlines(True))[4]
    assert "per_device_train_batch_size" in line
    _, out, _ = run(capsys, *argv, "--output-format", "json")
    [cap] = [d for d in json.loads(out) if d["code"] == "MEM101"]
    assert cap["cell"] == 4 and cap["location"] == {"row": 5, "column": 5} and cap["noqa_row"] == 5


def test_diff_shows_fixes_without_writing_and_fix_writes_them_idempotently(tmp_path, capsys):
    import shutil

    target = tmp_path / "hf_trainer_full.py"
    shutil.copy(SCRIPTS / "hf_trainer_full.py", target)
    before = target.read_text()
    code, out, err = run(capsys, "check", str(target), "--gpu", "RTX4090", "--diff")
    assert code == 1 and '-        padding="max_length",' in out and "+        padding=False," in out
    assert target.read_text() == before and "Would fix 1 finding" in err
    code, out, err = run(capsys, "check", str(target), "--gpu", "RTX4090", "--fix")
    after = target.read_text()
    assert after == before.replace('padding="max_length"', "padding=False") and "Fixed 1 file" in err
    assert "MEM201" not in out and "MEM101" in out  # the report is of the fixed file
    run(capsys, "check", str(target), "--gpu", "RTX4090", "--fix")
    assert target.read_text() == after  # idempotent
    code, out, _ = run(capsys, "check", str(target), "--gpu", "RTX4090", "--diff")
    assert code == 0 and out == ""


def test_unsafe_fixes_need_the_flag(tmp_path, capsys):
    from memlint.rules.samples import script

    f = tmp_path / "train.py"
    f.write_text(script(batch=4, max_length=8192))  # MEM202: group_by_length is declared unsafe
    _, out, _ = run(capsys, "check", str(f), "--select", "MEM202", "--diff")
    assert out == ""
    _, out, _ = run(capsys, "check", str(f), "--select", "MEM202", "--diff", "--unsafe-fixes")
    assert "group_by_length=True" in out or 'train_sampling_strategy="group_by_length"' in out


def test_fix_on_stdin_prints_the_fixed_source(capsys, monkeypatch):
    import io

    src = (SCRIPTS / "hf_trainer_full.py").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(src)))
    code, out, _ = run(capsys, "check", "-", "--stdin-filename", "train.py", "--fix", "--gpu", "RTX4090")
    assert code == 0 and out == src.decode().replace('padding="max_length"', "padding=False")


def test_zero3_script_on_eight_gpus_is_answered_per_rank(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    f = "fixtures/scripts/deepspeed_zero3.py"
    code, out, _ = run(capsys, f, "--gpus", "8", "--gpu", "H100", "--output-format", "full")
    assert "per GPU (rank) of 8, zero3" in out and "buffers" in out
    [line] = [ln for ln in out.splitlines() if ln.startswith(f) and "MEM101" in ln]
    assert "per GPU (8 GPUs, zero3)" in line
    _, one, _ = run(capsys, f, "--gpus", "8", "--gpu", "H100", "--output-format", "json")
    [cap] = [d for d in json.loads(one) if d["code"] == "MEM101"]
    # 70B full fine-tuning with DeepSpeed's fp32 master and moments: 16 B/param over 8 ranks
    assert cap["data"]["peak_bytes"] > 16 * 68_976_648_192 // 8


def test_add_noqa_suppresses_every_finding_and_keeps_existing_codes(tmp_path, capsys, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copy(SCRIPTS / "branches.py", tmp_path / "train.py")
    text = (tmp_path / "train.py").read_text()
    line = next(ln for ln in text.splitlines() if "padding=" in ln)
    (tmp_path / "train.py").write_text(text.replace(line, line + "  # noqa: MEM999"))
    code, out, _ = run(capsys, "check", "train.py", "--gpu", "RTX4090", "--no-cache")
    before = [ln.split()[1] for ln in out.splitlines()[:-1]]
    answer = out.splitlines()[-1]
    assert code == 1 and before and answer.startswith("train.py: peak ") and "does not fit RTX4090" in answer
    code, _, err = run(capsys, "check", "train.py", "--gpu", "RTX4090", "--add-noqa", "--no-cache")
    assert code == 0 and err.startswith("Added ") and not err.startswith("Added 0 ")
    code, out, err = run(capsys, "check", "train.py", "--gpu", "RTX4090", "--no-cache")
    # every finding suppressed; the answer stays
    assert code == 0 and out == answer + "\n"
    assert "All checks passed!" in err
    new = (tmp_path / "train.py").read_text()
    assert "# noqa: MEM201, MEM999" in new  # merged into the comment that was there
    # a second run adds nothing
    assert run(capsys, "check", "train.py", "--gpu", "RTX4090", "--add-noqa", "--no-cache")[2].startswith(
        "Added 0 noqa directives.")


def test_add_noqa_leaves_lines_that_end_inside_a_string():
    from memlint.fix.noqa import _unsafe_lines, with_noqa

    src = 'x = """a\nb"""\ny = 1 + \\\n    2\nz = 3\n'
    assert _unsafe_lines(src) == {1, 3}
    assert with_noqa("z = 3", {"MEM101"}) == "z = 3  # noqa: MEM101"
    assert with_noqa("z = 3  # noqa", {"MEM101"}) == "z = 3  # noqa"
    assert with_noqa("z = 3  # noqa: MEM2  trailing", {"MEM101"}).startswith("z = 3  # noqa: MEM101")
