"""memlint lints untrusted code in CI and pre-commit: nothing in a checkout under review runs,
nothing small explodes, no input gives a traceback, nothing in the output is spoofed.

Each test here is one of issue #17's attacks (docs/security.md names them). A test that
shows an attack is harmless first shows the attack is live (plain git runs the command).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from memlint.cli import main

ROOT = Path(__file__).resolve().parent.parent
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

SCRIPT = '''\
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype="bfloat16")
tok(batch, max_length=512, padding="max_length")
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, bf16=True)
Trainer(model=model, args=args).train()
'''


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _safe_git(cwd: Path, *args: str) -> str:
    """git as the tests run it: the throwaway repository's config is the test's own."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "core.fsmonitor=false",
                           "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


# ---- nothing runs: .gitignore read without git, memlint diff with git's hooks off ----------------

IGNORE_TOP = r"""# a comment
*.json
!keep.json
/anchored.py
build_out/
docs/**/gen.py
**/cache
a/**
[abc]x.py
[!abc]y.py
[a-c]z.py
[[:digit:]]d.py
\#hash.py
\!bang.py
trail.py\ 
spaces.py   
q?.py
*.tmp/
deep/*/x.py
lit[.py
esc\*.py
nested/**/
"""
IGNORE_SUB = """!*.json
local.py
/top_only.py
"""
IGNORE_PATHS = [
    "x.json", "keep.json", "sub/x.json", "anchored.py", "sub/anchored.py", "build_out/f.py", "sub/build_out/f.py",
    "docs/gen.py", "docs/a/gen.py", "docs/a/b/gen.py", "cache/f.py", "sub/cache/f.py", "a/f.py", "a/b/f.py", "ax.py",
    "dx.py", "ay.py", "dy.py", "bz.py", "dz.py", "1d.py", "xd.py", "#hash.py", "!bang.py", "trail.py ", "trail.py",
    "spaces.py", "q1.py", "q12.py", "d.tmp/f.py", "f.tmp.yaml", "deep/a/x.py", "deep/a/b/x.py", "lit[.py", "esc*.py",
    "escx.py", "nested/f.py", "nested/d/f.py", "sub/local.py", "local.py", "sub/top_only.py", "sub/deeper/top_only.py",
    "sub/deeper/local.py", "plain.py", "sub/plain.py", "excluded.py", "sub/excluded.py",
]


def _git_check_ignore(repo: Path, paths: list[str]) -> set[str]:
    r = subprocess.run(["git", "-c", "core.fsmonitor=false", "check-ignore", "--no-index", "-z", "--stdin"], cwd=repo,
                       input="\0".join(paths).encode() + b"\0", capture_output=True)
    assert r.returncode in (0, 1), r.stderr
    return {p for p in r.stdout.decode().split("\0") if p}


def _walk_ignored(repo: Path, paths: list[str], start: str = "") -> set[str]:
    from memlint.files import walk

    found = {p.relative_to(repo).as_posix() for p in walk(repo / start)}
    return {p for p in paths if p.startswith(start) and p not in found}


def _make_repo(tmp: Path, ignores: dict[str, str], paths: list[str], exclude: str = "") -> Path:
    subprocess.run(["git", "init", "-q", str(tmp)], check=True)
    for folder, text in ignores.items():
        (tmp / folder).mkdir(parents=True, exist_ok=True)
        (tmp / folder / ".gitignore").write_text(text)
    if exclude:
        (tmp / ".git" / "info").mkdir(exist_ok=True)
        (tmp / ".git" / "info" / "exclude").write_text(exclude)
    for p in paths:
        (tmp / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp / p).write_text("x")
    return tmp


@needs_git
def test_the_walk_ignores_what_git_check_ignore_ignores(tmp_path):
    repo = _make_repo(tmp_path, {"": IGNORE_TOP, "sub": IGNORE_SUB}, IGNORE_PATHS, exclude="excluded.py\n")
    expected = _git_check_ignore(repo, IGNORE_PATHS)
    assert len(expected) > 20 and len(set(IGNORE_PATHS) - expected) > 10  # both sides exercised
    assert _walk_ignored(repo, IGNORE_PATHS) == expected
    # walking a subfolder applies the rules of the folders above it
    assert _walk_ignored(repo, IGNORE_PATHS, "sub") == {p for p in expected if p.startswith("sub/")}


@needs_git
def test_random_gitignores_agree_with_git():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    atom = st.sampled_from(["a", "b", "*", "**", "**/", "/**", "?", "[ab]", "[!a]", "[a-b]", "\\*", "/", "a/", "!",
                            "c.py", "d"])
    pattern = st.lists(atom, min_size=1, max_size=5).map("".join)
    names = ["a.py", "b.py", "c.py", "ab.py", "a/a.py", "a/b.py", "b/a/c.py", "a/b/c.py", "d/c.py", "ba/d.py"]

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(pattern, min_size=1, max_size=4))
    def agree(patterns):
        with tempfile.TemporaryDirectory() as tmp:
            repo = _make_repo(Path(tmp), {"": "\n".join(patterns) + "\n"}, names)
            assert _walk_ignored(repo, names) == _git_check_ignore(repo, names), patterns

    agree()


def _armed_repo(tmp_path: Path, parent: bool) -> tuple[Path, Path]:
    """A repository whose own .git/config runs `touch PWNED` from every hook git offers; the
    scripts live at its top or in a folder below it. Returns (folder to lint, the file the attack makes)."""
    repo = tmp_path / "repo"
    work = repo / "project" if parent else repo
    work.mkdir(parents=True)
    _safe_git(repo, "init", "-q", "-b", "main")
    (work / "train.py").write_text(SCRIPT)
    _safe_git(repo, "add", ".")
    _safe_git(repo, "commit", "-qm", "base")
    (work / "train.py").write_text(SCRIPT.replace("per_device_train_batch_size=2", "per_device_train_batch_size=4"))
    pwned = tmp_path / "PWNED"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "pre-commit", "post-checkout"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {pwned}\n")
        (hooks / hook).chmod(0o755)
    (repo / ".gitattributes").write_text("*.py filter=evil diff=evil\n")
    for key, value in (("core.fsmonitor", f"touch {pwned}; echo"), ("core.hooksPath", str(hooks)),
                       ("diff.external", f"touch {pwned}; true"), ("filter.evil.clean", f"touch {pwned}; cat"),
                       ("diff.evil.textconv", f"touch {pwned}; cat"), ("core.pager", f"touch {pwned}; cat")):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    return work, pwned


@needs_git
@pytest.mark.parametrize("parent", [False, True], ids=["git-here", "git-in-a-parent"])
@pytest.mark.parametrize("command", ["check", "plan", "diff"])
def test_a_repository_config_runs_nothing(tmp_path, capsys, monkeypatch, command, parent):
    work, pwned = _armed_repo(tmp_path, parent)
    subprocess.run(["git", "status"], cwd=work, capture_output=True)  # the attack is live: plain git runs it
    assert pwned.exists()
    pwned.unlink()
    monkeypatch.chdir(work)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", f"touch {pwned}; true")
    argv = {"check": ["check", ".", "--exit-zero"], "plan": ["plan", "."], "diff": ["diff", "HEAD"]}[command]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert "train.py" in out + err  # the folder was read, the change was seen
    assert not pwned.exists()


def test_a_fifo_or_a_device_named_on_the_command_line_is_refused_not_read(tmp_path, capsys):
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    (tmp_path / "ok.py").write_text(SCRIPT)
    code, out, err = run(capsys, "check", str(fifo), "/dev/zero", str(tmp_path / "ok.py"), "--exit-zero")
    assert code == 0, err
    assert f"{fifo}:1:1: MEM001 note: not read: a FIFO, not a regular file" in out
    assert "/dev/zero:1:1: MEM001 note: not read: a character device" in out
    assert str(tmp_path / "ok.py") in out + err  # the others are still checked
    code, _, err = run(capsys, "plan", str(fifo))
    assert code == 2 and err.count("\n") == 1 and "a FIFO" in err


# ---- nothing runs: linted code, remote code, the network ------------------------------------------

TRAP = """import os, socket
open({pwned!r} + "-script", "w").write("ran")
os.system("touch " + {pwned!r} + "-system")
import helpers
exec("open(" + repr({pwned!r} + "-exec") + ", 'w')")
""" + SCRIPT


def test_linted_code_never_runs(tmp_path, capsys, monkeypatch):
    pwned = str(tmp_path / "PWNED")
    (tmp_path / "train.py").write_text(TRAP.format(pwned=pwned))
    (tmp_path / "helpers.py").write_text(f"open({pwned!r} + '-sibling', 'w').write('ran')\n")
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": TRAP.format(
        pwned=pwned)}, {"cell_type": "code", "source": f"!touch {pwned}-shell"}], "metadata": {}, "nbformat": 4}))
    monkeypatch.chdir(tmp_path)
    for argv in (["check", ".", "--exit-zero"], ["plan", "train.py", "nb.ipynb"], ["check", "-", "--exit-zero"]):
        monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": __import__("io").BytesIO(TRAP.format(
            pwned=pwned).encode()), "close": lambda self: None})())  # a -j worker closes its stdin
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert "train.py" in out + err or argv[1] == "-"
    assert not list(tmp_path.glob("PWNED*"))


def test_the_lint_path_opens_no_socket(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", "some-org/not-in-the-catalog"))
    code = f"""
import socket, sys
sys.path.insert(0, {str(ROOT / 'src')!r})
tried = []
class NoNetwork(socket.socket):
    def __init__(self, *a, **k):
        tried.append(a)
        raise OSError("the network is off limits")
socket.socket = NoNetwork
socket.create_connection = lambda *a, **k: tried.append(a) or (_ for _ in ()).throw(OSError("off limits"))
from memlint.cli import main
rc = [main(argv) for argv in (["check", {str(tmp_path)!r}, "--exit-zero", "-q"], ["check", {str(ROOT / 'fixtures')!r},
      "--exit-zero", "-q", "--output-format", "json"], ["plan", {str(tmp_path / 'train.py')!r}])]
print(rc, tried)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.stdout.strip().splitlines()[-1] == "[0, 0, 0] []", proc.stdout[-500:] + proc.stderr[-2000:]


def test_remote_code_named_by_a_local_config_is_never_run(tmp_path, capsys):
    pytest.importorskip("transformers")
    d = tmp_path / "remote"
    d.mkdir()
    pwned = tmp_path / "PWNED"
    (d / "configuration_evil.py").write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    (d / "modeling_evil.py").write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    (d / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {
        "AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"},
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}))
    code, _, err = run(capsys, "estimate", "--model", str(d))
    _one_line_error(code, err)
    assert "'evil'" in err and not pwned.exists()


# ---- nothing explodes: every value, file and script has a budget ---------------------------------

def _model_from(body: str) -> str:
    return ("import torch\nfrom transformers import AutoModelForCausalLM\n" + body
            + "model = AutoModelForCausalLM.from_pretrained(VALUE)\n")


@pytest.mark.parametrize("body", [
    's = "a" * 10000\n' + "s = s + s\n" * 19 + "VALUE = s\n",
    's = "a" * 10000\nVALUE = s * 10000 * 20\n',
    'VALUE = f"{1:1500000000}"\n',
    'VALUE = f"{1.5:.1500000000f}"\n',
    'VALUE = "{:1500000000}".format(1)\n',
    'VALUE = "%1500000000d" % 1\n',
    's = "a" * 90000\nVALUE = s.replace("a", s)\n',
    's = "a" * 90000\nVALUE = "-".join([s, s, s])\n',
    's = "a" * 90000\nVALUE = "{0}{0}{0}".format(s)\n',
    "x = [1, 2]\n" + "x = x + x\n" * 40 + "VALUE = x\n",
    "x = [1]\n" + "x = [x, x]\n" * 40 + "VALUE = x\n",
    "VALUE = 1 << (1 << 34)\n",
    "m = 10 ** 64\nm = m ** 64\nVALUE = m ** 64\n",
    f"n = int('{'9' * 4000}')\nVALUE = n * n * n\n",
], ids=["str-doubling", "str-repetition", "fstring-width", "fstring-precision", "format-width", "percent-width",
        "replace", "join", "format-fields", "list-doubling", "nested-lists", "shift", "power", "int-product"])
def test_a_value_past_its_budget_is_unknown_with_a_note(body):
    from memlint.extract import extract_source
    from memlint.extract.budget import OVER

    plan = extract_source(_model_from(body), "train.py")
    assert not plan.get("model_id").known
    assert any(OVER in n for n in plan.notes), plan.notes


def test_values_within_the_budget_are_still_computed():
    from memlint.extract import extract_source

    plan = extract_source(_model_from('s = "ab" * 3000\nVALUE = f"org/{s[1]}-{len(s):>6}" + "-x" * 2\n'), "t.py")
    assert plan.get("model_id").value == "org/b-  6000-x-x"


def test_a_cyclic_dict_is_read_without_recursing_forever():
    from memlint.extract import extract_source

    plan = extract_source(_model_from('d = {"m": "org/model"}\nd["self"] = d\ne = d\nVALUE = e["m"]\n'), "t.py")
    assert plan.get("model_id").value == "org/model"


def test_a_script_past_the_time_budget_stops_with_a_note(monkeypatch):
    from memlint.extract import budget, extract_source

    monkeypatch.setattr(budget, "MAX_SECONDS", 0.0)
    body = "def f(x):\n    return x + 1\n" + "y = f(1)\n" * 1100 + 'VALUE = "org/model"\n'
    plan = extract_source(_model_from(body), "t.py")
    assert any("time budget" in n for n in plan.notes)
    assert not plan.get("model_id").known  # set after the budget ran out


@pytest.mark.parametrize("name, text, needle", [
    ("long.py", "import torch\n" + "x = 1\n" * 100_000, "100,001 lines, over memlint's budget of 10,000 lines"),
    ("wide.py", "import torch\n" + ("x = '" + "a" * 990 + "'\n") * 300, "over memlint's budget of 256,000"),
    ("cells.ipynb", json.dumps({"cells": [{"cell_type": "code", "source": "import torch"}] * 2500, "metadata": {},
                               "nbformat": 4}), "more than 2,000 code cells"),
])
def test_a_script_or_notebook_past_its_budget_is_a_note_not_parsed(tmp_path, capsys, name, text, needle):
    (tmp_path / name).write_text(text)
    code, out, err = run(capsys, "check", str(tmp_path / name))
    assert code == 0 and "MEM001 note: not analysed" in out and needle in out, out + err


def test_max_file_size_is_a_note_for_named_and_followed_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nmax-file-size = "4KB"\n')
    (tmp_path / "big.py").write_text("import torch\n" + "# padding\n" * 1000)
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "pad": "x" * 5000}))
    (tmp_path / "axolotl.yaml").write_text("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\n"
                                           "micro_batch_size: 2\nsequence_len: 2048\ndeepspeed: ds.json\n")
    (tmp_path / "helpers.py").write_text("MODEL = 'org/m'\n" + "# padding\n" * 1000)
    # the sibling is read when its name is used (a name only imported leaves the module unread)
    (tmp_path / "uses_sibling.py").write_text("import torch\nfrom helpers import MODEL\n" + SCRIPT.replace('"Qwen/Qwen2.5-0.5B"', "MODEL"))
    (tmp_path / "uses_ds.py").write_text(SCRIPT.replace('bf16=True', 'bf16=True, deepspeed="ds.json"'))
    local = tmp_path / "local_model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"model_type": "llama", "pad": "x" * 5000}))
    (tmp_path / "uses_local.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", "./local_model"))
    code, out, err = run(capsys, "check", ".", "big.py", "--exit-zero")
    assert code == 0, err
    assert "big.py:1:1: MEM001 note: not read: 10,013 bytes, over the max-file-size of 4,000 bytes" in out
    for followed, by in (("ds.json", "axolotl.yaml"), ("ds.json", "uses_ds.py"), ("helpers.py", "uses_sibling.py"),
                         ("local_model/config.json", "uses_local.py")):
        assert f"{followed}:1:1: MEM001 note: not read:" in out and f"(followed from {by})" in out, (followed, out)
    # the default is 2 MB: a 3 MB DeepSpeed JSON named on the command line is not read either
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "pad": "x" * 3_000_000}))
    code, out, _ = run(capsys, "check", "ds.json")
    assert "ds.json:1:1: MEM001 note: not read: 3.0 MB, over the max-file-size of 2.0 MB" in out


def test_the_adversarial_benchmark_set_is_read_without_a_traceback(tmp_path, capsys, monkeypatch):
    """benchmarks/adversarial.py times these; here every one is answered with findings, exit 0."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from adversarial import make_cases
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    cases = make_cases(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "check", *[p.name if p.parent == tmp_path else str(p) for p in cases.values()],
                         "--exit-zero")
    assert code == 0 and "Traceback" not in out + err and "internal error" not in out, out + err
    for needle in ("100k-lines.py:1:1: MEM001 note: not analysed", "notebook-200k-cells.ipynb:1:1: MEM001 note: not read",
                   "ds_big.json:1:1: MEM001 note: not read", "deep.yaml:1:1: MEM001 note: nested more than 64 levels",
                   "moe/config.json: num_local_experts must be a whole number"):
        assert needle in out, needle


# ---- no traceback, ever: a finding, or one line and exit 2 ----------------------------------------

LLAMA_CFG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}


def _one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("memlint: error: "), err


def test_a_local_config_of_a_family_outside_the_catalog_is_counted_by_transformers(tmp_path, capsys):
    pytest.importorskip("transformers")
    d = tmp_path / "gpt2-tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                               "vocab_size": 1000, "n_positions": 128}))
    code, out, err = run(capsys, "estimate", "--model", str(d), "--format", "json")
    assert code == 0, err
    # gpt2's own count: wte 64k + wpe 8k + 2 blocks of 49,984 + the final norm; lm_head tied
    assert json.loads(out)["model"]["params"] == 1000 * 64 + 128 * 64 + 2 * 49_984 + 128


def test_measure_builds_a_local_config(tmp_path, capsys):
    pytest.importorskip("transformers")
    d = tmp_path / "llama-tiny"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(dict(LLAMA_CFG, intermediate_size=96)))  # no catalog entry matches
    code, out, err = run(capsys, "measure", "--model", str(d), "--seq", "16", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["measured_peak"] > 0


@pytest.mark.parametrize("change, needle", [
    ({"hidden_size": "4096"}, "hidden_size must be a whole number from 1"),
    ({"hidden_size": None}, "config.json has no hidden_size"),
    ({"hidden_size": [64]}, "hidden_size must be a whole number"),
    ({"num_attention_heads": 0}, "num_attention_heads must be a whole number from 1"),
    ({"vocab_size": None}, "config.json has no vocab_size"),
    ({"num_hidden_layers": float("nan")}, "not nan"),
    ({"num_hidden_layers": 10 ** 400}, "an integer of 1329 bits"),
    ({"num_hidden_layers": -32}, "not -32"),
    ({"num_local_experts": "88"}, "num_local_experts must be a whole number"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    ({"model_type": 5}, "model_type must be a model family name"),
])
def test_a_bad_local_config_is_one_line_never_a_negative_count(tmp_path, capsys, change, needle):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({k: v for k, v in {**LLAMA_CFG, **change}.items() if v is not None}
                                              if None in change.values() else {**LLAMA_CFG, **change}))
    code, _, err = run(capsys, "estimate", "--model", str(d))
    _one_line_error(code, err)
    assert needle in err
    (tmp_path / "train.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", str(d)))
    code, out, err = run(capsys, "check", str(tmp_path / "train.py"), "--gpu", "24", "--exit-zero")
    assert code == 0 and "MEM002 note: no estimate" in out and needle in out and "fits" not in err, out + err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "0", "-3"])
def test_a_gpu_size_that_is_no_size_is_one_line(tmp_path, capsys, monkeypatch, value):
    (tmp_path / "train.py").write_text(SCRIPT)
    code, _, err = run(capsys, "check", str(tmp_path / "train.py"), f"--gpu={value}")
    _one_line_error(code, err)
    (tmp_path / "pyproject.toml").write_text(f"[tool.memlint]\ngpu = {value if value != '1e999' else '1e999'}\n"
                                             if value in ("nan", "inf", "-inf") else f'[tool.memlint]\ngpu = "{value}"\n')
    code, _, err = run(capsys, "check", str(tmp_path / "train.py"))
    _one_line_error(code, err)


@pytest.mark.parametrize("item", ["max_length=abc", "max_length=nan", "max_length=inf", "max_length=",
                                  "per_device_batch=1e999", "gpus=0", "grad_accum=-1", "lora_r=2.5"])
def test_an_assumption_that_is_no_count_is_one_line(tmp_path, capsys, item):
    (tmp_path / "train.py").write_text(SCRIPT)
    for command in ("check", "plan"):
        code, _, err = run(capsys, command, str(tmp_path / "train.py"), "--assume", item)
        _one_line_error(code, err)
        assert "must be a whole number" in err


@pytest.mark.parametrize("args, needle", [
    ("per_device_train_batch_size=1e999", "per_device_batch is unknown (inf is not an integer)"),
    ("per_device_train_batch_size=float('nan')", "per_device_batch is unknown"),
    ("per_device_train_batch_size='many'", "per_device_batch is unknown"),
])
def test_a_script_value_that_is_no_count_is_unknown(tmp_path, capsys, args, needle):
    (tmp_path / "train.py").write_text(SCRIPT.replace("per_device_train_batch_size=2", args))
    code, out, err = run(capsys, "check", str(tmp_path / "train.py"), "--gpu", "T4", "--exit-zero")
    assert code == 0 and "Traceback" not in err and needle in out, out + err


def test_a_list_where_a_count_belongs_is_unknown_and_the_rest_still_estimated(tmp_path, capsys):
    (tmp_path / "train.py").write_text(SCRIPT.replace("bf16=True", "bf16=True, gradient_accumulation_steps=[1]"))
    code, out, err = run(capsys, "plan", str(tmp_path / "train.py"), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["plan"]["grad_accum"]["source"] == "unknown" and doc["estimate"]["peak"] > 0


def test_a_5000_digit_integer_in_a_script_is_a_finding(tmp_path, capsys):
    (tmp_path / "train.py").write_text(SCRIPT + f"N = {'9' * 5000}\n")
    (tmp_path / "conv.py").write_text(SCRIPT.replace("per_device_train_batch_size=2",
                                                     f"per_device_train_batch_size=int('{'9' * 5000}')"))
    code, out, err = run(capsys, "check", str(tmp_path), "--exit-zero")
    assert code == 0, err
    assert "train.py:7:1: MEM001 note: SyntaxError: Exceeds the limit (4300 digits)" in out
    assert "conv.py" in out and "per_device_batch is unknown" in out


@pytest.mark.parametrize("toml, needle", [
    ('[tool.memlint]\nfail-on = ["note"]\n', "`fail-on` must be one of"),
    ('[tool.memlint]\naccounting = ["real"]\n', "`accounting` must be real or textbook"),
    ("[tool.memlint]\ngpus = true\n", "`gpus` must be a positive integer"),
    ('[tool.memlint]\nmax-file-size = "10%"\n', "`max-file-size` must be a size"),
    ("[tool.memlint]\nmax-file-size = -1\n", "`max-file-size` must be a size"),
    ("[tool.memlint.options.MEM202]\ntypical-length = nan\n", "must be a number from 1"),
    ("[tool.memlint]\nassume = " + "[" * 3000 + "]" * 3000 + "\n", "invalid TOML: nested too deeply"),
])
def test_a_bad_setting_is_one_line(tmp_path, capsys, toml, needle):
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "train.py").write_text(SCRIPT)
    code, _, err = run(capsys, "check", str(tmp_path / "train.py"))
    _one_line_error(code, err)
    assert needle in err


def test_a_parent_pyproject_with_tool_not_a_table_is_no_crash(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("tool = 5\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text(SCRIPT)
    code, out, err = run(capsys, "check", str(tmp_path / "sub" / "train.py"), "--exit-zero")
    assert code == 0 and "Traceback" not in err
    code, _, err = run(capsys, "check", str(tmp_path / "sub" / "train.py"), "--config", str(tmp_path / "pyproject.toml"))
    _one_line_error(code, err)
    assert "[tool] must be a table" in err


def test_a_folder_of_bad_files_reports_every_one_and_the_good_one(tmp_path, capsys, monkeypatch):
    d = tmp_path / "bad_model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_CFG, "hidden_size": "4096"}))
    (tmp_path / "a_bad_model.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", str(d)))
    (tmp_path / "b_deep.yaml").write_text("base_model: x\nadapter: lora\nd: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "c_null.ipynb").write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": SCRIPT}, {"cell_type": "code", "source": None}], "metadata": {}}))
    (tmp_path / "d_wrong.ipynb").write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": "import torch\nmodel.train()"}, {"cell_type": "code", "source": 5}],
        "metadata": {}}))  # a training signal: a walk reads it (a notebook that only imports torch is skipped)
    (tmp_path / "e_good.py").write_text(SCRIPT)
    code, out, err = run(capsys, "check", str(tmp_path), "--gpu", "24", "--output-format", "json")
    assert code in (0, 1) and "Traceback" not in err, err
    files = {Path(f["filename"]).name for f in json.loads(out)}
    assert {"a_bad_model.py", "b_deep.yaml", "d_wrong.ipynb"} <= files
    code, out, err = run(capsys, "check", str(tmp_path / "c_null.ipynb"), str(tmp_path / "e_good.py"), "--gpu", "24")
    assert code in (0, 1) and "MEM001" not in out, out  # a null source is an empty cell


def test_a_bug_met_on_one_file_is_a_note_and_the_others_are_still_checked(tmp_path, capsys, monkeypatch):
    import memlint.check as engine

    real = engine.read_target

    def flaky(target):
        if target.path.name == "boom.py":
            raise ZeroDivisionError("a bug")
        return real(target)

    monkeypatch.setattr(engine, "read_target", flaky)
    (tmp_path / "boom.py").write_text(SCRIPT)
    (tmp_path / "fine.py").write_text(SCRIPT)
    code, out, err = run(capsys, "check", str(tmp_path / "boom.py"), str(tmp_path / "fine.py"), "--exit-zero")
    assert code == 0, err
    assert "boom.py:1:1: MEM001 note: memlint could not analyse this file (internal error: ZeroDivisionError: a bug)" in out
    assert "fine.py" in out + err


def test_an_unexpected_error_outside_any_file_is_one_line_and_exit_2(capsys, monkeypatch):
    import memlint.commands.rule as rule

    monkeypatch.setattr(rule, "run", lambda args: 1 / 0, raising=False)
    parser_func = None

    def boom(args):
        raise ZeroDivisionError("division by zero")

    from memlint import cli

    real_build = cli.build_parser

    def build(*a):
        p = real_build(*a)
        p.set_defaults(func=boom)
        for action in p._subparsers._group_actions:
            for sub in action.choices.values():
                sub.set_defaults(func=boom)
        return p

    monkeypatch.setattr(cli, "build_parser", build)
    code, _, err = run(capsys, "rule", "MEM001")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("memlint: internal error: ZeroDivisionError: division by zero")
    del parser_func


def test_a_broken_or_unreadable_hf_cache_is_skipped(tmp_path, capsys, monkeypatch):
    hub = tmp_path / "hub"
    snaps = hub / "models--org--broken" / "snapshots"
    snaps.mkdir(parents=True)
    (snaps / "dangling").symlink_to(tmp_path / "nowhere")
    (hub / "models--org--broken" / "refs").mkdir()
    (hub / "models--org--broken" / "refs" / "main").symlink_to(tmp_path / "nowhere-either")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    code, _, err = run(capsys, "estimate", "--model", "org/broken")
    _one_line_error(code, err)
    assert "unknown model 'org/broken'" in err
    real = Path.iterdir

    def locked(self):
        if self.name == "snapshots":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", locked)
    code, _, err = run(capsys, "estimate", "--model", "org/broken")
    _one_line_error(code, err)


def test_an_unreadable_folder_in_a_walk_is_skipped(tmp_path, capsys, monkeypatch):
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "train.py").write_text(SCRIPT)
    (tmp_path / "train.py").write_text(SCRIPT)
    real = os.scandir

    def scandir(path="."):
        if os.path.basename(os.fspath(path)) == "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = run(capsys, "check", str(tmp_path), "--exit-zero")
    assert code == 0 and str(tmp_path / "train.py") in out + err and "locked" not in out + err


def test_sarif_and_github_take_a_file_name_that_is_not_utf8(tmp_path, capsys):
    name = os.fsdecode(b"tr\xffin.py")
    (tmp_path / name).write_text(SCRIPT.replace("per_device_train_batch_size=2", "per_device_train_batch_size=64"))
    code, out, err = run(capsys, "check", str(tmp_path), "--output-format", "sarif", "--gpu", "T4", "--exit-zero")
    assert code == 0, err
    uris = [loc["physicalLocation"]["artifactLocation"]["uri"] for r in json.loads(out)["runs"][0]["results"]
            for loc in r["locations"]]
    assert uris and all("tr%FFin.py" in u for u in uris)
    for fmt in ("github", "concise", "full"):
        code, out, err = run(capsys, "check", str(tmp_path), "--output-format", fmt, "--gpu", "T4", "--exit-zero")
        assert code == 0 and "tr\\xffin.py" in out, (fmt, err)


@pytest.mark.parametrize("target", ["/nonexistent-folder/report.txt", "/dev/full"])
def test_a_report_that_cannot_be_written_is_one_line(tmp_path, capsys, target):
    if target == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    (tmp_path / "train.py").write_text(SCRIPT)
    code, _, err = run(capsys, "check", str(tmp_path / "train.py"), "-o", target)
    _one_line_error(code, err)
    assert "cannot write the report" in err


# ---- property-based: generated flags, settings and config.json files ------------------------------

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v))
    if isinstance(v, (int, str)):
        return json.dumps(v) if isinstance(v, str) else str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _answered(code: int, out: str, err: str) -> None:
    """Exit 0, 1 or 2; a bad value is named (exit 2: one line), not met by the safety net that
    turns a bug into "internal error"."""
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in out + err and "internal error" not in out + err, out + err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("memlint: error: "), err


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("generated")
    (d / "train.py").write_text(SCRIPT)
    return d


def test_generated_gpu_and_assume_flags_are_answered(gen_dir, capsys):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from memlint.plan import PLAN_FIELDS

    text = st.one_of(st.text(max_size=12), st.sampled_from(["nan", "inf", "-inf", "1e999", "0", "-1", "", "24", "4",
                                                            "1e-9", "80GiB", "A100", "true", "a,b", "2.5"]))
    key = st.one_of(st.sampled_from(PLAN_FIELDS + ("gpus", "nodes", "seq", "batch")), st.text(max_size=8))

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(gpu=st.one_of(st.none(), text), assume=st.lists(st.tuples(key, text), max_size=3))
    def answered(gpu, assume):
        argv = ["check", str(gen_dir / "train.py")] + ([f"--gpu={gpu}"] if gpu is not None else [])
        for k, v in assume:
            argv += ["--assume", f"{k}={v}"]
        _answered(*run(capsys, *argv))

    answered()


def test_generated_tool_memlint_tables_are_answered(gen_dir, capsys):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from memlint.config import KEYS

    scalar = st.one_of(st.booleans(), st.integers(-10, 10 ** 12), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=10), st.sampled_from(["note", "warning", "MEM1", "ALL", "24", "2MB", "10%",
                                                              "real", "max_length=1"]))
    value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                         max_leaves=6)
    table = st.dictionaries(st.one_of(st.sampled_from(sorted(KEYS)), st.text(max_size=6)), value, max_size=3)

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(table)
    def answered(table):
        body = "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in table.items())
        (gen_dir / "memlint.toml").write_text(body)
        try:
            _answered(*run(capsys, "check", str(gen_dir / "train.py")))
        finally:
            (gen_dir / "memlint.toml").unlink()

    answered()


def test_generated_local_config_files_are_answered(gen_dir, capsys):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from memlint.catalog.local import SHAPE_KEYS

    value = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.integers(), st.text(max_size=5),
                      st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(0, 9), max_size=2))
    good = {**LLAMA_CFG}
    cfg = st.fixed_dictionaries({"model_type": st.sampled_from(["llama", "qwen2", "mistral", "mixtral", "nope", 5])},
                                optional={k: value for k in SHAPE_KEYS})

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(cfg, st.booleans())
    def answered(cfg, start_good):
        d = gen_dir / "model"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(json.dumps({**(good if start_good else {}), **cfg}))
        _answered(*run(capsys, "estimate", "--model", str(d), "--format", "json"))
        (gen_dir / "local.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", str(d)))
        _answered(*run(capsys, "check", str(gen_dir / "local.py"), "--gpu", "24"))

    answered()


# ---- output cannot be spoofed: control characters escaped in every human format -------------------

SPOOF = "\x1b]0;TITLE\x07\x1b[2J[bold]x\u202e"
SPOOF_SCRIPT = SCRIPT.replace('"Qwen/Qwen2.5-0.5B"', repr(SPOOF))


def _clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert "\\x1b]0;TITLE\\x07\\x1b[2J" in text, text


@pytest.mark.parametrize("argv", [
    ["check", "--output-format", "concise"], ["check", "--output-format", "full"], ["check", "--output-format", "github"],
    ["check", "--statistics", "--select", "ALL"], ["plan"],
])
def test_a_model_id_with_escape_bytes_is_printed_escaped(tmp_path, capsys, argv):
    (tmp_path / "train.py").write_text(SPOOF_SCRIPT)
    code, out, err = run(capsys, *argv, str(tmp_path / "train.py"), *(["--exit-zero"] if argv[0] == "check" else []))
    assert code == 0, err
    if "--statistics" in argv:  # counts and rule names only: nothing from the file, nothing to escape
        assert "\x1b" not in out + err
        return
    _clean(out + err)


def test_a_file_name_with_escapes_and_a_newline_cannot_forge_a_line(tmp_path, capsys):
    name = "x\x1b[31m.py\nfake.py:1:1: MEM101 forged.py"
    (tmp_path / name).write_text(SCRIPT.replace("per_device_train_batch_size=2", "per_device_train_batch_size=64"))
    for fmt in ("concise", "full"):
        code, out, err = run(capsys, "check", str(tmp_path), "--output-format", fmt, "--exit-zero")
        assert code == 0 and "\x1b" not in out + err
        assert not any(line.startswith("fake.py") for line in (out + err).splitlines())
        assert "x\\x1b[31m.py\\nfake.py" in out + err


def test_the_estimate_table_and_the_stderr_summary_escape_the_model_id(tmp_path, capsys):
    d = tmp_path / f"model{SPOOF}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_CFG))
    code, out, err = run(capsys, "estimate", "--model", str(d))
    assert code == 0, err
    _clean(out.replace("\n", ""))  # rich wraps the long title
    (tmp_path / "train.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", str(d)))
    code, out, err = run(capsys, "check", str(tmp_path / "train.py"), "--output-format", "full", "--exit-zero")
    assert code == 0
    _clean(out)  # the estimate table under the findings names the model
    assert "\x1b" not in err


@needs_git
def test_diff_output_escapes_paths_and_values(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _safe_git(repo, "init", "-q", "-b", "main")
    name = "t\x1b[2J.py"
    (repo / name).write_text(SCRIPT)
    _safe_git(repo, "add", ".")
    _safe_git(repo, "commit", "-qm", "base")
    (repo / name).write_text(SCRIPT.replace('"Qwen/Qwen2.5-0.5B"', repr("Qwen/Qwen2.5-0.5B\x1b]0;T\x07")))
    monkeypatch.chdir(repo)
    for fmt in ("concise", "markdown", "github"):
        code, out, err = run(capsys, "diff", "HEAD", "--format", fmt)
        assert code == 0, err
        assert "\x1b" not in out + err and "t\\x1b[2J.py" in out, (fmt, out)


# ---- %memcheck keeps the user's state, also when interrupted --------------------------------------

def _tiny_model():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in LLAMA_CFG.items() if k != "model_type"},
                                         tie_word_embeddings=False))
    ids = torch.randint(0, 1000, (1, 8))
    model(input_ids=ids, labels=ids).loss.backward()  # gradients the user has not stepped yet
    return model


def _grads(model):
    return [(p, p.grad, p.grad.clone()) for p in model.parameters() if p.grad is not None]


def _same_grads(saved) -> bool:
    return all(p.grad is g and bool((g == copy).all()) for p, g, copy in saved)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, lambda: RuntimeError("DefaultCPUAllocator: can't allocate")])
def test_a_snapshot_interrupted_midway_loses_no_gradient(monkeypatch, failure):
    from memlint.notebook import confirm

    model = _tiny_model()
    saved = _grads(model)
    n_params = sum(1 for p in model.parameters() if p.requires_grad)
    real, calls = confirm._to_host, []

    def flaky(t):
        calls.append(1)
        if len(calls) == n_params + 3:  # the data is copied, the third gradient is on its way
            raise failure()
        return real(t)

    monkeypatch.setattr(confirm, "_to_host", flaky)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):
        confirm.StateSnapshot(model)
    assert len(calls) == n_params + 3 and saved and _same_grads(saved)


def test_a_restore_interrupted_midway_still_puts_everything_back(monkeypatch):
    torch = pytest.importorskip("torch")
    from memlint.notebook import confirm

    model = _tiny_model()
    model.eval()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    snap = confirm.StateSnapshot(model)
    assert all(p.grad is None for p in model.parameters())  # moved off for the step
    model.train()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    real, calls = confirm._to_device, []

    def flaky(saved, device):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(saved, device)

    monkeypatch.setattr(confirm, "_to_device", flaky)
    with pytest.raises(KeyboardInterrupt):  # the interrupt still reaches the user, after the restore
        snap.restore()
    assert not model.training
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) and torch.equal(p.grad, grads[n]), n


def test_an_interrupted_step_restores_the_model_and_reraises():
    torch = pytest.importorskip("torch")
    from memlint.notebook import confirm, live

    model = _tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    saved = {n: p.grad.clone() for n, p in model.named_parameters()}

    from memlint.measure import measure

    ran: list[str] = []

    def interrupted(setup, device, steps, model=None):
        ran.append(device)
        if device == "trace":  # the host check's fake-tensor trace of the step (a meta copy) runs first
            return measure(setup, device=device, steps=steps, model=model)
        with torch.no_grad():
            next(model.parameters()).mul_(0)
        raise KeyboardInterrupt

    lp = live.from_model(model, batch=1, seq=8)
    with pytest.raises(KeyboardInterrupt):
        confirm.confirm(lp, device="cpu", measure_fn=interrupted)
    assert ran == ["trace", "cpu"]  # the interrupt came from the step on the user's own model
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) and torch.equal(p.grad, saved[n]), n


def test_a_cpu_step_too_big_for_ram_is_the_does_not_fit_answer():
    torch = pytest.importorskip("torch")
    from memlint.notebook import confirm, live

    model = _tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    class Loss:
        def backward(self):
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)")

    from memlint.measure import measure

    def too_big(setup, device, steps, model=None):
        if device == "trace":  # the host check's fake-tensor trace of the step (no memory) runs first
            return measure(setup, device=device, steps=steps, model=model)
        loss = Loss()
        loss.backward()  # the phase is read off this line

    c = confirm.confirm(live.from_model(model, batch=1, seq=8), device="cpu", measure_fn=too_big)
    assert c.measurement is None
    assert c.oom.startswith("does not fit in host memory: the CPU step ran out of memory in the backward phase")
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())

    def a_bug(setup, device, steps, model=None):
        if device == "trace":
            return measure(setup, device=device, steps=steps, model=model)
        raise RuntimeError("shape mismatch")  # not an allocation failure: still an error

    with pytest.raises(RuntimeError, match="shape mismatch"):
        confirm.confirm(live.from_model(model, batch=1, seq=8), device="cpu", measure_fn=a_bug)


@pytest.fixture
def shell():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "memlint")
    return ip


@pytest.mark.parametrize("line, message", [
    ("model --seq 8 --batch 0", "--batch must be at least 1"),
    ("model --seq 0", "--seq must be at least 1"),
    ("model.model --seq 8", "LlamaModel has no language-model head"),
    ("model --seq 8 --gpu nan", "a size is a number of GiB"),
])
def test_memcheck_refuses_what_it_cannot_answer(shell, line, message):
    from IPython.core.error import UsageError

    shell.user_ns["model"] = _tiny_model()
    with pytest.raises(UsageError, match=message):
        shell.run_line_magic("memcheck", line + " --no-confirm -q")


def test_the_first_memcheck_leaves_pythons_random_state_alone(tmp_path):
    pytest.importorskip("IPython")
    pytest.importorskip("transformers")
    control = subprocess.run([sys.executable, "-c", "import random; random.seed(7); s = random.getstate(); "
                              "import rich.style; print(random.getstate() == s)"], capture_output=True, text=True)
    assert control.stdout.strip() == "False"  # rich's import draws from `random`: the check below can fail
    code = f"""
import random, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {str(ROOT / 'src')!r})
from transformers import LlamaConfig, LlamaForCausalLM
from IPython.core.interactiveshell import InteractiveShell
model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=1000))
ip = InteractiveShell.instance()
ip.user_ns["model"] = model
random.seed(7)
state = random.getstate()
assert "rich.style" not in sys.modules
ip.run_line_magic("load_ext", "memlint")
loaded = random.getstate() == state
ip.run_line_magic("memcheck", "model --seq 8 --no-confirm")
print(loaded, random.getstate() == state, "rich.style" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "True True True", proc.stdout


def test_memcheck_text_and_html_escape_what_the_files_say(shell, tmp_path):
    (tmp_path / "train.py").write_text(SPOOF_SCRIPT)
    r = shell.run_line_magic("memcheck", f"{tmp_path / 'train.py'} -q")
    text, page = repr(r), r._repr_html_()
    _clean(text.replace("\n", "").replace(" ", ""))
    assert "\x1b" not in page and "\\x1b]0;TITLE\\x07" in page


# ---- issue #29: no read outside the checked root, no write outside it, nothing runs, budgets everywhere ----

SECRET = "sk-LEAKED-0123456789"
_HEAD = ("import os, json, yaml\nimport hydra\nfrom omegaconf import OmegaConf\nfrom peft import LoraConfig\n"
         "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n")
_TAIL = ('tok(batch, max_length=512, padding="max_length")\n'
         'args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, bf16=True)\n'
         'Trainer(model=model, args=args).train()\n')
# Each script reaches the same secret outside the checkout by another road (issue #29's list).
LEAK_ROUTES = {
    "yaml_open.py": 'm = yaml.safe_load(open("../outside/token.yaml"))\nmodel = AutoModelForCausalLM.from_pretrained(m)\n',
    "json_home.py": 'm = json.load(open(os.path.expanduser("~/.cache/tok.json")))["model"]\n'
                    'model = AutoModelForCausalLM.from_pretrained(m)\n',
    "exec_file.py": 'exec(open("../outside/cfg.py").read())\nmodel = AutoModelForCausalLM.from_pretrained(MODEL)\n',
    "omegaconf.py": 'cfg = OmegaConf.load("../outside/cfg.yaml")\nmodel = AutoModelForCausalLM.from_pretrained(cfg.model)\n',
    "lora_dir.py": 'model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")\n'
                   'lc = LoraConfig.from_pretrained("../outside/adapter")\n',
    "home_model.py": 'model = AutoModelForCausalLM.from_pretrained("~/model")\n',
    "hydra_path.py": '@hydra.main(config_path="../outside/conf", config_name="cfg")\ndef main(cfg):\n'
                     '    model = AutoModelForCausalLM.from_pretrained(cfg.model)\n'
                     '    tok(batch, max_length=512, padding="max_length")\n'
                     '    Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()\n',
    "hydra_defaults.py": '@hydra.main(config_path="conf", config_name="cfg")\ndef main(cfg):\n'
                         '    model = AutoModelForCausalLM.from_pretrained(cfg.x.model)\n'
                         '    tok(batch, max_length=512, padding="max_length")\n'
                         '    Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()\n',
}


def _leaky_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout (a repository: its `.git`) whose scripts name a secret kept outside it, and that outside folder
    (the home folder of the run is in it too)."""
    outside, repo = tmp_path / "outside", tmp_path / "repo"
    home = outside / "home"
    for d in (outside / "conf", outside / "adapter", home / ".cache", home / "model", repo / ".git", repo / "conf"):
        d.mkdir(parents=True)
    (outside / "token.yaml").write_text(SECRET + "\n")
    (home / ".cache" / "tok.json").write_text(json.dumps({"model": SECRET}))
    (outside / "cfg.py").write_text(f"MODEL = {SECRET!r}\n")
    (outside / "cfg.yaml").write_text(f"model: {SECRET}\n")
    (outside / "conf" / "cfg.yaml").write_text(f"model: {SECRET}\n")
    (outside / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": 8, "target_modules": [SECRET]}))
    (home / "model" / "config.json").write_text(json.dumps({"model_type": SECRET, "hidden_size": 64}))
    (outside / "train.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", SECRET))
    (repo / "conf" / "cfg.yaml").write_text("defaults:\n  - /../../outside/conf@x: cfg\n  - _self_\n")
    (repo / "run.sh").write_text("#!/bin/sh\npython ../outside/train.py --lr 1e-4\n")
    for name, body in LEAK_ROUTES.items():
        (repo / name).write_text(_HEAD + body + ("" if "hydra" in name else _TAIL))
    return repo, outside


def _locations(doc) -> list[str]:
    """Every file a JSON or SARIF report locates something in."""
    found: list[str] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("filename", "uri", "path") and isinstance(v, str):
                found.append(v)
            found += _locations(v)
    elif isinstance(doc, list):
        for v in doc:
            found += _locations(v)
    return found


def test_no_file_outside_the_checked_root_is_read_or_reported(tmp_path, capsys, monkeypatch):
    repo, outside = _leaky_checkout(tmp_path)
    monkeypatch.setenv("HOME", str(outside / "home"))
    monkeypatch.chdir(repo)
    for fmt in ("concise", "full", "json", "sarif", "github"):
        code, out, err = run(capsys, "check", ".", "--no-cache", "--exit-zero", "--output-format", fmt)
        assert code == 0 and "Traceback" not in err, err
        assert SECRET not in out + err, fmt
        if fmt in ("json", "sarif"):
            assert not [p for p in _locations(json.loads(out)) if "outside" in p], fmt  # nothing located outside
    for name, shown in (("yaml_open.py", "../outside/token.yaml"), ("exec_file.py", "../outside/cfg.py"),
                        ("omegaconf.py", "../outside/cfg.yaml"), ("lora_dir.py", "../outside/adapter/adapter_config.json")):
        code, out, err = run(capsys, "check", name, "--no-cache", "--exit-zero")  # said on the script itself
        assert f"{name}:1:1: MEM001 note: {shown} not read: outside the checked root" in out, out
    for script in LEAK_ROUTES:
        code, out, err = run(capsys, "plan", script, "--format", "json")
        assert SECRET not in out + err, script
    # the user opts in: then it is read (as the value a loader parsed from it)
    code, out, err = run(capsys, "check", "yaml_open.py", "--no-cache", "--exit-zero", "--read-outside", str(outside))
    assert SECRET in out and "not read" not in out


def test_no_file_outside_the_checked_root_is_even_opened(tmp_path):
    """The same roads, watched by an audit hook in a fresh interpreter: no open(), listdir or scandir of anything
    outside the checkout (the secret's folder), whatever the command."""
    repo, outside = _leaky_checkout(tmp_path)
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / 'src')!r})
seen = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and {str(outside)!r} in str(args[0]):
        seen.append((event, str(args[0])))
sys.addaudithook(hook)
from memlint.cli import main
rc = [main(a) for a in (["check", ".", "--no-cache", "--exit-zero", "-q", "--output-format", "json"],
                        ["plan", *{sorted(LEAK_ROUTES)!r}, "--format", "json"])]
print(rc, seen)
"""
    env = dict(os.environ, HOME=str(outside / "home"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, env=env, timeout=600)
    assert proc.stdout.strip().splitlines()[-1] == "[0, 0] []", proc.stdout[-1500:] + proc.stderr[-1500:]


def test_the_cache_never_writes_through_a_link(tmp_path, capsys, monkeypatch):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(repo)
    cache = repo / ".memlint_cache"
    layouts = {
        "tag-link": lambda: (cache.mkdir(), (cache / "CACHEDIR.TAG").symlink_to(victim / "tag")),
        "dangling-gitignore": lambda: (cache.mkdir(), (cache / ".gitignore").symlink_to(victim / "gi")),
        "linked-v3": lambda: (cache.mkdir(), (cache / "v3").symlink_to(victim)),
        "linked-root": lambda: cache.symlink_to(victim),
        "shipped-with-a-tag": lambda: (cache.mkdir(), (cache / "CACHEDIR.TAG").write_text(
            "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by memlint.\n")),
    }
    for name, make in layouts.items():
        make()
        code, out, err = run(capsys, "check", "train.py", "--exit-zero")
        assert code == 0 and "train.py" in out, (name, err)  # the report is kept: the run goes on uncached
        assert "memlint: not using the cache" in err and err.count("not using the cache") == 1, (name, err)
        assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"], name  # nothing written through a link
        assert (victim / "keep.txt").read_text() == "precious"
        (cache.unlink() if cache.is_symlink() else shutil.rmtree(cache))
    # a cache memlint makes itself is used, warm, and its own tag records the directory it made
    run(capsys, "check", "train.py", "--exit-zero")
    assert "memlint cache" in (cache / "CACHEDIR.TAG").read_text()
    code, out, err = run(capsys, "check", "train.py", "--exit-zero")
    assert "not using the cache" not in err


@needs_git
def test_memlint_diff_runs_no_filter_of_a_submodule(tmp_path, capsys, monkeypatch):
    sub, top = tmp_path / "sub", tmp_path / "top"
    sub.mkdir()
    _safe_git(sub, "init", "-q", "-b", "main")
    (sub / "train.py").write_text(SCRIPT)
    _safe_git(sub, "add", ".")
    _safe_git(sub, "commit", "-qm", "sub")
    top.mkdir()
    _safe_git(top, "init", "-q", "-b", "main")
    (top / "train.py").write_text(SCRIPT)
    _safe_git(top, "add", ".")
    _safe_git(top, "commit", "-qm", "top")
    _safe_git(top, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(sub), "sub")
    _safe_git(top, "commit", "-qm", "with a submodule")
    pwned = tmp_path / "PWNED"
    subprocess.run(["git", "config", "filter.evil.clean", f"touch {pwned}; cat"], cwd=top / "sub", check=True)
    (top / "sub" / ".gitattributes").write_text("*.py filter=evil\n")
    (top / "train.py").write_text(SCRIPT.replace("per_device_train_batch_size=2", "per_device_train_batch_size=4"))

    def touch_submodule_file() -> None:  # same content, new mtime: git re-hashes it through the clean filter
        st = (top / "sub" / "train.py").stat()
        os.utime(top / "sub" / "train.py", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))

    touch_submodule_file()
    subprocess.run(["git", "-c", "core.fsmonitor=false", "status"], cwd=top, capture_output=True)
    assert pwned.exists()  # the attack is live: plain git status runs the submodule's filter
    pwned.unlink()
    touch_submodule_file()
    monkeypatch.chdir(top)
    code, out, err = run(capsys, "diff", "HEAD")
    assert code == 0 and "train.py" in out + err, err
    assert not pwned.exists()


def test_python_m_memlint_imports_nothing_from_the_working_directory(tmp_path):
    pwned = tmp_path / "PWNED"
    for mod in ("tomllib", "json", "argparse", "re", "dataclasses"):
        (tmp_path / f"{mod}.py").write_text(f"open({str(pwned)!r} + '-{mod}', 'w').write('ran')\nraise SystemExit(7)\n")
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\ngpu = "RTX4090"\n')
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-m", "memlint", "check", ".", "--no-cache"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1) and "train.py" in proc.stdout, proc.stderr[-1000:]
    assert not list(tmp_path.glob("PWNED*"))


# the modules runpy itself imports before `python -m memlint` reaches memlint's package (its guard cannot run
# earlier): the `memlint` command and `python -P -m memlint` never put the working directory on sys.path at all
_RUNPY_IMPORTS = ("types", "functools", "collections", "contextlib", "importlib", "warnings", "operator", "keyword",
                  "reprlib")


@pytest.mark.parametrize("form", ["command", "safe-path"])
def test_the_memlint_command_and_python_P_import_nothing_from_the_working_directory(tmp_path, form):
    work = tmp_path / "checkout"
    work.mkdir()
    pwned = tmp_path / "PWNED"
    for mod in (*_RUNPY_IMPORTS, "tomllib", "json"):
        (work / f"{mod}.py").write_text(f"open({str(pwned)!r} + '-{mod}', 'w').write('ran')\nraise SystemExit(7)\n")
    (work / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    if form == "command":  # what pip's console script does: its own folder first on sys.path, never the cwd
        entry = tmp_path / "bin" / "memlint"
        entry.parent.mkdir()
        entry.write_text("import sys\nfrom memlint.cli import main\nsys.exit(main())\n")
        argv = [sys.executable, str(entry)]
    else:
        if sys.version_info < (3, 11):
            pytest.skip("python -P is 3.11+")
        argv = [sys.executable, "-P", "-m", "memlint"]
    proc = subprocess.run([*argv, "check", ".", "--no-cache", "--gpu", "RTX4090"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1) and "train.py" in proc.stdout, proc.stderr[-1000:]
    assert not list(tmp_path.glob("PWNED*"))


# ---- issue #29: every reader has a size, depth and time budget --------------------------------------------

def _timed(capsys, *argv: str) -> tuple[int, str, str, float]:
    import time

    t = time.perf_counter()
    code, out, err = run(capsys, *argv)
    return code, out, err, time.perf_counter() - t


@pytest.mark.parametrize("name, text, needle", [
    ("doubling.sh", "X=ab\n" + "X=$X$X\n" * 40 + "python train.py --name $X\n", "expands past 100,000 characters"),
    ("Makefile", "X=ab\n" + "X=$(X)$(X)\n" * 40 + "train:\n\tpython train.py --name $(X)\n",
     "expands past 100,000 characters"),
    ("nested.sh", "python train.py --name " + "${A:-" * 1200 + "x" + "}" * 1200 + "\n", "nested more than 32 deep"),
    ("unclosed.sh", "python train.py --name " + "${A:-" * 8000 + "\n", None),
    ("unclosed-subst.sh", "python train.py --name " + "${A//x/" * 8000 + "$((" * 8000 + "\n", None),
], ids=["doubling", "makefile-doubling", "nested-defaults", "unclosed-defaults", "unclosed-substitutions"])
def test_shell_expansion_has_a_budget(tmp_path, capsys, monkeypatch, name, text, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "other.py").write_text(SCRIPT.replace("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B"))
    (tmp_path / name).write_text(text)
    code, out, err, took = _timed(capsys, "check", ".", "--no-cache", "--exit-zero")
    assert code == 0 and "Traceback" not in err and "internal error" not in out + err, err
    assert took < 20, took  # was a MemoryError, a RecursionError, or 45 s
    assert "other.py" in out and "train.py" in out  # the other files' reports are kept
    if needle is not None:
        assert f"{name}:1:1: MEM001 note: not read: " in out and needle in out, out


def test_a_launcher_naming_a_big_script_twenty_times_parses_it_once(tmp_path, capsys, monkeypatch):
    libcst = pytest.importorskip("libcst")

    monkeypatch.chdir(tmp_path)
    body = SCRIPT + "# @hydra_runner is named here\n" + "x = 1\n" * 30_000  # 200 kB: within the script budget
    (tmp_path / "big.py").write_text(body)
    (tmp_path / "huge.py").write_text(SCRIPT + "# @hydra_runner\n" + "x = 1\n" * 330_000)  # 2 MB: never parsed
    (tmp_path / "run.sh").write_text("".join(f"python big.py --seed {i}\npython huge.py --seed {i}\n" for i in range(20)))
    parsed: list[int] = []
    real_parse = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda src, *a, **k: parsed.append(len(src)) or real_parse(src, *a, **k))
    code, out, err, took = _timed(capsys, "check", "run.sh", "--no-cache", "--exit-zero")
    assert code == 0 and "Traceback" not in err, err
    assert sum(1 for n in parsed if n > 150_000) <= 1, parsed  # big.py once (it was once per line); huge.py never
    assert took < 30, took  # 63 s and 465 MB before: huge.py's 330,000 lines were transformed once per line
    assert "huge.py:1:1: MEM001 note: not analysed: 330,007 lines" in out


def test_hydra_does_not_copy_an_option_per_mention(tmp_path, capsys, monkeypatch):
    pytest.importorskip("yaml")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf" / "big").mkdir(parents=True)
    (tmp_path / "conf" / "big" / "opt.yaml").write_text("".join(f"k{i}: {i}\n" for i in range(20_000)))
    mentions = "".join(f"  - big@m{i}: opt\n" for i in range(500))
    (tmp_path / "conf" / "cfg.yaml").write_text("defaults:\n" + mentions + "  - _self_\nmodel: Qwen/Qwen2.5-0.5B\n")
    (tmp_path / "train.py").write_text(
        "import hydra\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        '@hydra.main(config_path="conf", config_name="cfg")\ndef main(cfg):\n'
        "    model = AutoModelForCausalLM.from_pretrained(cfg.model)\n"
        '    Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=2)).train()\n')
    code, out, err, took = _timed(capsys, "plan", "train.py", "--format", "json")
    assert code == 0, err
    assert took < 60, took  # 47 s and 2.1 GB before
    assert json.loads(out)["plan"]["model_id"]["value"] == "Qwen/Qwen2.5-0.5B"  # what was composed still counts
    from memlint.extract import extract_file

    assert any("over memlint's budget" in n for n in extract_file("train.py").notes)


@pytest.mark.parametrize("line", [
    "trl==1" + " " * 1500 + "x",
    "trl" + "==1 ," * 350 + "!",
    "peft>=0.1" + ",<9" * 400 + " ; " + "(" * 300,
    "transformers[" + "a," * 700 + "]==4.46",
], ids=["spaces", "clauses", "markers", "extras"])
def test_a_requirement_line_is_read_in_linear_time(tmp_path, line):
    import time

    from memlint.library.pins import checkout_pins

    (tmp_path / "requirements.txt").write_text("torch==2.3.0\n" + line + "\n")
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["' + line.replace('"', "") + '"]\n'
                                             "[tool.poetry.dependencies]\ntrl = {" + "x " * 900 + "\n"
                                             'peft = "' + "=1 ," * 400 + '"\n')
    (tmp_path / "train.py").write_text("")
    t = time.perf_counter()
    pins = checkout_pins(tmp_path / "train.py")
    assert time.perf_counter() - t < 2  # 34 s before, for one 1.5 kB line
    assert {p.package for p in pins} >= {"torch"}


def test_versions_are_read_as_pep_440_reads_them():
    from memlint.library.pins import representative
    from memlint.library.versions import in_range

    assert in_range("2.13.0+cpu", "==2.13.0") and in_range("2.13.0+cu121", ">=2.13,<2.14")
    assert in_range("4.54.0rc1", ">=4.54") and in_range("4.54.0.dev0", ">=4.54")  # a pre-release of 4.54 reads as 4.54
    assert not in_range("4.53.9", ">=4.54") and in_range("0.13.2", "~=0.13.0") and not in_range("0.14.0", "~=0.13.0")
    assert representative("peft", "~=0.13.0") == "0.13.0" and representative("torch", "==2.3.0+cpu") == "2.3.0+cpu"
    assert representative("transformers", "==4.46.*") == "4.46" and representative("trl", ">=0.12") is None


def test_a_gitignore_pattern_that_would_backtrack_is_matched_in_linear_time(tmp_path):
    import time

    from memlint.files import walk

    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("a*" * 40 + "b\n" + "*a*a*a*a*a*a*a*a*a*a*a*a*a*c/\n")
    names = ["a" * 40 + ".py", "a" * 200 + ".py", "a" * 39 + "b", "train.py"]
    for n in names:
        (tmp_path / n).write_text("x")
    (tmp_path / ("a" * 60)).mkdir()
    t = time.perf_counter()
    found = {p.name for p in walk(tmp_path)}
    assert time.perf_counter() - t < 2  # past 60 s before
    assert found == {"a" * 40 + ".py", "a" * 200 + ".py", "train.py"}


def test_a_notebook_nested_700_deep_is_answered_and_the_others_are_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    meta: dict = {}
    cur = meta
    for _ in range(700):
        cur["x"] = {}
        cur = cur["x"]
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": SCRIPT}
    (tmp_path / "deep.ipynb").write_text(json.dumps({"cells": [cell, {"cell_type": "code", "source": "!python t.py"}],
                                                     "metadata": meta, "nbformat": 4}))
    (tmp_path / "deeper.ipynb").write_text('{"cells": [], "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "t.py").write_text(SCRIPT)
    for fmt in ("concise", "github", "sarif"):
        code, out, err = run(capsys, "check", ".", "--no-cache", "--exit-zero", "--output-format", fmt)
        assert code == 0 and "internal error" not in out + err and "Traceback" not in err, err
        assert "deep.ipynb" in out and "t.py" in out


# ---- issue #29: interrupted runs leave nothing behind --------------------------------------------------------

_SLOW_RUN = """
import sys, time
sys.path.insert(0, {src!r})
import memlint.check as c
real = c.read_target
def slow(target):
    if target.path.name.startswith("slow"):
        time.sleep(600)
    return real(target)
c.read_target = slow
from memlint.cli import main
sys.exit(main(["check", "-j", "2", ".", "--exit-zero"]))
"""


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_workers_exit_with_their_parent_and_finished_results_stay_cached(tmp_path, how):
    import signal
    import time

    (tmp_path / "fast.py").write_text(SCRIPT)
    (tmp_path / "slow1.py").write_text(SCRIPT)
    (tmp_path / "slow2.py").write_text(SCRIPT)
    # the run as a terminal starts it: SIGINT at its default (a test suite run in the background of a non-interactive
    # shell inherits SIGINT ignored, and Python then keeps ignoring it, so no Ctrl-C would reach the run at all)
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_RUN.format(src=str(ROOT / "src"))], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        entries: list[Path] = []
        for _ in range(600):  # the fast file finished and was cached while the slow ones run
            time.sleep(0.1)
            entries = list((tmp_path / ".memlint_cache").glob("v*/*/*.json"))
            if entries and len(_children(proc.pid)) >= 2:
                break
        workers = _children(proc.pid)
        assert entries and workers, proc.stderr.read().decode()[-2000:] if proc.poll() is not None else "no workers"
        proc.send_signal(getattr(signal, how))
        deadline = time.time() + 15
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], f"workers left running after {how}"
        proc.wait(timeout=30)
        if how != "SIGKILL":
            assert proc.returncode == {"SIGTERM": 143, "SIGINT": 130}[how], proc.stderr.read().decode()[-1000:]
        assert list((tmp_path / ".memlint_cache").glob("v*/*/*.json"))  # the finished result is still cached
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for w in _children(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(w, 9)


# ---- issue #29: blocking reads go through the guarded reader --------------------------------------------------

def test_pin_files_and_cache_sources_never_block(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "requirements.txt").write_text("-r /dev/stdin\n--requirement=/dev/stdin\ntrl==0.12.1\n")
    os.mkfifo(tmp_path / "requirements-dev.txt")
    os.mkfifo(tmp_path / "pyproject.toml")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "train.py").write_text(SCRIPT)
    os.mkfifo(sub / "requirements.txt")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    argv = [sys.executable, "-m", "memlint", "check", ".", "--exit-zero"]
    for _ in range(2):  # cold, then warm from the cache
        proc = subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.PIPE, capture_output=True, text=True,
                              timeout=120)  # stdin is a pipe held open: `-r /dev/stdin` would wait on it forever
        assert proc.returncode == 0 and "train.py" in proc.stdout, proc.stderr[-1500:]
    # a cache entry whose sources name a FIFO: read without blocking, and a miss
    entries = list((tmp_path / ".memlint_cache").glob("v*/*/*.json"))
    assert entries
    os.mkfifo(tmp_path / "fifo")
    for e in entries:
        doc = json.loads(e.read_text())
        doc["sources"][str(tmp_path / "fifo")] = "0" * 128
        e.write_text(json.dumps(doc))
    proc = subprocess.run(argv, cwd=tmp_path, env=env, stdin=subprocess.PIPE, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "train.py" in proc.stdout, proc.stderr[-1500:]


# ---- issue #29: wrong or broken results -------------------------------------------------------------------------

def test_a_file_looked_for_and_missing_or_refused_is_part_of_the_cache_key(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT.replace("bf16=True", 'bf16=True, deepspeed="ds.json"'))
    argv = ("check", "train.py", "--gpu", "RTX4090", "--gpus", "8", "--exit-zero", "--output-format", "json")
    missing = run(capsys, *argv)[1]
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    appeared = run(capsys, *argv)[1]
    assert appeared == run(capsys, *argv, "--no-cache")[1] and appeared != missing
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nmax-file-size = "4KB"\n')
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "pad": "x" * 5000}))
    refused = run(capsys, *argv)[1]
    assert "not read" in refused
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))  # it shrinks under the limit
    shrunk = run(capsys, *argv)[1]
    assert shrunk == run(capsys, *argv, "--no-cache")[1] and "not read" not in shrunk


@pytest.mark.parametrize("entry", ["{}", "[]", "null", '{"sources": {}}', '{"sources": [], "result": 1}',
                                   '{"sources": {}, "result": {"path": 1}}', '{"sources": {}, "result": {}}',
                                   '{"sources": {}, "result": {"findings": [{"code": "MEM1"}]}', '{"sour'])
def test_a_malformed_cache_entry_is_a_miss(tmp_path, capsys, monkeypatch, entry):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    cold = run(capsys, "check", "train.py", "--exit-zero")
    for e in (tmp_path / ".memlint_cache").glob("v*/*/*.json"):
        e.write_text(entry)
    code, out, err = run(capsys, "check", "train.py", "--exit-zero")
    assert (code, out) == cold[:2] and "internal error" not in err, err


@pytest.mark.parametrize("where", ["flag", "pyproject", "axolotl", "deepspeed", "launcher", "accelerate",
                                   "torchtitan", "interpolation", "columns"])
def test_unicode_digits_never_reach_int(tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    files = {
        "pyproject": ("pyproject.toml", '[tool.memlint]\nassume = { max_length = "²" }\n'),
        "axolotl": ("axo.yaml", 'base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nmicro_batch_size: "²"\n'
                                'sequence_len: "³"\ngradient_accumulation_steps: "²"\n'),
        "deepspeed": ("ds.json", json.dumps({"zero_optimization": {"stage": "²"}, "train_micro_batch_size_per_gpu": "²"})),
        "launcher": ("run.sh", "torchrun --nproc_per_node ² --nnodes ³ train.py\n"),
        "accelerate": ("run.sh", "accelerate launch --num_processes ² --gradient_accumulation_steps ² train.py\n"),
        "torchtitan": ("titan.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 2\n'
                                     'seq_len = 2048\n[activation_checkpoint]\nmode = "selective"\n'
                                     'selective_ac_option = "²"\n'),
        "interpolation": ("cfg.yaml", 'base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlist: [1, 2]\n'
                                      'micro_batch_size: ${list.²}\nsequence_len: 512\n'),
    }
    if where in files:
        name, text = files[where]
        (tmp_path / name).write_text(text)
    if where == "columns":
        monkeypatch.setenv("COLUMNS", "²")
    argv = ["check", ".", "--no-cache", "--output-format", "full"] + (["--assume", "max_length=²"] if where == "flag" else [])
    code, out, err = run(capsys, *argv)
    assert "internal error" not in out + err and "Traceback" not in err, out + err
    if where in ("flag", "pyproject"):  # a setting that is no count: one line, exit 2
        _one_line_error(code, err)
        assert "²" in err
    else:
        assert code in (0, 1) and "train.py" in out, err


def test_memlint_clean_escapes_names_and_removes_only_memlint_caches(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil\x1b]0;TITLE\x07\x1b[2J"
    evil.mkdir()
    (evil / "train.py").write_text(SCRIPT)
    run(capsys, "check", str(evil / "train.py"), "--cache-dir", str(evil / ".memlint_cache"))
    assert (evil / ".memlint_cache" / "CACHEDIR.TAG").is_file()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".memlint_cache").symlink_to(victim)  # a link named like a cache: never followed
    (tmp_path / "shipped" / ".memlint_cache").mkdir(parents=True)  # a folder named like one, not memlint's
    (tmp_path / "shipped" / ".memlint_cache" / "data.txt").write_text("keep")
    code, out, err = run(capsys, "clean")
    assert code == 0 and "\x1b" not in err and "\x07" not in err and "\\x1b" in err, err
    assert not (evil / ".memlint_cache").exists()
    assert (victim / "keep.txt").read_text() == "precious" and (tmp_path / "shipped" / ".memlint_cache" / "data.txt").exists()
    assert err.count("not removing") == 2
    code, _, err = run(capsys, "clean", "--cache-dir", str(victim))
    _one_line_error(code, err)
    assert "not a memlint cache" in err and (victim / "keep.txt").exists()


def test_a_settings_file_above_the_repository_top_is_not_read(tmp_path, capsys, monkeypatch):
    shared = tmp_path / "shared-tmp"  # a shared /tmp: anyone can write a settings file there
    repo = shared / "checkout"
    (repo / ".git").mkdir(parents=True)
    (repo / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(repo)
    loud = run(capsys, "check", "train.py", "--no-cache")
    assert "MEM" in loud[1]
    for name in (".memlint.toml", "memlint.toml"):
        (shared / name).write_text('ignore = ["ALL"]\n')
        assert run(capsys, "check", "train.py", "--no-cache")[1] == loud[1], name
        (shared / name).unlink()
    (shared / "pyproject.toml").write_text('[tool.memlint]\nignore = ["ALL"]\n')
    assert run(capsys, "check", "train.py", "--no-cache")[1] == loud[1]
    (repo / "pyproject.toml").write_text('[tool.memlint]\nignore = ["ALL"]\n')  # the repository's own: read
    assert "MEM" not in run(capsys, "check", "train.py", "--no-cache")[1]


def test_an_archive_without_git_is_checked_from_its_marked_top_and_no_higher(tmp_path, monkeypatch):
    """A checkout without .git (a release archive) is one project from the folder holding its README/LICENSE/
    pyproject: a command run in a subfolder reads the repository's ../ds config; a folder above with no marker, or
    one past MARKER_LEVELS, is never part of it."""
    from memlint import files

    top = tmp_path / "outer" / "repo"
    (top / "sub" / "deep").mkdir(parents=True)
    (top / "README.md").write_text("# repo\n")
    monkeypatch.chdir(top / "sub")
    assert files.checkout_root(top / "sub" / "deep") == str(top.resolve())
    (tmp_path / "outer" / "LICENSE").write_text("x")  # a marker above the top is a bigger project: it wins
    assert files.checkout_root(top / "sub" / "deep") == str((tmp_path / "outer").resolve())
    bare = tmp_path / "bare" / "a"
    bare.mkdir(parents=True)
    monkeypatch.chdir(bare)
    assert files.checkout_root(bare) == str(bare.resolve())  # no marker anywhere: the working directory alone
