"""The pre-commit hook: its manifest, its entry point, a torch-free environment, and a real
`pre-commit try-repo` run on a sample project (when pre-commit is installed)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from memlint.rules.samples import script

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "trl", "IPython")
# The keys a hook may set in pre-commit's manifest schema.
HOOK_FIELDS = {"id", "name", "entry", "language", "description", "types_or", "require_serial",
               "minimum_pre_commit_version", "files", "exclude", "types", "exclude_types", "args",
               "pass_filenames", "always_run", "stages", "verbose", "additional_dependencies",
               "language_version", "log_file", "fail_fast"}


def _manifest() -> list[dict]:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_manifest_declares_one_memlint_hook_for_python_and_jupyter_with_force_exclude():
    hooks = _manifest()
    assert [h["id"] for h in hooks] == ["memlint"]
    hook = hooks[0]
    assert set(hook) <= HOOK_FIELDS
    assert hook["name"] == "memlint"
    # pre-commit names the files: --force-exclude keeps [tool.memlint] exclude in force
    assert hook["entry"] == "memlint check --force-exclude"
    assert hook["language"] == "python"
    assert hook["types_or"] == ["python", "jupyter"]  # configs are opt-in (types_or in the user's config)
    assert hook["require_serial"] is False


def test_hook_entry_is_a_console_script_of_the_package():
    entry = _manifest()[0]["entry"].split()[0]
    scripts = _pyproject()["project"]["scripts"]
    assert entry in scripts
    module, func = scripts[entry].split(":")
    assert module == "memlint.cli" and func == "main"
    assert callable(getattr(importlib.import_module(module), func))


def test_hook_environment_installs_without_torch():
    # pre-commit installs the package with its base dependencies only
    deps = _pyproject()["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps}
    assert not names & {h.lower() for h in HEAVY}, names


_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {heavy!r}:
            raise ImportError('the hook environment has no ' + name)
sys.meta_path.insert(0, Block())
from memlint.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _has_check_command() -> bool:
    r = subprocess.run([sys.executable, "-m", "memlint", "check", "--help"], capture_output=True, text=True)
    return r.returncode == 0


needs_check = pytest.mark.skipif(not _has_check_command(), reason="`memlint check` has not landed yet")


def _sample_project(root: Path) -> None:
    """A project with one script that fits the configured GPU and one that does not
    (capacity rules only, so that the fitting one is clean)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[tool.memlint]\ngpu = "RTX4090"\nselect = ["MEM1"]\n')
    (root / "fits.py").write_text(script(batch=1))
    (root / "too_big.py").write_text(script(batch=8, recompute=False))
    (root / "notes.txt").write_text("not a training script\n")


@needs_check
def test_check_runs_with_torch_unimportable(tmp_path):
    _sample_project(tmp_path)
    run = lambda *files: subprocess.run(  # noqa: E731
        [sys.executable, "-c", _BLOCK.format(heavy=HEAVY), "check", *files],
        cwd=tmp_path, capture_output=True, text=True)
    ok = run("fits.py")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run("fits.py", "too_big.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert re.search(r"^too_big\.py:\d+:\d+: MEM101 ", bad.stdout, re.M), bad.stdout
    assert "Traceback" not in bad.stderr


def _snapshot(dest: Path, env: dict) -> Path:
    """This checkout as a one-commit repository: the files git tracks or would track.

    try-repo on the checkout itself would leave out files not yet added to git, so the
    hook would run other code than the rest of this test session imports.
    """
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(["git", *cmd], cwd=dest, check=True, env=env, capture_output=True)
    return dest


@needs_check
@pytest.mark.skipif(shutil.which("git") is None or importlib.util.find_spec("pre_commit") is None,
                    reason="needs git and pre-commit (pip install pre-commit)")
def test_pre_commit_try_repo_runs_the_hook_on_a_sample_project(tmp_path):
    project = tmp_path / "project"
    _sample_project(project)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", "init", "-q"], cwd=project, check=True, env=env)
    subprocess.run(["git", "add", "."], cwd=project, check=True, env=env)
    repo = _snapshot(tmp_path / "memlint", env)

    def hook(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(repo), "memlint",
                               "--files", *files], cwd=project, capture_output=True, text=True, env=env,
                              timeout=900)

    ok = hook("fits.py", "notes.txt")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^memlint\.+Passed$", ok.stdout, re.M), ok.stdout
    bad = hook("fits.py", "too_big.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert re.search(r"^memlint\.+Failed$", bad.stdout, re.M)
    assert re.search(r"^too_big\.py:\d+:\d+: MEM101 ", bad.stdout, re.M), bad.stdout
    # try-repo builds its hook environment in a temporary store and removes it, so the
    # torch-free install is checked above, on the base dependencies and with torch blocked
