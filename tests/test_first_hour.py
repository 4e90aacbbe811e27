"""The first hour (issue #30): a newcomer's walk through every front door, one test per item the issue
lists, each run the way a user runs it (the CLI in-process, the bundled fixtures, scripts written as people
write them). No network, no GPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memlint.cli import main
from memlint.rules.samples import script

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "fixtures" / "scripts"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("MEMLINT_NO_CACHE", "1")


def _eager_script(tmp_path: Path, **kw) -> Path:
    p = tmp_path / "train.py"
    p.write_text(script("meta-llama/Llama-3.2-1B", attn="eager", **kw))
    return p


# ---- the answer, first -------------------------------------------------------------------------------------


def test_a_fitting_run_says_so_and_concise_lines_carry_the_severity(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = run(capsys, "fixtures/scripts/trl_sft_qlora.py", "--gpu", "RTX4090")
    assert code == 0
    lines = out.splitlines()
    assert re.match(r"^fixtures/scripts/trl_sft_qlora.py:\d+:\d+: MEM304 note: ", lines[0])
    assert lines[-1] == "fixtures/scripts/trl_sft_qlora.py: peak 9.1 GiB, fits RTX4090 with 14.9 GiB free"
    assert "Found 1 finding (1 note).\nNone at or above fail-on (warning): exit 0.\n" in err
    # full ends the file the same way
    code, out, _ = run(capsys, "fixtures/scripts/trl_sft_qlora.py", "--gpu", "RTX4090", "--output-format", "full")
    assert out.rstrip("\n").splitlines()[-1] == lines[-1]


def test_one_notion_of_fit_mem305_offers_only_what_fits_with_the_headroom(capsys, monkeypatch):
    """MEM305 used to offer LoRA at 22.7 GiB on a 24 GiB card, which MEM102 calls tight. On a card between what LoRA
    and QLoRA need with the headroom (sized from the estimates, whatever they are today) it offers QLoRA alone, and
    each adapter, applied, gets the verdict that matches: QLoRA fits, LoRA is tight."""
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.estimate.levers import LEVERS, apply
    from memlint.extract import extract_file
    from memlint.gpu import MIN_HEADROOM, Gpu, fit_of
    from memlint.rules.capacity import assumptions

    monkeypatch.chdir(ROOT)
    script_path = "fixtures/scripts/run_clm_style.py"
    s = setup_from_plan(extract_file(script_path)).setup
    by_key = {lv.key: lv for lv in LEVERS}
    steps = {k: by_key[k].make(s) for k in ("lora", "qlora")}
    peaks = {k: apply(s, [step], "real").peak for k, step in steps.items()}
    assert peaks["qlora"] < peaks["lora"]
    gib = (peaks["lora"] + peaks["qlora"]) / 2 / (1 - MIN_HEADROOM) / (1 << 30)
    for k, verdict in (("qlora", True), ("lora", False)):  # the card sits between the two
        assert fit_of(apply(s, [steps[k]], "real"), Gpu("card", int(gib * (1 << 30)), 0)).ok is verdict, k
    gpu = f"{gib:.3f}"
    _, out, _ = run(capsys, script_path, "--gpu", gpu)
    [mem305] = [ln for ln in out.splitlines() if " MEM305 " in ln]
    assert "QLoRA (r=16, all linear layers)" in mem305 and " LoRA (r=16" not in mem305
    for k, fits in (("qlora", True), ("lora", False)):
        assume = [a for kv in assumptions(steps[k].plan) for a in ("--assume", kv)]
        _, out, _ = run(capsys, script_path, "--gpu", gpu, *assume)
        assert " MEM101 " not in out and (" MEM102 " not in out) is fits, (k, out)
    # the suggestion MEM101 names, applied, gets memlint.gpu's "fits" (no MEM101, no MEM102)
    _, out, _ = run(capsys, "fixtures/scripts/run_clm_style.py", "--gpu", "RTX4090", "--output-format", "json")
    [f] = [d for d in json.loads(out) if d["code"] == "MEM101"]
    assume = [a for kv in f["data"]["suggestion"]["assume"] for a in ("--assume", kv)]
    _, out, _ = run(capsys, "fixtures/scripts/run_clm_style.py", "--gpu", "RTX4090", *assume)
    assert " MEM101 " not in out and " MEM102 " not in out and "fits RTX4090 with" in out


def test_the_rows_add_up_and_name_the_recomputed_layers_eager_attention(capsys):
    args = ("estimate", "--model", "meta-llama/Llama-3.2-1B", "--batch", "4", "--seq", "4096", "--attn", "eager",
            "--recompute", "--fused-loss", "--gpu", "24")
    _, out, _ = run(capsys, *args, "--format", "json")
    doc = json.loads(out)
    rows = sum(v for k, v in doc["components"].items() if k != "overhead")
    assert rows + sum(t["bytes"] for t in doc["peak_terms"]) == doc["allocated_peak"]
    [layer] = [t for t in doc["peak_terms"] if t["bytes"] > 0]
    assert layer["name"] == "recomputed layer" and "eager attention" in layer["how"]
    _, out, _ = run(capsys, *args)
    assert re.search(r"^\+ recomputed layer +19\.94 ", out, re.M)
    assert "eager attention's b·heads·s²" in " ".join(out.split())  # the how column wraps
    _, out, _ = run(capsys, *args, "--compare")
    assert "╌ at the peak: recomputed layer (eager attention)" in out.replace("\n", "")


def test_sdpa_is_a_lever_and_mem204_speaks_at_any_length(tmp_path, capsys):
    """Eager attention at 1,024 tokens, micro-batch 4 on 24 GiB: SDPA (free, faster) is in MEM101's advice,
    not a smaller micro-batch, and MEM204 says what it saves."""
    p = _eager_script(tmp_path, batch=4, max_length=1024, recompute=False)
    _, out, _ = run(capsys, str(p), "--gpu", "24")
    [mem101] = [ln for ln in out.splitlines() if " MEM101 " in ln]
    assert 'attn_implementation="sdpa"' in mem101 and "micro-batch 4 → 1" not in mem101
    assert re.search(r" MEM204 warning: eager attention at 1024 tokens .* SDPA would save 12\.7 GiB", out)


def test_plan_shows_the_fields_that_matter_and_all_shows_the_rest(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "200")

    def fields(out: str) -> list[str]:
        from memlint.plan import PLAN_FIELDS

        rows = out.split("field ", 1)[1].splitlines()[1:]
        return [ln.split()[0] for ln in rows[:len(PLAN_FIELDS)] if ln.split() and ln.split()[0] in PLAN_FIELDS]

    _, out, _ = run(capsys, "plan", "fixtures/scripts/run_clm_style.py")
    shown = fields(out)
    # a full fine-tune on one GPU: no LoRA, quantization, parallelism, vision or GaLore rows
    assert "model_id" in shown and "per_device_batch" in shown and "gradient_checkpointing" in shown
    assert not {"lora_r", "quant_bits", "tp_size", "image_max_pixels", "galore_rank", "num_labels"} & set(shown)
    assert len(shown) < 25 and "more fields, unknown or not used by this run: --all shows them" in out
    _, out, _ = run(capsys, "plan", "fixtures/scripts/run_clm_style.py", "--all")
    assert len(fields(out)) == 55 and "--all shows them" not in out
    # a QLoRA run shows its adapters and its quantization; what the estimate lacks is always shown
    _, out, _ = run(capsys, "plan", "fixtures/scripts/trl_sft_qlora.py")
    assert {"lora_r", "quant_type", "double_quant"} <= set(fields(out))
    _, out, _ = run(capsys, "plan", "fixtures/scripts/deepspeed_zero3.py")
    assert "num_gpus" in fields(out)


# ---- notebooks and code review -----------------------------------------------------------------------------


def _notebook(batch: int) -> str:
    """A notebook as Jupyter writes it: one source line per JSON line, execution counts that change on every run."""
    cells = [
        ["from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"],
        ['model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype="bfloat16")\n'],
        ["def tokenize(batch):\n",
         '    return tok(batch["text"], truncation=True, max_length=1024, padding="max_length")\n'],
        ["args = TrainingArguments(\n", '    output_dir="out",\n', f"    per_device_train_batch_size={batch},\n",
         "    bf16=True,\n", ")\n", "trainer = Trainer(model=model, args=args)\n", "trainer.train()"],
    ]
    doc = {"cells": [{"cell_type": "code", "execution_count": batch * (i + 1), "metadata": {}, "outputs": [],
                      "source": src} for i, src in enumerate(cells)],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(doc, indent=1) + "\n"


def test_diff_on_a_notebook_names_the_cell_and_row_and_annotates_the_cells_json_line(tmp_path, capsys, monkeypatch):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("needs git")

    def sh(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    nb = tmp_path / "nb.ipynb"
    nb.write_text(_notebook(8))
    sh("init", "-q", "-b", "main")
    sh("add", ".")
    sh("commit", "-qm", "base")
    nb.write_text(_notebook(16))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "diff", "HEAD")
    assert "per_device_train_batch_size 8 → 16 at nb.ipynb:cell 4:3" in out and "execution_count" not in out
    _, out, _ = run(capsys, "diff", "HEAD", "--output-format", "json")
    [change] = json.loads(out)["files"][0]["changes"]
    assert (change["key"], change["cell"], change["line"]) == ("per_device_train_batch_size", 4, 3)
    _, out, _ = run(capsys, "diff", "HEAD", "--output-format", "github")
    [ann] = out.splitlines()
    raw = next(i for i, ln in enumerate(nb.read_text().splitlines(), 1) if "per_device_train_batch_size=16" in ln)
    assert f",line={raw}::nb.ipynb:cell 4:3: per_device_train_batch_size 8 → 16" in ann


def test_check_json_numbers_related_locations_as_the_finding_in_a_notebook(tmp_path, capsys):
    nb = tmp_path / "nb.ipynb"
    nb.write_text(_notebook(64))
    _, out, _ = run(capsys, str(nb), "--gpu", "24", "--output-format", "json")
    for f in json.loads(out):
        assert f["cell"] is not None
        for rel in f["related"]:
            assert rel["cell"] is not None and rel["location"]["row"] <= 7, rel


def test_add_noqa_writes_into_the_notebook_cells_source(tmp_path, capsys):
    nb = tmp_path / "nb.ipynb"
    nb.write_text(_notebook(64))
    before = nb.read_text()
    code, out, _ = run(capsys, str(nb), "--gpu", "24")
    assert code == 1 and " MEM101 error: " in out
    code, _, err = run(capsys, str(nb), "--gpu", "24", "--add-noqa")
    assert code == 0 and err.startswith("Added ") and not err.startswith("Added 0"), err
    doc = json.loads(nb.read_text())
    src = doc["cells"][3]["source"]
    assert isinstance(src, list) and any("# noqa: " in ln and "per_device_train_batch_size=64" in ln for ln in src)
    # the JSON as Jupyter wrote it: the same indent, only the cell lines with a finding changed
    changed = [(a, b) for a, b in zip(before.splitlines(), nb.read_text().splitlines()) if a != b]
    assert len(before.splitlines()) == len(nb.read_text().splitlines()) and all("# noqa: MEM" in b for _, b in changed)
    code, out, err = run(capsys, str(nb), "--gpu", "24")
    assert code == 0 and " MEM" not in out and "All checks passed!" in err


def test_mem101s_suggestion_is_an_unsafe_fix_that_makes_the_run_fit(tmp_path, capsys):
    p = _eager_script(tmp_path, batch=4, max_length=1024, recompute=True)
    code, out, err = run(capsys, str(p), "--gpu", "12")
    [mem101] = [ln for ln in out.splitlines() if " MEM101 " in ln]
    assert code == 1 and "1 hidden fix can be enabled with the `--unsafe-fixes` option" in err
    _, out, _ = run(capsys, str(p), "--gpu", "12", "--output-format", "json")
    [f] = [d for d in json.loads(out) if d["code"] == "MEM101"]
    assert f["fix"]["applicability"] == "unsafe" and f["fix"]["codemod"] == "suggestion" and f["fix"]["edits"]
    code, out, _ = run(capsys, str(p), "--gpu", "12", "--fix")  # safe fixes only: MEM101 stays
    assert " MEM101 " in out
    code, out, err = run(capsys, str(p), "--gpu", "12", "--fix", "--unsafe-fixes")
    assert " MEM101 " not in out and " MEM102 " not in out and "fits 12 GiB with" in out, out + err
    text = p.read_text()
    assert 'optim="adamw_bnb_8bit"' in text and "use_liger_kernel=True" in text


# ---- pre-commit and Ruff parity ----------------------------------------------------------------------------

INFERENCE = '''\
import sys
import torch
from transformers import AutoModelForCausalLM
from peft import PeftModel

base = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.bfloat16)
PeftModel.from_pretrained(base, sys.argv[2]).merge_and_unload().save_pretrained("merged")
'''


def test_force_exclude_extend_exclude_and_a_named_inference_script(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\ngpu = "24"\nexclude = ["experiments"]\n')
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "big.py").write_text(script(batch=64, recompute=False))
    (tmp_path / "scratch.py").write_text(script(batch=64, recompute=False))
    (tmp_path / "merge.py").write_text(INFERENCE)
    # pre-commit names the files itself: without --force-exclude the excluded one is checked
    code, out, _ = run(capsys, "check", "experiments/big.py", "merge.py")
    assert code == 1 and "experiments/big.py:" in out
    code, out, err = run(capsys, "check", "--force-exclude", "experiments/big.py", "merge.py")
    # the merge script trains nothing: no MEM003 about its unknown max_length, no answer line
    assert code == 0 and out == "" and "All checks passed!" in err, out + err
    code, out, _ = run(capsys, "check", "--force-exclude", "--extend-exclude", "scratch*", "scratch.py")
    assert code == 0 and out == ""
    code, out, _ = run(capsys, "check", ".", "--extend-exclude", "scratch.py")
    assert "scratch.py" not in out and "big.py" not in out


def test_config_key_value_overrides_the_settings_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\ngpu = "H200"\n')
    (tmp_path / "train.py").write_text(script(batch=8, recompute=False))
    assert run(capsys, "check", "train.py")[0] == 0
    code, out, _ = run(capsys, "check", "train.py", "--config", "gpu=RTX4090")
    assert code == 1 and " MEM101 error: " in out
    code, out, _ = run(capsys, "check", "train.py", "--config", "gpu=24", "--config", "fail-on='error'",
                       "--select", "MEM203")
    assert code == 0 and " MEM203 [*] warning: " in out
    code, _, err = run(capsys, "check", "train.py", "--config", "gpuz=24")
    assert code == 2 and "unknown key `gpuz`" in err and "did you mean `gpu`?" in err


def test_show_fixes_and_exit_non_zero_on_fix(tmp_path, capsys):
    p = tmp_path / "train.py"
    p.write_text(script("meta-llama/Llama-3.2-1B", batch=4, max_length=1024, recompute=False))
    code, out, err = run(capsys, str(p), "--gpu", "24", "--fix", "--show-fixes", "--exit-non-zero-on-fix")
    assert code == 1 and "fits 24 GiB with" in out, out + err  # the run is fixed; the hook still stops the commit
    assert "Fixed 1 finding:\n- " in err and "    1 × MEM203 (recompute-off)\n" in err
    code, _, _ = run(capsys, str(p), "--gpu", "24", "--fix", "--exit-non-zero-on-fix")
    assert code == 0  # nothing left to fix


def test_watch_checks_again_when_a_file_changes(tmp_path, capsys, monkeypatch):
    import memlint.commands.check as check_cmd

    p = tmp_path / "train.py"
    p.write_text(script(batch=1))
    monkeypatch.setattr(check_cmd, "WATCH_ROUNDS", 2)
    monkeypatch.setattr(check_cmd, "WATCH_INTERVAL", 0.01)
    sleeps = []

    def edit(_):
        sleeps.append(1)
        p.write_text(script(batch=64, recompute=False))

    monkeypatch.setattr("time.sleep", edit)
    code, out, err = run(capsys, str(p), "--gpu", "24", "--watch")
    assert sleeps and code == 1 and " MEM101 " in out and "watching 1 files for changes" in err
    assert out.count("train.py: peak") == 2


def test_a_misspelt_framework_key_is_a_warning_that_fails_the_check(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _ = run(capsys, "fixtures/configs/axolotl_misspelt_key.yml", "--gpu", "H100")
    assert code == 1 and re.search(r" MEM004 warning: unknown axolotl key '\w+' \(did you mean '\w+'\?\)", out)


def test_the_hook_hands_python_and_notebooks_with_force_exclude():
    yaml = pytest.importorskip("yaml")
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["entry"] == "memlint check --force-exclude" and hook["types_or"] == ["python", "jupyter"]


# ---- Hugging Face conventions ------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["bfloat16", "torch.bfloat16", "bf16"])
def test_dtype_takes_the_names_people_type(capsys, spelling):
    code, out, _ = run(capsys, "estimate", "--model", "Qwen/Qwen2.5-0.5B", "--dtype", spelling, "--format", "json")
    assert code == 0 and json.loads(out)["components"]["weights"] > 0
    base = json.loads(run(capsys, "estimate", "--model", "Qwen/Qwen2.5-0.5B", "--dtype", "bf16", "--format", "json")[1])
    assert json.loads(out)["peak"] == base["peak"]


def test_dtype_float16_and_float32_are_fp16_and_fp32(capsys):
    peaks = {d: json.loads(run(capsys, "estimate", "--model", "Qwen/Qwen2.5-0.5B", "--dtype", d, "--format",
                               "json")[1])["components"]["weights"] for d in ("float16", "fp16", "float32", "fp32")}
    assert peaks["float16"] == peaks["fp16"] and peaks["float32"] == peaks["fp32"] == 2 * peaks["fp16"]


def test_assume_takes_hugging_face_argument_names_and_says_what_was_meant(tmp_path, capsys):
    p = tmp_path / "train.py"
    p.write_text(script(batch=8, recompute=False))
    hf = run(capsys, str(p), "--gpu", "24", "--assume", "per_device_train_batch_size=1", "--assume",
             "model_name_or_path=Qwen/Qwen2.5-0.5B", "--assume", "gradient_accumulation_steps=8")[1]
    ours = run(capsys, str(p), "--gpu", "24", "--assume", "per_device_batch=1", "--assume", "model_id=Qwen/Qwen2.5-0.5B",
               "--assume", "grad_accum=8")[1]
    assert hf == ours and "fits 24 GiB with" in hf
    code, _, err = run(capsys, str(p), "--assume", "per_device_train_batchsize=2")
    assert code == 2 and "did you mean" in err and "per_device_train_batch_size" in err
    assert len(err) < 400 and "image_max_pixels" not in err  # no 56-field dump


@pytest.mark.parametrize("name,label", [
    ("L40S", "L40S"), ("L40", "L40"), ("A6000", "A6000"), ("RTX A6000", "A6000"), ("RTX 6000 Ada", "RTX6000-Ada"),
    ("A10", "A10G"), ("A10G", "A10G"), ("V100-16GB", "V100-16GB"), ("V100-32GB", "V100-32GB"), ("H20", "H20"),
    ("H200", "H200"), ("B200", "B200"), ("GB200", "GB200"), ("MI300X", "MI300X"), ("RTX 5090", "RTX5090"),
    ("RTX4080", "RTX4080"), ("3090", "RTX3090"), ("RTX 3060", "RTX3060"), ("T4", "T4")])
def test_the_gpus_people_rent_and_own_are_data_with_a_source(name, label):
    from memlint.gpu import find_gpu, table

    g = find_gpu(name)
    assert g.label == label
    entry = table()[label]
    assert entry["source"] and entry["total_bytes"] > 10 << 30 and "compute_capability" in entry or label == "MI300X"


def test_v100_has_no_bf16_and_a_bare_v100_is_ambiguous(capsys, monkeypatch):
    from memlint.errors import MemlintError

    monkeypatch.setenv("COLUMNS", "200")
    from memlint.gpu import find_gpu

    with pytest.raises(MemlintError, match="ambiguous GPU 'V100': V100-16GB, V100-32GB"):
        find_gpu("V100")
    code, out, _ = run(capsys, "estimate", "--model", "Qwen/Qwen2.5-0.5B", "--gpu", "V100-32GB", "--dtype", "bf16")
    assert "no (V100-32GB has no bf16)" in out


def test_list_gpus_and_list_models(capsys):
    from memlint.catalog import entries

    code, out, _ = run(capsys, "estimate", "--list-gpus", "--format", "json")
    gpus = json.loads(out)
    assert code == 0 and {g["name"] for g in gpus} >= {"L40S", "GB200", "RTX3060", "H20"}
    assert all(g["source"] for g in gpus) and [g["bytes"] for g in gpus] == sorted(g["bytes"] for g in gpus)
    code, out, _ = run(capsys, "estimate", "--list-gpus")
    assert code == 0 and "RTX6000-Ada" in out
    code, out, _ = run(capsys, "estimate", "--list-models", "--format", "json")
    models = json.loads(out)
    assert code == 0 and len(models) == len(entries()) and all(m["params"] > 0 for m in models)
    code, _, err = run(capsys, "estimate", "--batch", "2")
    assert code == 2 and "--list-models" in err


# ---- long work shows progress ------------------------------------------------------------------------------


class _Tty:
    """A stderr that says it is a terminal."""

    def __init__(self):
        import io

        self.buf = io.StringIO()

    def isatty(self):
        return True

    def write(self, text):
        return self.buf.write(text)

    def flush(self):
        pass


def test_progress_shows_in_a_terminal_only_and_never_with_q_or_in_ci(monkeypatch):
    import sys
    import time

    from memlint import progress

    for var in progress.CI_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    tty = _Tty()
    assert progress.wanted(stream=tty) and not progress.wanted(quiet=True, stream=tty)
    assert not progress.wanted(stream=__import__("io").StringIO())  # piped
    monkeypatch.setenv("CI", "true")
    assert not progress.wanted(stream=tty)
    monkeypatch.delenv("CI")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(sys, "stderr", tty)
    with progress.showing("measuring x", enabled=True):
        progress.note("step 1: backward")
        time.sleep(0.3)
    assert "measuring x: step 1: backward" in tty.buf.getvalue()
    quiet = _Tty()
    monkeypatch.setattr(sys, "stderr", quiet)
    with progress.showing("measuring x", enabled=False):
        progress.note("step 1: backward")  # no display: a no-op
    assert quiet.buf.getvalue() == ""


def test_a_walk_over_100_files_advances_a_bar(tmp_path, monkeypatch):
    from memlint import progress
    from memlint.check import check_paths
    from memlint.config import Settings

    for i in range(101):  # each with a training signal: a walk parses it (one that only imports torch is skipped)
        (tmp_path / f"s{i:03}.py").write_text("import torch\nloss.backward()\n")
    (tmp_path / "helper.py").write_text("import torch\nx = 1\n")  # answered at once: not counted by the bar
    calls = []
    monkeypatch.setattr(progress, "showing", lambda label, enabled, total=None: _Recorder(calls, label, enabled, total))
    monkeypatch.setattr(progress, "advance", lambda n=1: calls.append("advance"))
    check_paths([str(tmp_path)], Settings(), show_progress=True)
    assert calls[0] == ("checking files", True, 101) and calls.count("advance") == 101
    calls.clear()
    check_paths([str(tmp_path)], Settings(), show_progress=False)  # -q, CI, or no terminal
    assert calls[0][1] is False


class _Recorder:
    def __init__(self, calls, label, enabled, total):
        calls.append((label, enabled, total))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_seq_past_the_models_positions_is_a_warning(capsys):
    code, out, err = run(capsys, "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--seq", "8192", "--format", "json")
    assert code == 0 and json.loads(out)["peak"] > 0
    assert "memlint: warning: --seq 8,192 is past meta-llama/Llama-2-7b-hf's 4,096 positions" in err
    _, _, err = run(capsys, "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--seq", "4096")
    assert "warning" not in err


# ---- JSON Schemas for the JSON outputs ---------------------------------------------------------------------


def _validator(name: str):
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    from memlint import data

    schemas = {n: data.load(f"schema_{n}.json") for n in ("check", "plan", "estimate")}
    registry = referencing.Registry().with_resources(
        (s["$id"], referencing.Resource.from_contents(s)) for s in schemas.values())
    cls = jsonschema.validators.validator_for(schemas[name])
    cls.check_schema(schemas[name])
    return cls(schemas[name], registry=registry, format_checker=cls.FORMAT_CHECKER)


def test_check_json_validates_against_its_shipped_schema(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    v = _validator("check")
    _, out, _ = run(capsys, "check", "fixtures/scripts", "fixtures/configs", "--gpu", "RTX4090", "--output-format",
                    "json", "--exit-zero")
    doc = json.loads(out)
    assert len(doc) > 20 and any(d["fix"] for d in doc)
    v.validate(doc)
    nb = ROOT / "fixtures" / "scripts" / "gemma_sft_notebook.ipynb"
    _, out, _ = run(capsys, "check", str(nb), "--gpu", "6", "--output-format", "json", "--exit-zero")
    doc = json.loads(out)
    assert doc and all(d["cell"] for d in doc if d["filename"] == str(nb))
    v.validate(doc)
    _, out, _ = run(capsys, "check", "fixtures/scripts/run_clm_style.py", "--gpu", "RTX4090", "--output-format",
                    "json-lines")
    for line in out.splitlines():
        v.validate([json.loads(line)])


def test_plan_json_validates_and_its_schema_names_every_plan_field(capsys, monkeypatch):
    from memlint import data
    from memlint.plan import PLAN_FIELDS, SOURCES

    monkeypatch.chdir(ROOT)
    schema = data.load("schema_plan.json")
    assert schema["$defs"]["field"]["enum"] == list(PLAN_FIELDS)
    assert schema["$defs"]["value"]["properties"]["source"]["enum"] == list(SOURCES)
    v = _validator("plan")
    _, out, _ = run(capsys, "plan", "fixtures/scripts", "fixtures/configs/litgpt_mistral_full.yaml", "--format", "json")
    docs = json.loads(out)
    assert isinstance(docs, list) and any(d["estimate"] for d in docs) and any(d.get("conditional") for d in docs)
    v.validate(docs)
    _, out, _ = run(capsys, "plan", "fixtures/scripts/trl_sft_qlora.py", "--format", "json", "--gpus", "2",
                    "--assume", "distributed=fsdp")
    v.validate(json.loads(out))


@pytest.mark.parametrize("argv", [
    ["--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "RTX4090"],
    ["--model", "meta-llama/Llama-3.2-1B", "--attn", "eager", "--recompute", "--fused-loss", "--batch", "4"],
    ["--model", "meta-llama/Llama-3.1-8B", "--gpus", "8", "--shard", "zero3", "--tp", "2"],
    ["--model", "Qwen/Qwen2.5-0.5B", "--optim", "paged_adamw_8bit"],
])
def test_estimate_json_validates_against_its_shipped_schema(capsys, argv):
    v = _validator("estimate")
    code, out, _ = run(capsys, "estimate", *argv, "--format", "json")
    assert code == 0
    v.validate(json.loads(out))


# ---- the models people fine-tune now -----------------------------------------------------------------------

NEW_MODELS = {  # id (or an alias) -> (exact count on the meta device, the total its card publishes, in billions)
    "openai/gpt-oss-20b": (20_914_757_184, 21), "openai/gpt-oss-120b": (116_829_156_672, 117),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (107_769_861_120, 109),  # text model; the card counts the tower
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (400_711_848_960, 400),
    "Qwen/Qwen3-235B-A22B": (235_093_634_560, 235), "Qwen/Qwen3-Coder-30B-A3B-Instruct": (30_532_122_624, 30.5),
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": (480_154_875_392, 480), "google/gemma-3n-E4B-it": (6_835_235_568, 6.8),
    "HuggingFaceTB/SmolLM3-3B": (3_075_098_624, 3.1), "deepseek-ai/DeepSeek-V3": (671_026_404_352, 671),
    "deepseek-ai/DeepSeek-R1": (671_026_404_352, 671), "zai-org/GLM-4.5": (352_797_814_784, 355),
    "zai-org/GLM-4.5-Air": (106_852_245_504, 106), "microsoft/Phi-4-mini-instruct": (None, 3.8),
    "microsoft/Phi-4-multimodal-instruct": (3_836_021_760, 3.8), "answerdotai/ModernBERT-base": (149_014_272, 0.149),
    "answerdotai/ModernBERT-large": (394_781_696, 0.395),
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": (23_572_403_200, 24),
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": (23_572_403_200, 24),
}


@pytest.mark.parametrize("model_id", sorted(NEW_MODELS))
def test_the_models_people_fine_tune_now_have_exact_cited_counts(model_id):
    from memlint.catalog import catalog_entry, entries, resolve

    spec = resolve(model_id)
    exact, published = NEW_MODELS[model_id]
    if exact is not None:
        assert spec.params == exact
    assert abs(spec.params / 1e9 - published) / published < 0.03, spec.params  # within 3 % of the card's total
    canonical = next(k for k, e in entries().items() if k == model_id or model_id in e.get("aliases", []))
    assert entries()[canonical].get("ref"), f"{canonical}: where its config values were read"
    assert catalog_entry(model_id) is not None


@pytest.mark.parametrize("model_id,method", [("openai/gpt-oss-20b", "lora"), ("deepseek-ai/DeepSeek-R1", "qlora"),
                                             ("google/gemma-3n-E4B-it", "qlora"), ("answerdotai/ModernBERT-base", "full"),
                                             ("meta-llama/Llama-4-Scout-17B-16E", "qlora"), ("zai-org/GLM-4.5-Air", "lora")])
def test_the_new_models_are_estimated(capsys, model_id, method):
    code, out, _ = run(capsys, "estimate", "--model", model_id, "--method", method, "--batch", "1", "--seq", "1024",
                       "--recompute", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["peak"] > doc["components"]["weights"] > 0


def test_the_readme_states_the_catalog_count():
    from memlint.catalog import entries

    readme = (ROOT / "README.md").read_text()
    assert f"a bundled catalog of {len(entries())} models" in readme


# ---- --online: only config.json, only when asked ----------------------------------------------------------

TINY_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
              "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """huggingface_hub's download, mocked: it writes the config into a fake HF cache and records each call; tests
    never touch the network."""
    hf = pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    calls = []

    def download(repo_id, filename, **kw):
        calls.append((repo_id, filename, kw))
        snap = tmp_path / "hub" / ("models--" + repo_id.replace("/", "--")) / "snapshots" / "abc"
        snap.mkdir(parents=True, exist_ok=True)
        (snap / filename).write_text(json.dumps(TINY_LLAMA))
        return str(snap / filename)

    monkeypatch.setattr(hf, "hf_hub_download", download)
    return calls


def test_offline_by_default_and_the_unknown_model_says_how_to_opt_in(tmp_path, capsys, hub):
    p = tmp_path / "train.py"
    p.write_text(script("acme/tiny-llama-new"))
    code, out, _ = run(capsys, str(p), "--gpu", "24")
    assert hub == [] and " MEM002 note: " in out and "--online fetches its config.json" in out
    code, _, err = run(capsys, "estimate", "--model", "acme/tiny-llama-new")
    assert code == 2 and hub == [] and "online = true in [tool.memlint]" in err


def test_online_fetches_only_config_json_into_the_hf_cache(tmp_path, capsys, hub, monkeypatch):
    p = tmp_path / "train.py"
    p.write_text(script("acme/tiny-llama-new"))
    code, out, _ = run(capsys, str(p), "--gpu", "24", "--online")
    assert [c[:2] for c in hub] == [("acme/tiny-llama-new", "config.json")]
    assert "trust_remote_code" not in hub[0][2] and " MEM002 " not in out and "train.py: peak" in out
    # the config is in the HF cache now: read offline afterwards, no second call
    code, out, _ = run(capsys, "estimate", "--model", "acme/tiny-llama-new", "--format", "json")
    assert code == 0 and len(hub) == 1 and json.loads(out)["model"]["params"] > 0
    # [tool.memlint] online = true asks for the same
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nonline = true\n")
    code, _, _ = run(capsys, "estimate", "--model", "acme/other-new", "--format", "json")
    assert code == 0 and hub[-1][:2] == ("acme/other-new", "config.json")


def test_online_failures_are_one_line(capsys, monkeypatch):
    hf = pytest.importorskip("huggingface_hub")

    def boom(repo_id, filename, **kw):
        raise OSError("401 Client Error: gated repo")

    monkeypatch.setattr(hf, "hf_hub_download", boom)
    code, _, err = run(capsys, "estimate", "--model", "acme/gated-model", "--online")
    assert code == 2 and err.count("\n") == 1 and "huggingface-cli login" in err


# ---- README claims -----------------------------------------------------------------------------------------


def test_rule_urls_point_at_this_projects_rule_pages():
    import tomllib

    import memlint
    from memlint.report import formats
    from memlint.rules.registry import all_rules

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Repository"] == memlint.__url__ == formats.HOME_URL
    assert formats.DOCS_URL.startswith(memlint.__url__ + "/blob/main/docs/rules/")
    for rule in all_rules():  # each link's path is a page of this repository
        url = formats.rule_url(rule.code, rule.name)
        assert (ROOT / url.removeprefix(memlint.__url__ + "/blob/main/")).is_file(), url


def test_plot_help_says_what_the_chart_draws(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "four-bucket" not in out
    assert "weights, gradients, optimizer, activations, logits, overhead" in out and "[plot]" in out


def test_measure_names_its_phases_to_the_progress_display(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memlint import progress

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    shown, notes = [], []

    class Recorder:
        def __init__(self, label, enabled, total=None):
            shown.append((label, enabled))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(progress, "showing", Recorder)
    monkeypatch.setattr(progress, "note", notes.append)
    code, out, err = run(capsys, "measure", "--model", str(tmp_path), "--batch", "1", "--seq", "32", "--device", "cpu",
                         "--format", "json", "-q")
    assert code == 0, err
    assert shown == [(f"measuring {tmp_path}", False)]  # -q (and no terminal here): nothing drawn
    assert "step 1: forward" in notes and "step 2: backward" in notes and "step 2 of 2: optimizer" in notes
    assert any(n.startswith("replaying") for n in notes)
