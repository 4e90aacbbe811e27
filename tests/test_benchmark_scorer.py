"""The real-world benchmark's comparison of a label with memlint's field (benchmarks/realworld.py agree()): the
vocabulary it settles, and the misses it must still count."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("realworld_bench", Path(__file__).parents[1] / "benchmarks" / "realworld.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _got(value, source="literal"):
    return {"value": value, "source": source}


def test_transformers_two_names_of_the_8bit_adamw_agree_both_ways():
    assert bench.agree("optimizer", "adamw_8bit", _got("adamw_bnb_8bit"), {})
    assert bench.agree("optimizer", "adamw_bnb_8bit", _got("adamw_8bit"), {})
    assert not bench.agree("optimizer", "paged_adamw_8bit", _got("adamw_8bit"), {})
    assert not bench.agree("optimizer", "adamw_8bit", _got("adamw_torch"), {})


def test_vocabulary_settled_by_the_scorer_and_misses_it_keeps():
    assert bench.agree("distributed", "ddp", _got("none"), {})
    assert not bench.agree("distributed", "zero2", _got("none"), {})
    assert bench.agree("torch_dtype", "unset", _got("fp32", "library-default"), {})
    assert not bench.agree("torch_dtype", "unset", _got("fp32", "literal"), {})
    assert not bench.agree("model_id", "gpt2", None, {})  # nothing read is a miss
    assert bench.agree("model_id", None, _got(None, "unknown"), {})  # unknowable, and said unknown
    assert bench.agree("lora_r", 8, _got(16), {"method": "full"}) is None  # not scored for full fine-tuning
