"""Round 6: misses met reading real checkouts (memlint issue #14): a checkout's pinned library
versions, SimPO's reference-free trainer, a notebook read twice in a walk, H2O LLM Studio's
experiment YAML. Synthetic excerpts of the shapes met; no public file is copied."""

import collections
import os

import pytest

from memlint import files
from memlint.cli import main
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_file
from memlint.extract.launch import command_target
from memlint.library.pins import checkout_pins, representative
from memlint.library.versions import pinned_versions
from test_realworld_patterns_5 import _write  # noqa: E402  (one way to lay out a synthetic checkout)


def _plan_of_command(words: list[str]):
    target = command_target(words)
    return extract_file(target.path, launch=target.launch)


_HF_SCRIPT = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = TrainingArguments("out", per_device_train_batch_size=2)
Trainer(model=model, args=args, train_dataset=None).train()
'''


# ---- 1. a checkout's pins -------------------------------------------------------------------------


def test_requirements_pin_sets_the_version_defaults_are_read_at(tmp_path, monkeypatch):
    # requirements.txt at the checkout's top, the script in scripts/: transformers 4.46's optim
    # default (adamw_torch) applies, not the newest one (adamw_torch_fused from 4.54 on torch>=2.8)
    _write(tmp_path, {"requirements.txt": "torch==2.8.0\ntrl==0.12.1\ntransformers>=4.46,<4.47  # pinned\n",
                      "scripts/train.py": _HF_SCRIPT})
    monkeypatch.chdir(tmp_path)
    with pinned_versions({"transformers": "5.2.0", "torch": "2.8.0"}):
        plan = extract_file("scripts/train.py")
        optim = plan.get("optimizer")
        assert optim.value == "adamw_torch" and optim.source == "library-default"
        assert "requirements.txt:3" in optim.chain[0] and "transformers 4.46" in optim.chain[0]
        assert {p.package: p.version for p in plan.versions} == {"torch": "2.8.0", "trl": "0.12.1", "transformers": "4.46"}
        assert "requirements.txt" in plan.sources
        planned = setup_from_plan(plan.with_values())
        assert any("requirements.txt:2" in n for n in planned.notes)
    # without the pin file the installed (here: pinned for the test) version applies
    os.remove(tmp_path / "requirements.txt")
    with pinned_versions({"transformers": "5.2.0", "torch": "2.8.0"}):
        assert extract_file("scripts/train.py").get("optimizer").value == "adamw_torch_fused"


def test_a_range_reads_as_the_highest_version_it_allows_among_the_breakpoints():
    # transformers' breakpoints in the data include 4.45 (library_defaults.json), 4.49 (data/vision.json's
    # Qwen2-VL processor defaults) and 4.54 (the optim default)
    assert representative("transformers", "<4.54") == "4.49"  # highest breakpoint below 4.54
    assert representative("transformers", "<4.49") == "4.45"
    assert representative("transformers", ">=4.46,<4.47") == "4.46"  # between breakpoints: its lower bound
    assert representative("transformers", "==4.44.2") == "4.44.2"
    assert representative("transformers", "==4.46.*") == "4.46"
    assert representative("peft", "~=0.13.0") == "0.13.0"
    assert representative("trl", ">=0.12") is None  # a lower bound alone pins nothing


def test_pins_from_pyproject_setup_py_and_environment_yml(tmp_path):
    _write(tmp_path / "a", {"pyproject.toml": '[project]\nname = "x"\ndependencies = [\n  "trl==0.9.6",\n  "torch>=2",\n]\n',
                            "train.py": ""})
    assert [(p.package, p.version, p.source) for p in checkout_pins(tmp_path / "a" / "train.py")] == \
        [("trl", "0.9.6", os.path.relpath(tmp_path / "a" / "pyproject.toml") + ":4")]
    _write(tmp_path / "b", {"setup.py": 'from setuptools import setup\nsetup(install_requires=["peft==0.7.1", "numpy"])\n',
                            "train.py": ""})
    assert [(p.package, p.version) for p in checkout_pins(tmp_path / "b" / "train.py")] == [("peft", "0.7.1")]
    env = ("name: x\ndependencies:\n  - python=3.10\n  - transformers=4.44\n  - pip:\n    - trl==0.9.6\n"
           "    - deepspeed>=0.12\n")
    _write(tmp_path / "c", {"environment.yml": env, "src/train.py": ""})
    pins = {p.package: (p.version, p.source.rsplit(":", 1)[1]) for p in checkout_pins(tmp_path / "c" / "src" / "train.py")}
    assert pins == {"transformers": ("4.44", "4"), "trl": ("0.9.6", "6")}  # conda's =4.44 is 4.44.*; >= alone: none


def test_pins_from_a_singular_requirement_txt(tmp_path):
    """`requirement.txt` (singular) is a requirements file too: its pins, not the newest defaults, apply."""
    _write(tmp_path, {"requirement.txt": "peft==0.7.1\ntransformers==4.36.2\n", "less/train/train.py": ""})
    assert [(p.package, p.version) for p in checkout_pins(tmp_path / "less" / "train" / "train.py")] == \
        [("peft", "0.7.1"), ("transformers", "4.36.2")]


def test_a_pin_file_above_the_repository_top_is_not_the_checkouts(tmp_path):
    _write(tmp_path, {"requirements.txt": "trl==0.9.6\n", "repo/train.py": ""})
    (tmp_path / "repo" / ".git").mkdir()
    assert checkout_pins(tmp_path / "repo" / "train.py") == ()


# ---- 2. reference-free preference trainers --------------------------------------------------------

_SIMPO = '''from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


class {name}({base}):
    def concatenated_forward(self, model, batch):
        return model(batch["concatenated_input_ids"]).logits


model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = TrainingArguments("out", per_device_train_batch_size=2)
{name}(model=model, args=args, train_dataset=None).train()
'''


def test_a_checkouts_simpo_trainer_is_reference_free_and_stacks_two_rows(tmp_path):
    script = _write(tmp_path, {"t.py": _SIMPO.format(name="SimPOTrainer", base="Trainer")}) / "t.py"
    plan = extract_file(script)
    t = plan.get("trainer")
    assert t.value == "Trainer" and dict(t.shape) == {"class": "SimPOTrainer", "objective": "simpo"}
    from memlint.plan import Value

    planned = setup_from_plan(plan.with_values(max_length=Value(512, "assumed")))
    assert planned.setup.objective == "simpo" and planned.setup.ref_model == "none"
    from memlint.estimate import estimate

    est = estimate(planned.setup, "real")
    sft = estimate(planned.setup.with_(objective="sft"), "real")
    assert est.peak > sft.peak  # chosen + rejected rows per sample


def test_a_trainer_subclass_named_otherwise_and_a_dpo_subclass_keep_their_base(tmp_path):
    plain = extract_file(_write(tmp_path, {"a.py": _SIMPO.format(name="MyTrainer", base="Trainer")}) / "a.py")
    assert plain.get("trainer").value == "Trainer" and not plain.get("trainer").shape
    # a DPOTrainer subclass builds DPOTrainer's reference model whatever its name
    dpo = _SIMPO.format(name="SimPODPOTrainer", base="DPOTrainer").replace(
        "from transformers import", "from trl import DPOTrainer\nfrom transformers import")
    plan = extract_file(_write(tmp_path, {"b.py": dpo}) / "b.py")
    assert plan.get("trainer").value == "DPOTrainer" and not plan.get("trainer").shape


def test_trl_cpo_trainer_with_the_simpo_loss_keeps_no_reference(tmp_path):
    src = '''from transformers import AutoModelForCausalLM
from trl import CPOConfig, CPOTrainer
model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
args = CPOConfig("out", loss_type="simpo", cpo_alpha=0.0, per_device_train_batch_size=2, max_length=512)
CPOTrainer(model=model, args=args, train_dataset=None).train()
'''
    plan = extract_file(_write(tmp_path, {"c.py": src}) / "c.py")
    planned = setup_from_plan(plan)
    assert planned.setup.objective == "cpo" and planned.setup.ref_model == "none"


def test_a_recipe_run_by_a_script_with_its_own_simpo_trainer(tmp_path, monkeypatch):
    # scripts/run_x.py builds its own SimPOTrainer; the recipe's `beta` alone would read as DPO
    script = _SIMPO.format(name="SimPOTrainer", base="Trainer")
    recipe = ("model_name_or_path: Qwen/Qwen2.5-0.5B\nbeta: 2.5\nmax_length: 1024\nper_device_train_batch_size: 2\n"
              "gradient_accumulation_steps: 4\nbf16: true\n")
    _write(tmp_path, {"scripts/run_x.py": script, "recipes/x.yaml": recipe})
    monkeypatch.chdir(tmp_path)
    plan = _plan_of_command(["accelerate", "launch", "scripts/run_x.py", "recipes/x.yaml"])
    t = plan.get("trainer")
    assert t.value == "Trainer" and dict(t.shape)["objective"] == "simpo"
    assert "the recipe alone reads as DPOTrainer" in t.chain[0]
    assert plan.get("per_device_batch").value == 2 and plan.get("max_length").value == 1024
    assert setup_from_plan(plan).setup.objective == "simpo"


# ---- 3. every file read once per run ----------------------------------------------------------------

_NB = ('{"cells": [{"cell_type": "code", "metadata": {}, "execution_count": null, "outputs": [], "source": ['
       '"from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\\n", '
       '"model = AutoModelForCausalLM.from_pretrained(\\"gpt2\\")\\n", '
       '"Trainer(model=model, args=TrainingArguments(\\"o\\", per_device_train_batch_size=2)).train()\\n"]}], '
       '"metadata": {}, "nbformat": 4, "nbformat_minor": 5}')


@pytest.mark.parametrize("cache", [False, True])
def test_a_walk_reads_a_notebook_once(tmp_path, monkeypatch, capsys, cache):
    # a notebook is read as Python, for its `!python` lines (a launcher), for its raw JSON
    # positions and for the cache key: one read from disk
    _write(tmp_path, {"nb/train.ipynb": _NB, "nb/requirements.txt": "transformers==4.46.0\n"})
    monkeypatch.chdir(tmp_path)
    reads = collections.Counter()
    real = files._read_file

    def counting(path, *a, **k):
        reads[os.path.abspath(path)] += 1
        return real(path, *a, **k)

    monkeypatch.setattr(files, "_read_file", counting)
    main(["check", "nb", *([] if cache else ["--no-cache"])])
    assert "train.ipynb" in capsys.readouterr().out
    assert reads[str(tmp_path / "nb" / "train.ipynb")] == 1
    assert all(n == 1 for n in reads.values()), reads


def test_a_file_rewritten_during_a_run_is_read_again(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("a = 1\n")
    with files.once_per_run():
        assert files.read_text(p) == "a = 1\n"
        p.write_text("a = 22\n")
        assert files.read_text(p) == "a = 22\n"
        with pytest.raises(files.Refused):
            files.read_bytes(p, 3)


# ---- 4. H2O LLM Studio experiment YAML ------------------------------------------------------------

_H2O = """architecture:
    backbone_dtype: {dtype}
    gradient_checkpointing: true
environment:
    gpus:
    - '0'
    - '1'
    mixed_precision: true
    mixed_precision_dtype: bfloat16
    use_deepspeed: {ds}
    deepspeed_method: ZeRO3
llm_backbone: Qwen/Qwen2.5-0.5B
problem_type: text_causal_language_modeling
tokenizer:
    max_length: 1024
    padding_quantile: 1.0
training:
    batch_size: 4
    grad_accumulation: 2
    lora: {lora}
    lora_r: 8
    optimizer: AdamW
"""


def test_h2o_llmstudio_cfg_yaml_through_its_train_script(tmp_path, monkeypatch):
    _write(tmp_path, {"cfg.yaml": _H2O.format(dtype="int4", ds="false", lora="true"),
                      "llm_studio/train.py": "import torch\n"})
    monkeypatch.chdir(tmp_path)
    plan = _plan_of_command(["python", "llm_studio/train.py", "-Y", "cfg.yaml"])
    got = {k: plan.get(k).value for k in ("model_id", "method", "lora_r", "quant_bits", "quant_type", "torch_dtype",
                                           "compute_dtype", "kbit_prep", "per_device_batch", "grad_accum", "max_length",
                                           "padding", "gradient_checkpointing", "optimizer", "precision", "distributed",
                                           "num_gpus", "trainer")}
    assert got == {"model_id": "Qwen/Qwen2.5-0.5B", "method": "qlora", "lora_r": 8, "quant_bits": 4, "quant_type": "nf4",
                   "torch_dtype": "fp16", "compute_dtype": "fp16", "kbit_prep": True, "per_device_batch": 4,
                   "grad_accum": 2, "max_length": 1024, "padding": "longest", "gradient_checkpointing": True,
                   "optimizer": "adamw_torch", "precision": "amp-bf16", "distributed": "none", "num_gpus": 2,
                   "trainer": "custom-loop"}
    assert plan.kind == "h2o-llmstudio"
    assert plan.get("lora_alpha").value == 16 and plan.get("lora_alpha").source == "library-default"


def test_h2o_llmstudio_full_bf16_deepspeed(tmp_path):
    p = _write(tmp_path, {"cfg.yaml": _H2O.format(dtype="bfloat16", ds="true", lora="false")}) / "cfg.yaml"
    plan = extract_file(p)
    assert (plan.get("method").value, plan.get("torch_dtype").value, plan.get("quant_bits").value,
            plan.get("distributed").value) == ("full", "bf16", None, "zero3")
    p8 = _write(tmp_path, {"c8.yaml": _H2O.format(dtype="int8", ds="false", lora="true")}) / "c8.yaml"
    plan8 = extract_file(p8)
    assert (plan8.get("method").value, plan8.get("quant_bits").value) == ("lora", 8)


# ---- 5. catalog gaps met on real files ------------------------------------------------------------


@pytest.mark.parametrize("model_id, params", [
    ("google/gemma-3-270m-it", 268_098_176), ("google/codegemma-7b-it", 8_537_680_896),
    ("Qwen/Qwen2.5-Math-1.5B-Instruct", 1_543_714_304), ("Qwen/Qwen2.5-Math-7B", 7_615_616_512)])
def test_models_met_on_real_files_are_in_the_catalog(model_id, params):
    from memlint.catalog import resolve

    spec = resolve(model_id)
    assert spec.params == params  # counted on the meta device by scripts/gen_catalog.py's count_on_meta


def test_qwen25_math_7b_has_its_own_4k_context():
    from memlint.catalog import entries

    e = entries()["Qwen/Qwen2.5-Math-7B"]
    assert e["config"]["max_position_embeddings"] == 4096 and "Qwen/Qwen2.5-Math-7B" not in entries()["Qwen/Qwen2.5-7B"]["aliases"]
