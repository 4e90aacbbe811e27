"""memlint lints untrusted code in CI and pre-commit: nothing in a checkout under review runs,
nothing small explodes, no input gives a traceback, nothing in the output is spoofed.

Each test here is one of issue #17's attacks (docs/security.md names them). A test that
shows an attack is harmless first shows the attack is live (plain git runs the command).
"""

from __future__ import annotations

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
    assert f"{fifo}:1:1: MEM001 not read: a FIFO, not a regular file" in out
    assert "/dev/zero:1:1: MEM001 not read: a character device" in out
    assert str(tmp_path / "ok.py") in out + err  # the others are still checked
    code, _, err = run(capsys, "plan", str(fifo))
    assert code == 2 and err.count("\n") == 1 and "a FIFO" in err
