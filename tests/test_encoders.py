"""Encoders (issues #14, #15): BERT / RoBERTa / XLM-RoBERTa with the task head the script loads.

Counts against transformers' own head classes, the estimate against `memlint measure`'s fake-tensor trace of a
real step of tiny random-weight models (fp32 and amp-fp16, recompute on and off, eager and SDPA), and the plan
read from a run_glue.py-style and an accelerate nlp_example.py-style script (tests/data/encoders/, synthetic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.catalog.spec import closest_ids, spec_from_entry
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate
from memlint.estimate.model_state import encoder_spec

DATA = Path(__file__).parent / "data" / "encoders"


def tiny(model_type: str, **kw):
    """A tiny encoder counted on the meta device like a catalog entry (random weights at measure time)."""
    pytest.importorskip("transformers")
    from memlint.catalog.meta import count_on_meta

    if model_type == "distilbert":
        cfg = dict(vocab_size=1000, dim=256, n_layers=2, n_heads=4, hidden_dim=1024, max_position_embeddings=512,
                   pad_token_id=0)
    elif model_type == "deberta-v2":  # DeBERTa-v3's attention settings (catalog entries), tiny shapes
        cfg = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=1024, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
                   position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                   position_biased_input=False, max_relative_positions=-1, layer_norm_eps=1e-7, pad_token_id=0)
    else:
        cfg = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=1024, max_position_embeddings=512,
                   type_vocab_size=2 if model_type == "bert" else 1, pad_token_id=0 if model_type == "bert" else 1)
    cfg.update(kw)
    entry = count_on_meta(model_type, cfg)
    entry.update(model_type=model_type, config=cfg)
    return spec_from_entry(f"tiny-{model_type}", entry)


# ----------------------------------------------------------------------------------------------- counts

@pytest.mark.parametrize("head, cls", [("sequence-classification", "ForSequenceClassification"),
                                       ("token-classification", "ForTokenClassification"),
                                       ("masked-lm", "ForMaskedLM")])
@pytest.mark.parametrize("model_type, prefix", [("bert", "Bert"), ("roberta", "Roberta"), ("distilbert", "DistilBert"),
                                                ("deberta-v2", "DebertaV2")])
def test_head_counts_are_the_head_classes(model_type, prefix, head, cls):
    torch = pytest.importorskip("torch")
    import transformers

    m = tiny(model_type)
    config = getattr(transformers, f"{prefix}Config")(**dict(m.config), num_labels=7)
    with torch.device("meta"):
        model = getattr(transformers, f"{prefix}{cls}")(config)
    assert encoder_spec(m, head, 7).params == sum(p.numel() for p in model.parameters())


def test_catalog_encoders_and_their_published_sizes():
    # bert-base-uncased with its pooler: 109,482,240 (the BertModel count everyone quotes); roberta-base 124,645,632
    base = resolve("bert-base-uncased")
    assert base.arch["encoder"] and base.id == "bert-base-uncased"
    assert base.params + base.task_heads["sequence-classification"]["fixed"] - 0 == 109_482_240
    assert resolve("roberta-base").params + 768 * 768 + 768 == 124_645_632
    for mid in ("bert-base-cased", "bert-large-uncased", "bert-large-cased", "bert-base-multilingual-cased",
                "roberta-large", "xlm-roberta-base", "xlm-roberta-large"):
        assert resolve(mid).arch["encoder"]
    assert not resolve("HuggingFaceTB/SmolLM2-135M").arch.get("encoder")  # decoders unchanged


def test_head_choice_and_validation():
    m = resolve("bert-large-uncased")
    s = Setup(m, dtype="fp32", precision="fp32")
    assert s.head == "sequence-classification" and s.num_labels == 2
    assert estimate(s).trainable_params == 335_143_938  # BertForSequenceClassification, 2 labels
    assert estimate(s.with_(task_head="token-classification", num_labels=9)).trainable_params == m.params + 9 * 1025
    with pytest.raises(MemlintError, match="is an encoder"):
        Setup(m, task_head="causal-lm")
    with pytest.raises(MemlintError, match="QLoRA on an encoder"):
        Setup(m, method="qlora")
    with pytest.raises(MemlintError, match="is a decoder"):
        Setup(resolve("HuggingFaceTB/SmolLM2-135M"), task_head="masked-lm")
    with pytest.raises(MemlintError, match="--num-labels"):
        Setup(m, num_labels=0)


def test_classification_logits_are_not_vocabulary_sized():
    m = resolve("bert-large-uncased")
    s = Setup(m, dtype="fp32", precision="fp32", batch=4, seq=512)
    seq_cls = estimate(s).bytes("logits")
    mlm = estimate(s.with_(task_head="masked-lm")).bytes("logits")
    assert seq_cls < 1 << 20  # b x labels and the first token's b x h head tensors
    assert mlm > 4 * 512 * 30522 * 8  # s·b·V logits and their log-softmax, fp32


# ----------------------------------------------------------------------------------------------- trace

MATRIX = [(p, r, a) for p in ("fp32", "amp-fp16") for r in (False, True) for a in ("sdpa", "eager")]


@pytest.mark.parametrize("precision, recompute, attn", MATRIX)
@pytest.mark.parametrize("model_type, head", [("bert", "sequence-classification"), ("roberta", "token-classification")])
def test_estimate_against_the_trace(model_type, head, precision, recompute, attn):
    """The allocated peak within 1 % of the traced step's, the forward phase within 2.5 %; backward within 3.5 %
    without recompute, an upper bound under recompute (the end-of-backward term counts every gradient beside a
    recomputed layer)."""
    pytest.importorskip("torch")
    from memlint.measure import measure

    s = Setup(tiny(model_type), method="full", dtype="fp32", precision=precision, recompute=recompute, attn=attn,
              batch=2, seq=128, optim="adamw_torch", task_head=head, num_labels=5)
    e = estimate(s)
    r = measure(s, device="trace")
    got = r.steps[-1].phases
    assert e.allocated_peak == pytest.approx(r.measured_peak, rel=0.01)
    assert e.phases["forward"] == pytest.approx(got["forward"], rel=0.025)
    if recompute:
        assert got["backward"] * 0.99 <= e.phases["backward"] <= got["backward"] * 1.15
    else:
        assert e.phases["backward"] == pytest.approx(got["backward"], rel=0.035)


@pytest.mark.parametrize("model_type, head, attn", [("bert", "sequence-classification", "sdpa"),
                                                    ("bert", "masked-lm", "eager"),
                                                    ("roberta", "token-classification", "eager")])
def test_saved_activations_term_by_term(model_type, head, attn):
    """fp32, activation-heavy: the activations saved when forward reaches the head are the estimate's, to the
    byte up to the position ids RoBERTa derives from input_ids (a few KB), and the head's logits."""
    pytest.importorskip("torch")
    from memlint.measure import measure

    s = Setup(tiny(model_type, hidden_size=128, intermediate_size=512), method="full", dtype="fp32",
              precision="fp32", attn=attn, batch=4, seq=256, optim="adamw_torch", task_head=head)
    e = estimate(s)
    r = measure(s, device="trace")
    assert e.bytes("activations") == pytest.approx(r.components["activations"], rel=0.001)
    if head != "sequence-classification":
        assert e.bytes("logits") == pytest.approx(r.components["logits"], rel=0.01)
    assert e.allocated_peak == pytest.approx(r.measured_peak, rel=0.01)


# ----------------------------------------------------------------------------------------------- plans

def test_run_glue_style_script():
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    plan = extract_file(DATA / "run_glue_style.py")
    f = plan.fields
    assert f["model_id"].value == "bert-base-cased"
    assert f["task_head"].value == "sequence-classification" and f["task_head"].source == "literal"
    assert f["num_labels"].value == 2 and f["num_labels"].source == "literal"  # AutoConfig(num_labels=2)
    assert f["max_length"].value == 128 and f["padding"].value == "max_length"
    s = setup_from_plan(plan).setup
    assert s.encoder and s.head == "sequence-classification" and s.num_labels == 2 and s.seq == 128


def test_accelerate_nlp_example_style_script():
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    plan = extract_file(DATA / "nlp_example_style.py")
    f = plan.fields
    assert f["model_id"].value == "bert-base-cased" and f["task_head"].value == "sequence-classification"
    assert f["num_labels"].source == "library-default" and f["num_labels"].value == 2
    assert f["precision"].value == "amp-fp16" and f["per_device_batch"].value == 32
    s = setup_from_plan(plan).setup
    assert (s.head, s.precision, s.batch, s.seq) == ("sequence-classification", "amp-fp16", 32, 128)


def test_token_classification_class_and_num_labels_keyword():
    from memlint.extract import extract_source

    src = '''from transformers import BertForTokenClassification, Trainer, TrainingArguments
model = BertForTokenClassification.from_pretrained("bert-base-cased", num_labels=9)
Trainer(model=model, args=TrainingArguments("o"), train_dataset=ds).train()
'''
    f = extract_source(src, "train.py").fields
    assert f["task_head"].value == "token-classification" and f["num_labels"].value == 9
    causal = extract_source(src.replace("BertForTokenClassification", "AutoModelForCausalLM")
                            .replace(', num_labels=9', ''), "train.py").fields
    assert causal["task_head"].value == "causal-lm" and "num_labels" not in causal


def test_unknown_model_suggestions_are_close_names():
    assert "bert-base-uncased" in closest_ids("bert-base-uncase")
    # another family's similar string is no suggestion (bert-base-uncased used to get databricks/dbrx-base)
    assert closest_ids("electra-base-discriminator") == [] and closest_ids("google/pegasus-large") == []
    assert closest_ids("llama-3.1-8b")[:2] == ["unsloth/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"]


def test_real_cpu_tensors_run_the_encoder_step():
    """device="cpu" (real tensors): the CPU SDPA refuses dropout in its flash kernel, so the math path runs
    (no stand-in); the step completes and counts the head's parameters."""
    pytest.importorskip("torch")
    from memlint.measure import measure

    m = tiny("bert", hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2)
    s = Setup(m, dtype="fp32", precision="fp32", batch=1, seq=32, optim="adamw_torch", num_labels=3)
    r = measure(s, device="cpu", steps=1)
    assert r.details["trainable_params"] == encoder_spec(m, "sequence-classification", 3).params
