"""A base checkpoint the catalogue lacks beside its catalogued chat release (or the reverse), of the same organisation:
sized as that sibling and said to be an assumption; a quantized export, a misspelling or another organisation's name is
not a sibling."""

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError


def test_the_base_of_a_catalogued_chat_release_is_sized_as_it():
    spec = resolve("Qwen/Qwen1.5-0.5B")
    assert (spec.id, spec.source, spec.assumed_from) == ("Qwen/Qwen1.5-0.5B-Chat", "named-variant", "Qwen/Qwen1.5-0.5B")


@pytest.mark.parametrize("model", ["Qwen/Qwen1.5-0.5B-Chat-GPTQ-Int4", "meta-llama/Llama-3.1-8b-instrct",
                                   "someone/Qwen1.5-0.5B-chat-hf-lora"])
def test_what_is_not_a_sibling(model):
    try:
        spec = resolve(model)
    except MemlintError:
        return
    assert spec.source != "named-variant"


def test_a_catalogued_id_is_itself():
    assert resolve("Qwen/Qwen1.5-0.5B-Chat").source == "catalog"
