"""More encoders (issue #15): DistilBERT and DeBERTa-v3 with their task heads, and LoRA on encoders.

Counts against transformers' own classes built on the meta device and the published DeBERTa-v3 sizes; peft's
defaults (target modules, the classifier SEQ_CLS adds to modules_to_save) against the installed peft's own code;
the estimate against `memlint measure`'s fake-tensor trace of a real step of tiny random-weight models (full
fine-tune and LoRA, fp32 and amp-fp16; DeBERTa's attention is eager)."""

from __future__ import annotations

import pytest

from memlint.catalog import resolve
from memlint.errors import MemlintError
from memlint.estimate import Setup, estimate

from test_encoders import tiny  # noqa: E402  (one tiny-model builder for every encoder family; head counts there)

TARGETS = {"distilbert": ("q_lin", "v_lin"), "deberta-v2": ("query_proj", "value_proj")}


# ----------------------------------------------------------------------------------------------- counts

def test_catalog_counts_and_published_sizes():
    # keras-team/keras-hub keras_nlp/src/models/deberta_v3/deberta_v3_presets.py: the backbones' params
    published = {"microsoft/deberta-v3-xsmall": 70_682_112, "microsoft/deberta-v3-small": 141_304_320,
                 "microsoft/deberta-v3-base": 183_831_552, "microsoft/deberta-v3-large": 434_012_160}
    for mid, n in published.items():
        m = resolve(mid)
        assert m.arch["encoder"] and m.model_type == "deberta-v2" and m.params == n
    assert resolve("distilbert-base-uncased").params == 66_362_880  # DistilBertModel, the "66M"
    for mid in ("distilbert-base-cased", "distilbert-base-multilingual-cased", "deberta-v3-base"):
        assert resolve(mid).arch["encoder"]
    # DistilBERT's sequence head: pre_classifier (h x h + h) and classifier
    seq = resolve("distilbert-base-uncased").task_heads["sequence-classification"]
    assert set(seq["linears"]) == {"pre_classifier", "classifier"} and seq["fixed"] == 768 * 768 + 768


def test_catalog_entries_are_what_transformers_builds():
    """The bundled entries equal a fresh meta-device count of their configs (transformers' own classes)."""
    pytest.importorskip("transformers")
    from memlint.catalog.meta import count_on_meta

    for mid in ("distilbert/distilbert-base-multilingual-cased", "microsoft/deberta-v3-small"):
        m = resolve(mid)
        fresh = count_on_meta(m.model_type, dict(m.config))
        assert fresh["params"] == m.params and fresh["heads"] == dict(m.task_heads)


# ----------------------------------------------------------------------------------------------- peft facts

def test_peft_defaults_are_peft_s_own():
    """The data tables hold what the installed peft does: its default LoRA targets per model type (none for
    DistilBERT: peft asks for target_modules) and the classifier names SEQ_CLS / TOKEN_CLS save."""
    pytest.importorskip("peft")
    import inspect

    from peft import peft_model
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_map

    from memlint.library.defaults import lora_default_targets, peft_task_modules_to_save

    for mt in ("bert", "roberta", "xlm-roberta", "deberta-v2"):
        assert lora_default_targets(mt).value == tuple(peft_map[mt])
    assert "distilbert" not in peft_map and lora_default_targets("distilbert") is None
    for cls, task in ((peft_model.PeftModelForSequenceClassification, "SEQ_CLS"),
                      (peft_model.PeftModelForTokenClassification, "TOKEN_CLS")):
        src = inspect.getsource(cls.__init__)
        names = peft_task_modules_to_save(task)
        assert f"classifier_module_names = {list(names)!r}".replace("'", '"') in src.replace("'", '"')


@pytest.mark.parametrize("model_type", ["distilbert", "deberta-v2"])
def test_lora_trainable_params_are_peft_s(model_type):
    """peft's own model (SEQ_CLS) trains the adapters and copies of the classifier modules; DistilBERT's
    pre_classifier ends with "classifier", so peft copies it too."""
    pytest.importorskip("peft")
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    m = tiny(model_type)
    s = Setup(m, method="lora", lora_r=8, lora_targets=TARGETS[model_type], dtype="fp32", precision="fp32",
              num_labels=3)
    cfg = transformers.AutoConfig.for_model(model_type, **dict(m.config), num_labels=3)
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(cfg)
    peft = get_peft_model(model, LoraConfig(r=8, target_modules=list(TARGETS[model_type]), task_type="SEQ_CLS"))
    real = sum(p.numel() for p in peft.parameters() if p.requires_grad)
    assert estimate(s).trainable_params == real
    copies = 256 * 3 + 3 + (256 * 256 + 256 if model_type == "distilbert" else 0)
    assert real == 2 * 2 * 8 * (256 + 256) + copies


def test_validation():
    m = resolve("microsoft/deberta-v3-base")
    with pytest.raises(MemlintError, match="QLoRA on an encoder"):
        Setup(m, method="qlora")
    with pytest.raises(MemlintError, match="classification heads"):
        Setup(m, method="lora", task_head="masked-lm")
    with pytest.raises(MemlintError, match="--peft-task-type"):
        Setup(m, method="lora", peft_task_type="SEQ_CLASSIFICATION")
    e = estimate(Setup(m, dtype="fp32", precision="fp32", attn="sdpa"))
    assert any("disentangled attention" in n for n in e.assumptions)  # eager whatever --attn says


# ----------------------------------------------------------------------------------------------- trace

MATRIX = [(mt, method, p) for mt in ("distilbert", "deberta-v2") for method in ("full", "lora")
          for p in ("fp32", "amp-fp16")]


@pytest.mark.parametrize("model_type, method, precision", MATRIX)
def test_estimate_against_the_trace(model_type, method, precision):
    """Activation-heavy tiny models (batch 4 x 256 tokens): the allocated peak within 3 % of the traced step's,
    the trainable parameters exactly, the forward phase within 3.5 %."""
    pytest.importorskip("torch")
    from memlint.measure import measure

    kw = dict(lora_targets=TARGETS[model_type], lora_r=8) if method == "lora" else {}
    s = Setup(tiny(model_type), method=method, dtype="fp32", precision=precision, batch=4, seq=256,
              optim="adamw_torch", attn="eager" if model_type == "deberta-v2" else "sdpa", **kw)
    e = estimate(s)
    r = measure(s, device="trace")
    assert e.trainable_params == r.details["trainable_params"]
    assert e.allocated_peak == pytest.approx(r.measured_peak, rel=0.03)
    assert e.phases["forward"] == pytest.approx(r.steps[-1].phases["forward"], rel=0.035)


@pytest.mark.parametrize("model_type, method", [("distilbert", "full"), ("distilbert", "lora"),
                                                ("deberta-v2", "full")])
def test_saved_activations_term_by_term(model_type, method):
    """fp32: the activations saved when forward reaches the head are the estimate's to 0.1 % (DistilBERT to the
    byte; DeBERTa's disentangled terms to a few KB)."""
    pytest.importorskip("torch")
    from memlint.measure import measure

    kw = dict(lora_targets=TARGETS[model_type], lora_r=8) if method == "lora" else {}
    s = Setup(tiny(model_type), method=method, dtype="fp32", precision="fp32", batch=4, seq=256,
              optim="adamw_torch", **kw)
    e = estimate(s)
    r = measure(s, device="trace")
    assert e.bytes("activations") == pytest.approx(r.components["activations"], rel=0.001)


# ----------------------------------------------------------------------------------------------- plans

LORA_SCRIPT = '''from peft import LoraConfig, TaskType, get_peft_model
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

model = AutoModelForSequenceClassification.from_pretrained("microsoft/deberta-v3-base", num_labels=3)
model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["query_proj", "value_proj"],
                                         TASK))
enc = tokenizer(texts, padding="max_length", truncation=True, max_length=256)
args = TrainingArguments("out", per_device_train_batch_size=16, fp16=True)
Trainer(model=model, args=args, train_dataset=ds).train()
'''


@pytest.mark.parametrize("task, expected", [('task_type="SEQ_CLS"', "SEQ_CLS"), ("task_type=TaskType.SEQ_CLS", "SEQ_CLS"),
                                            ("lora_dropout=0.1", None)])
def test_lora_task_type_read_from_the_script(task, expected):
    """LoraConfig's task_type (a string or peft's TaskType) reaches the estimate: SEQ_CLS trains the classifier
    copy; a LoraConfig without it (peft's default None) leaves the classifier frozen, and says so."""
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_source

    plan = extract_source(LORA_SCRIPT.replace("TASK", task), "train.py")
    f = plan.fields
    assert f["lora_task_type"].value == expected
    assert f["lora_task_type"].source == ("literal" if expected else "library-default")
    s = setup_from_plan(plan).setup
    assert s.encoder and s.method == "lora" and s.peft_task_type == expected and s.num_labels == 3
    e = estimate(s)
    adapters = 12 * 2 * 8 * (768 + 768)
    assert e.trainable_params == adapters + (768 * 3 + 3 if expected else 0)
    if not expected:
        assert any("stays frozen" in n for n in e.assumptions)
