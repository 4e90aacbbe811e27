import json

import pytest

from memlint.catalog import closest_ids, entries, known_ids, resolve
from memlint.catalog.families import closed_form
from memlint.catalog.local import count_llama_like
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


@pytest.mark.parametrize("model_id", [i for i in sorted(entries()) if closed_form(entries()[i]["model_type"])])
def test_closed_form_counts_equal_the_meta_instantiation(model_id):
    entry = entries()[model_id]
    got = count_llama_like({"model_type": entry["model_type"], **entry["config"]})
    assert got["params"] == entry["params"]
    assert got["groups"] == entry["groups"]
    assert got["linear_modules"] == entry["linear_modules"]


def test_local_directory_with_a_known_config_reuses_the_catalog(tmp_path):
    entry = entries()["Qwen/Qwen2.5-7B"]
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
    entry = entries()["HuggingFaceTB/SmolLM2-135M"]
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

    entry = entries()[model_id]
    got = count_on_meta(entry["model_type"], entry["config"])
    assert got["params"] == entry["params"]
    assert got["groups"] == entry["groups"]


# Published figures the meta-device counts must reproduce. Pythia's model card lists
# non-embedding parameters (total minus embed_in and embed_out); keras-hub's presets list
# the full count of the same-shape checkpoints (Llama 2 7B has LLaMA 7B's shapes).
@pytest.mark.parametrize("model_id,non_embedding", [
    ("EleutherAI/pythia-70m", 18_915_328), ("EleutherAI/pythia-160m", 85_056_000),
    ("EleutherAI/pythia-410m", 302_311_424), ("EleutherAI/pythia-1b", 805_736_448),
])
def test_pythia_counts_match_the_model_cards_non_embedding_figures(model_id, non_embedding):
    spec = resolve(model_id)
    assert spec.params - spec.groups["embeddings"] - spec.groups["lm_head"] == non_embedding


@pytest.mark.parametrize("model_id,params", [
    ("google/gemma-2b", 2_506_172_416),          # keras-hub gemma_2b_en
    ("huggyllama/llama-7b", 6_738_415_616),      # keras-hub llama2_7b_en, same shapes
    ("mistralai/Mistral-7B-Instruct-v0.2", 7_241_732_096),  # keras-hub mistral_0.2_instruct_7b_en
])
def test_counts_match_published_totals(model_id, params):
    assert resolve(model_id).params == params


def test_fine_tunes_resolve_to_their_base_shapes():
    # zephyr and its SFT parent keep Mistral-7B-v0.1's vocabulary; OpenHermes-2.5 adds
    # two ChatML tokens, so it is its own entry: 2 rows × 4096 in embed_tokens and lm_head.
    base = resolve("mistralai/Mistral-7B-v0.1").params
    assert resolve("HuggingFaceH4/zephyr-7b-beta").params == base
    assert resolve("HuggingFaceH4/mistral-7b-sft-beta").params == base
    assert resolve("teknium/OpenHermes-2.5-Mistral-7B").params == base + 2 * 2 * 4096


def test_instruct_v02_is_not_an_alias_of_v01():
    v01, v02 = resolve("mistralai/Mistral-7B-Instruct-v0.1"), resolve("mistralai/Mistral-7B-Instruct-v0.2")
    assert v01.params == v02.params
    # v0.1's config.json leaves rope_theta at MistralConfig's default, 10000.
    assert v01.config.get("rope_theta", 10000.0) == 10000.0 and v02.config["rope_theta"] == 1e6
    assert v01.config["sliding_window"] == 4096 and v02.config["sliding_window"] is None


def test_gemma_1_is_gated_rmsnorm_and_opt_350m_projects_its_embeddings():
    gemma = resolve("google/gemma-2b")
    assert gemma.arch["mlp"] == "gated" and gemma.arch["norm"] == "rmsnorm"
    assert gemma.tied_embeddings and gemma.kv_heads == 1 and gemma.head_dim == 256
    opt = resolve("facebook/opt-350m")
    assert opt.groups["embeddings"] < 50272 * 1024  # 512-wide token embeddings
    assert {"project_in", "project_out"} <= {name.split(".")[-1] for name in (l.name for l in opt.linears)}



def test_new_families_cite_where_their_config_values_were_read():
    families = {"gemma", "phi", "gpt_neo", "gptj", "bloom", "olmo2", "stablelm"}
    cited = [e for e in entries().values() if e["model_type"] in families or e["family"] == "llama-1"]
    assert len(cited) >= 12 and all("huggingface.co" in e.get("ref", "") for e in cited)


@pytest.mark.parametrize("model_id,mlp,norm,tied", [
    ("EleutherAI/gpt-neo-125m", "plain", "layernorm", True),
    ("EleutherAI/gpt-j-6b", "plain", "layernorm", False),
    ("bigscience/bloom-560m", "plain", "layernorm", True),
    ("allenai/OLMo-2-1124-7B", "gated", "rmsnorm", False),
    ("stabilityai/stablelm-2-1_6b", "gated", "layernorm", False),
    ("microsoft/phi-2", "plain", "layernorm", False),
])
def test_architecture_facts_the_activation_model_reads(model_id, mlp, norm, tied):
    spec = resolve(model_id)
    assert (spec.arch["mlp"], spec.arch["norm"], spec.tied_embeddings) == (mlp, norm, tied)
    assert (spec.groups["lm_head"] == 0) == tied


def test_distills_resolve_to_the_shapes_they_were_distilled_into():
    # R1-Distill-Llama-8B and -Qwen-14B keep their bases' configs; -Qwen-1.5B unties the
    # lm_head that Qwen2.5-1.5B ties, so it is its own entry and 233M parameters larger.
    assert resolve("deepseek-ai/DeepSeek-R1-Distill-Llama-8B").params == 8_030_261_248
    assert resolve("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B").params == resolve("Qwen/Qwen2.5-14B").params
    distill, base = resolve("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"), resolve("Qwen/Qwen2.5-1.5B")
    assert distill.params - base.params == 151936 * 1536 and not distill.tied_embeddings


@pytest.mark.parametrize("model_id", sorted(entries()))
def test_family_facts_are_fields_of_each_entry(model_id):
    """The estimator reads a model's family facts off its architecture data (never its model_type):
    every entry carries exactly what families.json says of its family, and each projection its role."""
    from memlint.catalog.families import arch_facts, linear_role

    entry = entries()[model_id]
    facts = arch_facts(entry["model_type"])
    assert {k: entry["arch"][k] for k in facts} == facts
    assert {n: d["role"] for n, d in entry["linear_modules"].items()} == {n: linear_role(n) for n in entry["linear_modules"]}
