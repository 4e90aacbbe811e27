"""One declaration per plan field (plan/fields.py): the plan, --assume, the worst case, the estimate flags, the
JSON Schema and the docs table all come from it, and estimate can describe every run plan can size."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.errors import MemlintError
from memlint.estimate.from_plan import apply_assumptions
from memlint.plan import PLAN_FIELDS, TrainingPlan
from memlint.plan import fields as F

ROOT = Path(__file__).resolve().parent.parent


def test_each_field_is_declared_once_in_a_known_group_and_kind():
    names = [f.name for f in F.FIELDS]
    assert len(names) == len(set(names)) and tuple(names) == PLAN_FIELDS
    assert all(f.group in F.GROUPS and f.kind in F.KINDS for f in F.FIELDS)
    assert all(f.worst in (None, "max", "min", "first", "last") for f in F.FIELDS)


def test_no_name_means_two_fields():
    seen: dict[str, str] = {}
    for f in F.FIELDS:
        for alias in (*f.assume, *f.hf):
            assert alias not in PLAN_FIELDS or alias == f.name, f"{alias} is a field of its own"
            assert seen.setdefault(alias, f.name) == f.name, f"{alias}: {seen[alias]} and {f.name}"


@pytest.mark.parametrize("given, field, value", [
    ("per_device_train_batch_size=4", "per_device_batch", 4),
    ("gradient_accumulation_steps=8", "grad_accum", 8),
    ("model_name_or_path=Qwen/Qwen2.5-0.5B", "model_id", "Qwen/Qwen2.5-0.5B"),
    ("max_seq_length=4096", "max_length", 4096),
    ("seq=1024", "max_length", 1024),
    ("r=32", "lora_r", 32),
    ("target_modules=q_proj,v_proj", "lora_targets", ["q_proj", "v_proj"]),
])
def test_assume_takes_the_hugging_face_argument_names(given, field, value):
    plan, _ = apply_assumptions(TrainingPlan("t.py"), [given])
    assert plan.get(field).value == value and plan.get(field).source == "assumed"


def test_a_misspelt_assumption_names_the_closest_field_not_every_field():
    with pytest.raises(MemlintError) as err:
        apply_assumptions(TrainingPlan("t.py"), ["per_device_batchsize=2"])
    msg = str(err.value)
    assert "did you mean per_device_batch?" in msg and "lora_modules_to_save" not in msg
    with pytest.raises(MemlintError) as err:
        apply_assumptions(TrainingPlan("t.py"), ["gradient_acumulation_steps=2"])
    assert "did you mean gradient_accumulation_steps (grad_accum)?" in str(err.value)


@pytest.mark.parametrize("name, cands, worst", [
    ("per_device_batch", [2, 8, 4], 8),
    ("gradient_checkpointing", [True, False], False),
    ("tp_size", [8, 2], 2),  # the fewest ranks splitting the model
    ("fused_loss", ["liger", False], False),
    ("fused_loss", ["liger"], "liger"),
    ("model_id", ["a", "b"], "b"),
    ("ref_model", ["copy", "none"], "copy"),
    ("tp_size", ["world", 2], 2),  # "world" (every rank) is never fewer than 2 here: the number is taken
])
def test_the_worst_case_follows_the_declared_order(name, cands, worst):
    got = F.worst(name, cands)
    assert got == worst or (name == "tp_size" and cands[0] == "world" and got in (2, "world"))


def test_every_setup_field_has_an_estimate_flag():
    """`estimate` can describe every run `plan` can size: each Setup attribute is set by a declared flag or by
    estimate's own conversion of a custom flag (listed here: adding a Setup field without a flag fails)."""
    from memlint.estimate.setup import Setup

    declared = {f.flag.dest for f in F.FIELDS if f.flag is not None and f.flag.dest}
    custom = {"model", "precision", "images", "image_size", "quant", "quant_group_size", "quant_bits",
              "lora_targets", "modules_to_save", "peft_task_type", "attn", "shard", "nodes", "kbit_prep",
              "recompute_policy", "galore_targets", "objective", "trl_version", "task_head", "loss_parallel",
              "model_code", "litgpt_version", "trl_sft", "compiled_layers", "trainer_optimizer",
              "logps_framework"}
    missing = {f.name for f in dataclasses.fields(Setup)} - declared - custom
    assert not missing, f"Setup fields no estimate flag sets: {sorted(missing)} (declare a Flag in plan/fields.py)"


def test_a_declared_flag_reaches_the_setup():
    from memlint.cli import build_parser
    from memlint.commands.estimate import setup_from_args

    args = build_parser().parse_args(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora",
                                      "--adapter-dtype", "bf16", "--batch", "3", "--tp", "1"])
    s = setup_from_args(args)
    assert (s.adapter_dtype, s.batch, s.method) == ("bf16", 3, "lora")
    bad = build_parser().parse_args(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--adapter-dtype", "bf16"])
    with pytest.raises(MemlintError, match="adapter-dtype"):
        setup_from_args(bad)


def test_the_adapter_dtype_flag_moves_the_estimate():
    from memlint.cli import build_parser
    from memlint.commands.estimate import setup_from_args
    from memlint.estimate import estimate

    def peak(*extra: str) -> int:
        argv = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--dtype", "bf16",
                "--precision", "pure-bf16", *extra]
        return estimate(setup_from_args(build_parser().parse_args(argv)), "real").peak

    assert peak("--adapter-dtype", "fp32") > peak("--adapter-dtype", "bf16")


def test_plan_json_matches_its_schema_for_every_fixture():
    jsonschema = pytest.importorskip("jsonschema")
    from memlint.extract import extract_file
    from memlint.extract.__main__ import fixture_configs, fixture_scripts

    schema = F.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    fixtures = ROOT / "fixtures"
    for path in fixture_scripts(fixtures) + fixture_configs(fixtures):
        jsonschema.validate(extract_file(path).to_json(), schema)


def test_the_docs_table_is_generated_from_the_declarations():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_plan_docs.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    text = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in text for name in PLAN_FIELDS)


def test_plan_fields_lists_the_names_assume_takes(capsys):
    from memlint.cli import main

    assert main(["plan", "--fields"]) == 0
    out = capsys.readouterr().out
    assert "per_device_batch " in out and "--adapter-dtype" in out  # whole in their columns
    assert "per_device_train_batch_size" in "".join(out.split())  # folded in a narrow terminal
