"""The config formats register themselves (configs/registry.py): a Reader subclass with a `kind` and `matches`
is found without a list, the most specific format wins when a file carries markers of several, and a second
reader claiming a taken kind is refused rather than silently shadowing the first."""

from __future__ import annotations

import pytest

from memlint.extract import configs
from memlint.extract.configs import registry
from memlint.extract.configs.common import Reader


def test_every_format_module_registers_a_reader():
    kinds = registry.names()
    assert len(kinds) == len(set(kinds)) >= 14
    for kind in ("axolotl", "llama-factory", "torchtune", "deepspeed", "accelerate", "litgpt", "nemo", "torchtitan"):
        assert kind in kinds, kinds
    assert set(registry.launcher_kinds()) == {"deepspeed", "accelerate"}
    assert tuple(configs.FORMATS) == kinds


def test_the_most_specific_format_wins():
    # an accelerate config that embeds a DeepSpeed block is accelerate's
    assert configs.detect({"distributed_type", "deepspeed_config", "zero_optimization"}) == "accelerate"
    assert configs.detect({"zero_optimization", "train_micro_batch_size_per_gpu"}) == "deepspeed"
    assert configs.detect({"base_model", "adapter", "sequence_len"}) == "axolotl"
    assert configs.detect({"unrelated", "keys"}) is None


def test_a_broken_file_is_placed_by_its_name():
    assert configs.detect(set(), name="deepspeed_z3.json") == "deepspeed"


def test_a_new_reader_registers_itself_and_a_clash_is_refused():
    made: list[type[Reader]] = []
    registry.formats.cache_clear()
    try:
        class Toy(Reader):
            kind = "toy-format-for-test"
            rank = 1000

            @staticmethod
            def matches(keys, text):
                return "toy_marker" in keys

        made.append(Toy)
        assert registry.detect({"toy_marker", "base_model", "adapter"}) == "toy-format-for-test"
        registry.formats.cache_clear()

        class Clash(Reader):
            kind = "axolotl"

            @staticmethod
            def matches(keys, text):
                return False

        made.append(Clash)
        with pytest.raises(RuntimeError, match="two config formats named 'axolotl'"):
            registry.formats()
    finally:
        for cls in made:  # unregister: subclasses stay in the class tree, and an empty kind is skipped
            cls.kind = ""
        registry.formats.cache_clear()
    assert "toy-format-for-test" not in registry.names()
