"""A shell launcher the user names whose training command memlint cannot follow (a module of an installed package, a
script or config outside the checkout) is a note saying what it runs, and `memlint plan` answers with an all-unknown
plan (exit 0), as it does for a script without a trainer: memlint's limit is not the user's error. A launcher with no
Python command at all is no training file: `check` stays silent on it, `plan` says so."""

from __future__ import annotations

import json
from functools import partial

from checkouts import write_checkout
from memlint.cli import main

_write = partial(write_checkout, dedent=True)

_MODULE = """
    #!/bin/bash
    set -x
    torchrun --nproc_per_node 4 -m someframework.cli.train_sft \\
       --pretrain Qwen/Qwen2.5-7B --max_len 2048
"""


def _plan_json(capsys, *argv):
    rc = main(["plan", "--format", "json", *argv])
    return rc, json.loads(capsys.readouterr().out)


def test_a_named_launcher_of_an_installed_module_is_a_note_not_an_error(tmp_path, monkeypatch, capsys):
    _write(tmp_path, {"train.sh": _MODULE})
    monkeypatch.chdir(tmp_path)
    for argv in (["train.sh"], ["--", "bash", "train.sh"]):
        rc, doc = _plan_json(capsys, *argv)
        assert rc == 0 and doc["estimate"] is None, argv
        said = " ".join(doc["plan"].get("notes", [])) if isinstance(doc["plan"], dict) else ""
        said = said or json.dumps(doc)
        assert "`torchrun -m someframework.cli.train_sft` (line 3): a module of no package in this checkout" in said
    assert main(["check", "train.sh"]) == 0
    assert "MEM001" in capsys.readouterr().out


def test_a_launcher_of_a_missing_script_names_it(tmp_path, monkeypatch, capsys):
    _write(tmp_path, {"run.sh": "python src/not_here.py --model_name_or_path gpt2\n"})
    monkeypatch.chdir(tmp_path)
    rc, doc = _plan_json(capsys, "run.sh")
    assert rc == 0 and "`python src/not_here.py` (line 1): no such Python file in this checkout" in json.dumps(doc)


def test_a_shell_script_with_no_python_command(tmp_path, monkeypatch, capsys):
    _write(tmp_path, {"serve.sh": "#!/bin/bash\nexport X=1\ntext-generation-launcher --port 8080\n",
                      "train.py": "print('hello')\n"})
    monkeypatch.chdir(tmp_path)
    rc, doc = _plan_json(capsys, "serve.sh")
    assert rc == 0 and "runs no Python training command memlint reads" in json.dumps(doc)
    assert main(["check", "serve.sh"]) == 0
    assert "MEM001" not in capsys.readouterr().out  # no training file: nothing to say, as for a .py without a trainer
    assert main(["check", "."]) == 0  # a walk's shell scripts stay silent
    assert "MEM001" not in capsys.readouterr().out


def test_a_missing_launcher_is_still_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--", "bash", "missing.sh"]) == 2
    assert "missing.sh: no such file" in capsys.readouterr().err


def test_a_command_of_an_installed_module_or_an_unknown_program_is_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for words, said in ((["torchrun", "--nproc_per_node", "4", "-m", "someframework.cli.train_sft", "--max_len", "2048"],
                         "-m someframework.cli.train_sft: no such module"),
                        (["sometool", "sft", "--model", "Qwen/Qwen2.5-7B"], "sometool: not a Python launcher memlint reads")):
        rc, doc = _plan_json(capsys, "--", *words)
        assert rc == 0 and doc["estimate"] is None and said in " ".join(doc["notes"]), words
    assert main(["plan", "--", "python", "not_here.py"]) == 2  # a missing script is the user's error
    assert "not_here.py: no such file" in capsys.readouterr().err
