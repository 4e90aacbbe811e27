import json

import pytest

from memlint.catalog import _catalog, closest_ids, known_ids, resolve
from memlint.catalog.local import LLAMA_LIKE, count_llama_like
from memlint.errors import MemlintError

from conftest import needs_torch


def test_catalog_covers_forty_models_across_twelve_families():
    fams = {resolve(i).family.split("-")[0] for i in known_ids()}
    assert len(known_ids()) >= 40
    assert len(fams) >= 12


def test_llama_31_8b_has_the_exact_parameter_count():
    spec = resolve("meta-llama/Llama-3.1-8B")
    assert spec.params == 8_030_261_248
    assert spec.quantizable_params == 6_979_321_856
    assert not spec.tied_embeddings


@pytest.mark.parametrize("alias", ["meta-llama/Llama-3.1-8B-Instruct", "NousResearch/Meta-Llama-3.1-8B",
                                   "META-LLAMA/LLAMA-3.1-8B"])
def test_aliases_resolve_to_the_same_counts(alias):
    assert resolve(alias).params == 8_030_261_248


def test_tied_embeddings_are_counted_once():
    qwen = resolve("Qwen/Qwen2.5-0.5B")
    assert qwen.tied_embeddings and qwen.groups["lm_head"] == 0
    assert qwen.params == 494_032_768


def test_moe_experts_are_their_own_group():
    mix = resolve("mistralai/Mixtral-8x7B-v0.1")
    assert mix.params == 46_702_792_704
    assert mix.groups["experts"] == 32 * 8 * 3 * 4096 * 14336


def test_unknown_id_names_the_closest_known_ids():
    with pytest.raises(MemlintError, match="closest known: .*Llama-3.1-8B"):
        resolve("meta-llama/Llama-3.1-8b-instrct")
    assert closest_ids("qwen2.5-7b")


@pytest.mark.parametrize("model_id", [i for i in sorted(_catalog()) if _catalog()[i]["model_type"] in LLAMA_LIKE])
def test_closed_form_counts_equal_the_meta_instantiation(model_id):
    entry = _catalog()[model_id]
    got = count_llama_like({"model_type": entry["model_type"], **entry["config"]})
    assert got["params"] == entry["params"]
    assert got["groups"] == entry["groups"]
    assert got["linear_modules"] == entry["linear_modules"]


def test_local_directory_with_a_known_config_reuses_the_catalog(tmp_path):
    entry = _catalog()["Qwen/Qwen2.5-7B"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", **entry["config"]}))
    spec = resolve(str(tmp_path))
    assert spec.params == entry["params"] and spec.source == "local" and spec.id == str(tmp_path)


def test_local_directory_with_a_new_shape_is_counted_in_closed_form(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = resolve(str(tmp_path))
    per_layer = 256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 512 + 2 * 256
    assert spec.params == 3 * per_layer + 256 + 2 * 1000 * 256


def test_hf_cache_is_read_offline(tmp_path, monkeypatch):
    entry = _catalog()["HuggingFaceTB/SmolLM2-135M"]
    snap = tmp_path / "models--acme--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "llama", **entry["config"]}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    spec = resolve("acme/tiny")
    assert spec.source == "hf-cache" and spec.params == entry["params"]


@pytest.mark.parametrize("content,msg", [(b"{not json", "broken config.json"), (b"\xff\xfe\x00", "not UTF-8"),
                                         (b"{}", "no model_type")])
def test_broken_config_is_one_clear_error(tmp_path, content, msg):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(MemlintError, match=msg):
        resolve(str(tmp_path))


def test_directory_without_config_is_an_error(tmp_path):
    with pytest.raises(MemlintError, match="no config.json"):
        resolve(str(tmp_path))


@needs_torch
@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-0.5B", "openai-community/gpt2",
                                      "EleutherAI/pythia-160m", "google/gemma-2-2b"])
def test_catalog_entries_rederive_with_transformers(model_id):
    from memlint.catalog.meta import count_on_meta

    entry = _catalog()[model_id]
    got = count_on_meta(entry["model_type"], entry["config"])
    assert got["params"] == entry["params"]
    assert got["groups"] == entry["groups"]
