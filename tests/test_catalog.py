import json

import pytest

from memlint.catalog import closest_ids, entries, known_ids, resolve
from memlint.catalog.families import closed_form
from memlint.catalog.local import count_llama_like
from memlint.errors import MemlintError

from conftest import needs_torch


def test_catalog_covers_150_models_across_forty_families():
    fams = {resolve(i).family.split("-")[0] for i in known_ids()}
    assert len(known_ids()) >= 150
    assert len(fams) >= 40


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
                                      "EleutherAI/pythia-160m", "google/gemma-2-2b", "Qwen/Qwen-7B",
                                      "THUDM/chatglm-6b", "bigcode/starcoderbase-1b"])
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
    # A remote-code family carries the facts and roles of the transformers family it is counted as,
    # each real projection the role of the transformers projections it fuses (catalog/remote.py).
    facts = arch_facts(entry.get("counted_as", entry["model_type"]))
    assert {k: entry["arch"][k] for k in facts} == facts
    parts = entry.get("module_names", {})
    assert {n: d["role"] for n, d in entry["linear_modules"].items()} == {
        n: linear_role(parts.get(n, [n])[0]) for n in entry["linear_modules"]}


# Published totals the counts must reproduce. calflops' README (github.com/MrYxJ/calculate-flops.pytorch,
# "Large Language Model" table, Params(Total) column) lists the counts of the loaded checkpoints, the
# remote-code ones among them; BLOOM-7B1's model card gives its total and its embedding parameters.
@pytest.mark.parametrize("model_id,params", [
    ("bigscience/bloom-7b1", 7_069_016_064), ("bigscience/bloom-1b7", 1_722_408_960),
    ("Qwen/Qwen-7B", 7_721_324_544), ("THUDM/chatglm2-6b", 6_243_584_000),
    ("THUDM/chatglm-6b", 6_173_286_400), ("baichuan-inc/Baichuan-7B", 7_000_559_616),
])
def test_new_entries_match_published_totals(model_id, params):
    assert resolve(model_id).params == params


def test_bloom_7b1_embeddings_and_yi_6b_match_their_published_figures():
    assert resolve("bigscience/bloom-7b1").groups["embeddings"] == 1_027_604_480  # model card
    assert round(resolve("01-ai/Yi-6B").params / 1e9, 3) == 6.061  # Open LLM Leaderboard's request file
    dbrx = resolve("databricks/dbrx-instruct")  # model card: 132B total, 16 experts, 4 chosen
    assert round(dbrx.params / 1e9) == 132 and (dbrx.arch["num_experts"], dbrx.arch["experts_per_token"]) == (16, 4)


@pytest.mark.parametrize("model_id,names", [
    ("Qwen/Qwen-7B", {"attn.c_attn": (4096, 3 * 4096, True), "attn.c_proj": (4096, 4096, False),
                      "mlp.w1": (4096, 11008, False), "mlp.w2": (4096, 11008, False), "mlp.c_proj": (11008, 4096, False)}),
    ("baichuan-inc/Baichuan2-7B-Base", {"self_attn.W_pack": (4096, 3 * 4096, False), "self_attn.o_proj": (4096, 4096, False),
                                        "mlp.gate_proj": (4096, 11008, False), "mlp.up_proj": (4096, 11008, False),
                                        "mlp.down_proj": (11008, 4096, False)}),
    ("THUDM/chatglm2-6b", {"self_attention.query_key_value": (4096, 4096 + 2 * 2 * 128, True),
                           "self_attention.dense": (4096, 4096, False), "mlp.dense_h_to_4h": (4096, 2 * 13696, False),
                           "mlp.dense_4h_to_h": (13696, 4096, False)}),
    ("THUDM/chatglm-6b", {"attention.query_key_value": (4096, 3 * 4096, True), "attention.dense": (4096, 4096, True),
                          "mlp.dense_h_to_4h": (4096, 16384, True), "mlp.dense_4h_to_h": (16384, 4096, True)}),
    ("internlm/internlm2-chat-7b", {"attention.wqkv": (4096, 4096 + 2 * 8 * 128, False), "attention.wo": (4096, 4096, False),
                                    "feed_forward.w1": (4096, 14336, False), "feed_forward.w3": (4096, 14336, False),
                                    "feed_forward.w2": (14336, 4096, False)}),
])
def test_remote_code_models_keep_their_real_linear_names(model_id, names):
    spec = resolve(model_id)
    assert spec.counted_as is not None
    assert {l.name: (l.in_features, l.out_features, l.bias) for l in spec.layer_linears()} == names


def test_remote_code_roles_follow_what_each_projection_reads():
    # Qwen's mlp.w2 is the gate (w1(x) * silu(w2(x))): it reads the normed residual, unlike a Mixtral w2.
    roles = {l.name: l.role for l in resolve("Qwen/Qwen-7B").linears}
    assert roles == {"attn.c_attn": "attn_in", "attn.c_proj": "attn_out", "mlp.w1": "mlp_in", "mlp.w2": "mlp_in",
                     "mlp.c_proj": "mlp_out", "lm_head": "head"}
    assert {l.name: l.role for l in resolve("internlm/internlm2-chat-7b").layer_linears()}["feed_forward.w2"] == "mlp_out"


@pytest.mark.parametrize("model_id,targets,hit", [
    ("baichuan-inc/Baichuan2-13B-Base", ("W_pack",), "self_attn.W_pack"),
    ("Qwen/Qwen-7B-Chat", ("c_attn",), "attn.c_attn"),
    ("THUDM/chatglm3-6b", ("query_key_value",), "self_attention.query_key_value"),
    ("internlm/internlm2-7b", ("wqkv",), "attention.wqkv"),
    ("mosaicml/mpt-7b", ("Wqkv",), "attn.Wqkv"),
    ("bigcode/starcoderbase-1b", ("c_attn",), "attn.c_attn"),
])
def test_lora_targets_in_real_scripts_hit_the_fused_projections(model_id, targets, hit):
    from memlint.estimate.model_state import lora_modules, lora_params

    spec = resolve(model_id)
    mods = lora_modules(spec, targets)
    assert [m.name for m in mods] == [hit]
    m = mods[0]
    assert lora_params(spec, 8, targets) == 8 * (m.in_features + m.out_features) * spec.layers


def test_peft_default_targets_follow_the_remote_model_type():
    from memlint.library.defaults import lora_default_targets

    assert resolve("THUDM/chatglm2-6b").model_type == "chatglm"
    assert lora_default_targets("chatglm").value == ("query_key_value",)
    assert lora_default_targets("qwen") is None  # peft has no default for Qwen v1: it raises


@pytest.mark.parametrize("alias,canonical", [
    ("lmsys/vicuna-7b-v1.5", "meta-llama/Llama-2-7b-hf"), ("lmsys/vicuna-13b-v1.5", "meta-llama/Llama-2-13b-hf"),
    ("PY007/TinyLlama-1.1B-intermediate-step-240k-503b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    ("01-ai/Yi-6B-Chat", "01-ai/Yi-6B"), ("Qwen/Qwen-7B-Chat", "Qwen/Qwen-7B"), ("bigcode/starcoder", "bigcode/starcoderbase"),
    ("THUDM/chatglm3-6b", "THUDM/chatglm3-6b-32k"), ("baichuan-inc/Baichuan2-7B-Chat", "baichuan-inc/Baichuan2-7B-Base"),
    ("internlm/internlm2-7b", "internlm/internlm2-chat-7b"), ("mosaicml/mpt-7b-instruct", "mosaicml/mpt-7b"),
])
def test_new_aliases_resolve_to_their_canonical_counts(alias, canonical):
    spec = resolve(alias)
    assert spec.id == alias and spec.params == resolve(canonical).params


@pytest.mark.parametrize("model_id", [i for i in sorted(entries()) if entries()[i].get("counted_as")
                                      and closed_form(entries()[i]["counted_as"])])
def test_remote_code_closed_form_equals_the_meta_instantiation(model_id):
    from memlint.catalog.local import count_remote

    entry = entries()[model_id]
    got = count_remote({"model_type": entry["model_type"], **entry["config"]})
    assert (got["params"], got["groups"], got["linear_modules"]) == (entry["params"], entry["groups"], entry["linear_modules"])


def test_local_remote_code_configs_are_counted_without_running_their_code(tmp_path):
    entry = entries()["THUDM/chatglm2-6b"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "chatglm", **entry["config"]}))
    assert resolve(str(tmp_path)).params == entry["params"]  # the catalog's shapes
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "chatglm", **entry["config"], "num_layers": 2}))
    small = resolve(str(tmp_path))
    assert small.layers == 2 and small.counted_as == "qwen2" and small.model_type == "chatglm"
    assert "self_attention.query_key_value" in {l.name for l in small.linears}
    # InternLM2's first configs kept InternLM's model_type; their architecture says which code runs.
    il2 = entries()["internlm/internlm2-chat-7b"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "internlm", "architectures": ["InternLM2ForCausalLM"],
                                                      **il2["config"]}))
    spec = resolve(str(tmp_path))
    assert spec.params == il2["params"] and spec.model_type == "internlm2"


def test_a_remote_config_that_maps_inexactly_is_refused(tmp_path):
    cfg = {**entries()["Qwen/Qwen-7B"]["config"], "model_type": "qwen", "kv_channels": 64}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MemlintError, match="kv_channels"):
        resolve(str(tmp_path))


def test_entries_added_for_real_scripts_cite_their_configs():
    new_types = {"gpt_bigcode", "starcoder2", "mpt", "dbrx", "qwen", "chatglm", "baichuan", "internlm2", "olmo"}
    cited = [e for i, e in entries().items() if e["model_type"] in new_types or i.startswith(("01-ai/", "lmsys/", "bigscience/bloom-"))]
    assert len(cited) >= 30 and all("huggingface.co" in e.get("ref", "") for e in cited)
    # Only the first catalog's entries (copied from the official repositories) go without a link.
    assert sum("huggingface.co" in e.get("ref", "") for e in entries().values()) >= 104


def test_new_families_carry_their_shape_facts():
    olmo = resolve("allenai/OLMo-1B-hf")  # OLMo's LayerNorm has no parameters
    assert olmo.groups["norms"] == 0 and olmo.tied_embeddings and olmo.arch["mlp"] == "gated"
    mix = resolve("mistralai/Mixtral-8x22B-v0.1")
    assert mix.groups["experts"] == 56 * 8 * 3 * 6144 * 16384 and mix.arch["experts_per_token"] == 2
    assert resolve("mistralai/Mixtral-8x22B-Instruct-v0.1").vocab == 32768
    mpt = resolve("mosaicml/mpt-7b")
    assert (mpt.intermediate, mpt.tied_embeddings, mpt.arch["max_position_embeddings"]) == (4 * 4096, True, 2048)
    assert resolve("bigcode/starcoderbase-1b").kv_heads == 1  # multi-query attention
    assert resolve("databricks/dbrx-instruct").intermediate == 10752


@needs_torch
def test_family_tie_defaults_are_transformers_defaults():
    from transformers import AutoConfig

    from memlint.catalog.families import _doc, family

    for mt in _doc()["families"]:
        cfg = AutoConfig.for_model(mt)
        # a composite config without its own attribute (Mllama's): its text config's
        tie = getattr(cfg, "tie_word_embeddings", None)
        tie = cfg.get_text_config().tie_word_embeddings if tie is None else tie
        assert family(mt)["tie_word_embeddings"] == tie, mt
