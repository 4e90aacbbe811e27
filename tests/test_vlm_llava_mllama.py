"""Vision-language models (#15), LLaVA-1.5 and Llama-3.2-Vision (Mllama): counts, image tokens / tiles, what trains
(the CLIP tower's layers after vision_feature_layer get no gradient), and the estimate against `memlint measure` running
transformers' own LlavaForConditionalGeneration / MllamaForConditionalGeneration on tiny configs (random weights, real
pixel_values, aspect ratio ids and masks; the storage tracker on real CPU tensors, as tests/test_vlm.py does for
Qwen2-VL).

Measured (`python tests/test_vlm_llava_mllama.py`, torch 2.13 CPU, transformers 5.24; allocated peak of step 2, bf16
weights, amp-bf16, SDPA, AdamW, 1 × 128 text tokens; LLaVA: 2 images of 112 × 112 = 64 patches + CLS in the tower, 64
image tokens each, text hidden 256 / 2 layers, CLIP hidden 256 / 3 layers; Mllama: 1 image of 4 tiles of 112 × 112, text
hidden 256 / 4 layers with cross-attention layers 1 and 3, vision hidden 128 / 3 + 2 global layers): every peak within
3 % (LLaVA +0.78 … +2.53 %, Mllama −0.03 … +1.95 %); docs/accounting.md has the table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memlint.catalog import catalog_entry  # noqa: E402
from memlint.catalog.meta import count_on_meta  # noqa: E402
from memlint.catalog.spec import spec_from_entry  # noqa: E402
from memlint.estimate import vision  # noqa: E402
from memlint.estimate.core import estimate  # noqa: E402
from memlint.estimate.model_state import trainable_params, trainable_tensors  # noqa: E402
from memlint.estimate.setup import Setup  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

LLAVA = dict(text_config=dict(model_type="llama", hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=2048, bos_token_id=1,
                              eos_token_id=2, pad_token_id=0),
             vision_config=dict(model_type="clip_vision_model", hidden_size=256, intermediate_size=1024,
                                num_hidden_layers=3, num_attention_heads=4, image_size=112, patch_size=14,
                                projection_dim=128),
             image_token_index=2000, vision_feature_layer=-2, vision_feature_select_strategy="default",
             projector_hidden_act="gelu", tie_word_embeddings=False)
MLLAMA = dict(text_config=dict(model_type="mllama_text_model", hidden_size=256, intermediate_size=704,
                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, vocab_size=2048,
                               cross_attention_layers=[1, 3], bos_token_id=1, eos_token_id=2, pad_token_id=0),
              vision_config=dict(model_type="mllama_vision_model", hidden_size=128, intermediate_size=512,
                                 num_hidden_layers=3, num_global_layers=2, attention_heads=4, image_size=112,
                                 patch_size=14, vision_output_dim=384, intermediate_layers_indices=[0, 2],
                                 max_num_tiles=4),
              image_token_index=2048, tie_word_embeddings=False)
CONFIGS = {"llava": LLAVA, "mllama": MLLAMA}


def tiny(model_type: str, **over):
    cfg = {**CONFIGS[model_type], **over}
    return spec_from_entry(f"tiny-{model_type}", {"model_type": model_type, "config": cfg,
                                                   **count_on_meta(model_type, cfg)})


def _build(model_type: str, device: str = "meta", **over):
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = AutoConfig.for_model(model_type, **{**CONFIGS[model_type], **over})
    with torch.device(device):
        return AutoModelForImageTextToText.from_config(cfg)


def test_llava_counts_are_transformers_own():
    spec = tiny("llava")
    model = _build("llava")
    inner = model.model
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert spec.params == count(model)
    assert spec.vision["params"] == count(inner.vision_tower) + count(inner.multi_modal_projector)
    assert spec.vision["params_merger"] == count(inner.multi_modal_projector)
    assert spec.groups["vision"] == spec.vision["params"]
    text_linear = sum(m.weight.numel() + (m.bias.numel() if m.bias is not None else 0)
                      for m in inner.language_model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(l.params for l in spec.layer_linears()) == text_linear
    assert (spec.vision["depth"], spec.vision["reached_layers"]) == (3, 2)  # vision_feature_layer -2
    # every layer exists (and runs): the last one's weights are in the count
    assert len(inner.vision_tower.encoder.layers) == 3


@pytest.mark.parametrize("feature_layer,reached", [(-2, 2), (-1, 3), (1, 1)])
def test_llava_layers_after_the_feature_layer_get_no_gradient(feature_layer, reached):
    """transformers' own step: which tower parameters a real backward reaches (the rest keeps grad None, so AdamW
    keeps no state for them) is params_unreached."""
    spec = tiny("llava", vision_feature_layer=feature_layer)
    assert spec.vision["reached_layers"] == reached
    torch.manual_seed(0)
    model = _build("llava", device="cpu", vision_feature_layer=feature_layer)
    n = vision.image_tokens(Setup(model=spec, images=1))
    ids = torch.randint(3, 1000, (1, n + 8))
    ids[0, 2:2 + n] = 2000
    model(input_ids=ids, labels=ids, pixel_values=torch.randn(1, 3, 112, 112)).loss.backward()
    tower = list(model.model.vision_tower.parameters())
    unreached = sum(p.numel() for p in tower if p.grad is None)
    assert unreached == spec.vision["params_unreached"] > 0
    assert all(p.grad is not None for p in model.model.multi_modal_projector.parameters())


def test_llava_catalog_entries():
    src = {e["id"]: e for e in json.loads((ROOT / "scripts" / "catalog_sources.json").read_text())["models"]}
    expected = {"llava-hf/llava-1.5-7b-hf": 7_063_427_072, "llava-hf/llava-1.5-13b-hf": 13_351_494_656}
    for mid, n in expected.items():
        spec = catalog_entry(mid)
        assert spec.params == n and spec.vision and src[mid]["ref"]
        v = spec.vision
        assert (v["kind"], v["depth"], v["reached_layers"], v["embed_dim"], v["image_size"], v["patch_size"]) == \
            ("llava", 24, 23, 1024, 336, 14)
    e = src["llava-hf/llava-1.5-7b-hf"]
    assert count_on_meta(e["model_type"], e["config"])["params"] == expected["llava-hf/llava-1.5-7b-hf"]
    # CLIP ViT-L/14-336 (303.5 M parameters with its post_layernorm) + the 2-layer projector 1024 -> 4096 -> 4096
    v = catalog_entry("llava-hf/llava-1.5-7b-hf").vision
    assert v["params_merger"] == 1024 * 4096 + 4096 + 4096 * 4096 + 4096
    # the last CLIP layer (q/k/v/out 1024², fc1 and fc2 1024 x 4096, their biases, two LayerNorms) + post_layernorm
    assert v["params_unreached"] == 4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024 + 2 * 2048 + 2048


def _transformers_llava_tokens(crop: int, patch: int, strategy: str, image_hw: tuple[int, int] = (480, 640)) -> int:
    """How many `<image>` tokens transformers' own LlavaProcessor puts in the text for one image, through its
    public call: a CLIP image processor cropping to `crop`, a word-level tokenizer that knows `<image>`, the
    patch size, num_additional_image_tokens 1 (llava-1.5-hf's)."""
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import CLIPImageProcessor, LlavaProcessor, PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>")
    tokenizer.add_tokens(["<image>"], special_tokens=True)
    images = CLIPImageProcessor(crop_size={"height": crop, "width": crop}, size={"shortest_edge": crop})
    processor = LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=patch,
                               vision_feature_select_strategy=strategy, num_additional_image_tokens=1)
    out = processor(text="<image> hello", images=np.zeros((*image_hw, 3), dtype=np.uint8), return_tensors="np")
    return int((out["input_ids"][0] == tokenizer.convert_tokens_to_ids("<image>")).sum())


@pytest.mark.parametrize("strategy", ["default", "full"])
def test_llava_image_tokens_follow_transformers(strategy):
    spec = catalog_entry("llava-hf/llava-1.5-7b-hf")
    if strategy == "full":  # the class token goes to the text model too
        spec = tiny("llava", vision_config=dict(LLAVA["vision_config"], image_size=336),
                    vision_feature_select_strategy="full")
    for size in (None, (480, 640), (2000, 300)):  # the processor crops every image to 336 x 336
        s = Setup(model=spec, images=2, image_size=size, seq=100)
        assert vision.image_tokens(s) == _transformers_llava_tokens(336, 14, strategy, size or (480, 640))
        assert vision.text_seq(s) == 100 + 2 * vision.image_tokens(s)
    assert vision.image_tokens(Setup(model=catalog_entry("llava-hf/llava-1.5-7b-hf"), images=1)) == 576


def test_llava_what_trains():
    spec = catalog_entry("llava-hf/llava-1.5-7b-hf")
    v = spec.vision
    frozen = Setup(model=spec, method="full", images=1)
    assert trainable_params(frozen) == spec.params - v["params"]
    proj = frozen.with_(train_projector=True)
    assert trainable_params(proj) == spec.params - (v["params"] - v["params_merger"])
    full = frozen.with_(train_vision=True)  # the projector follows the tower
    assert trainable_params(full) == spec.params - v["params_unreached"]
    tower_only = full.with_(train_projector=False)
    assert trainable_params(tower_only) == spec.params - v["params_unreached"] - v["params_merger"]
    for s in (frozen, proj, full, tower_only):
        assert sum(t.numel * t.count for t in trainable_tensors(s)) == trainable_params(s)
    lora = Setup(model=spec, method="lora", images=1)
    assert trainable_params(lora) == sum((l.in_features + l.out_features) * 8 * l.count for l in spec.layer_linears())


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})


def test_llava_estimate_cli():
    r = _run("estimate", "--model", "llava-hf/llava-1.5-7b-hf", "--images", "1", "--train-vision", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"]["trainable_params"] == 7_063_427_072 - 12_598_272
    assert any("576 image tokens" in a for a in doc["assumptions"])


def test_llava_plans(tmp_path):
    """LLaMA-Factory's freeze flags and a TRL-style full fine-tune script (nothing frozen: everything trains)."""
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    cfg = tmp_path / "llava_full_sft.yaml"
    cfg.write_text("model_name_or_path: llava-hf/llava-1.5-7b-hf\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
                   "freeze_vision_tower: true\nfreeze_multi_modal_projector: false\ncutoff_len: 1024\n"
                   "per_device_train_batch_size: 1\nbf16: true\n")
    s = setup_from_plan(extract_file(str(cfg))).setup
    assert (s.images, s.train_vision, s.train_projector) == (1, False, True)
    assert trainable_params(s) == s.model.params - (s.model.vision["params"] - s.model.vision["params_merger"])
    script = tmp_path / "sft_vlm.py"
    script.write_text(
        "from transformers import AutoProcessor, LlavaForConditionalGeneration\n"
        "from trl import SFTConfig, SFTTrainer\n"
        "m = LlavaForConditionalGeneration.from_pretrained('llava-hf/llava-1.5-7b-hf', torch_dtype='bfloat16')\n"
        "p = AutoProcessor.from_pretrained('llava-hf/llava-1.5-7b-hf')\n"
        "args = SFTConfig('o', per_device_train_batch_size=2, gradient_checkpointing=True, bf16=True, max_length=1024)\n"
        "SFTTrainer(model=m, args=args, processing_class=p).train()\n")
    s = setup_from_plan(extract_file(str(script))).setup
    assert s.model.id == "llava-hf/llava-1.5-7b-hf" and s.images == 1 and s.train_vision and s.recompute
    assert trainable_params(s) == s.model.params - s.model.vision["params_unreached"]


def test_mllama_counts_are_transformers_own():
    spec = tiny("mllama")
    model = _build("mllama")
    inner = model.model
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert spec.params == count(model)
    assert spec.vision["params"] == count(inner.vision_model) + count(inner.multi_modal_projector)
    assert spec.vision["params_merger"] == count(inner.multi_modal_projector)
    text_linear = sum(m.weight.numel() for m in inner.language_model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(l.params for l in spec.layer_linears()) == text_linear  # the cross-attention layers' q/k/v/o among them
    names = {l.name for l in spec.layer_linears()}
    assert {"cross_attn.k_proj", "self_attn.k_proj"} <= names
    v = spec.vision
    assert (v["depth"], v["global_depth"], v["patches_per_tile"], v["cross_attention_layers"]) == (3, 2, 65, [1, 3])


def test_mllama_vision_tokens_are_the_models_own():
    """The vision model runs max_num_tiles tiles per image (the processor pads them) and the cross-attention keys
    span every tile's patches + class token: the shape of transformers' own cross_attention_states."""
    spec = tiny("mllama")
    s = Setup(model=spec, images=2, batch=1)
    model = _build("mllama", device="cpu")
    from memlint.measure.core import _mllama_inputs

    ids = torch.randint(3, 1000, (1, 16))
    inputs = _mllama_inputs(s, ids, "cpu")
    out = model.model.vision_model(pixel_values=inputs["pixel_values"], aspect_ratio_ids=inputs["aspect_ratio_ids"],
                                   aspect_ratio_mask=inputs["aspect_ratio_mask"])
    states = model.model.multi_modal_projector(out.last_hidden_state).reshape(-1, out.last_hidden_state.shape[-2], 256)
    assert states.shape[0] * states.shape[1] == vision.cross_tokens(s) == 2 * 4 * 65
    assert vision.tower_tokens(s) == 4 * 72  # 65 patches + CLS per tile, padded to a multiple of 8
    assert vision.text_seq(s.with_(seq=100)) == 100  # no image tokens added to the text


def test_mllama_catalog_entry_and_what_trains():
    src = {e["id"]: e for e in json.loads((ROOT / "scripts" / "catalog_sources.json").read_text())["models"]}
    spec = catalog_entry("meta-llama/Llama-3.2-11B-Vision-Instruct")
    assert spec.params == 10_670_220_835 and src["meta-llama/Llama-3.2-11B-Vision"]["ref"]
    e = src["meta-llama/Llama-3.2-11B-Vision"]
    assert count_on_meta(e["model_type"], e["config"])["params"] == 10_670_220_835
    v = spec.vision
    assert (v["depth"], v["global_depth"], v["embed_dim"], v["patches_per_tile"], v["max_num_tiles"],
            v["cross_kv_dim"], v["vision_output_dim"]) == (32, 8, 1280, 1601, 4, 1024, 7680)
    frozen = Setup(model=spec, method="full", images=1)
    assert trainable_params(frozen) == spec.params - v["params"]
    proj = frozen.with_(train_projector=True)
    assert trainable_params(proj) == spec.params - v["params"] + v["params_merger"]
    full = frozen.with_(train_vision=True)
    assert trainable_params(full) == spec.params
    for x in (frozen, proj, full):
        assert sum(t.numel * t.count for t in trainable_tensors(x)) == trainable_params(x)
    # the cross-attention keys / values over 4 tiles x 1601 tokens grow the activations with the images
    one = estimate(Setup(model=spec, method="lora", images=1, seq=512)).bytes("activations")
    two = estimate(Setup(model=spec, method="lora", images=2, seq=512)).bytes("activations")
    assert two > one


def test_mllama_llamafactory_freeze_flags(tmp_path):
    from memlint.estimate.from_plan import setup_from_plan
    from memlint.extract import extract_file

    cfg = tmp_path / "mllama_full.yaml"
    cfg.write_text("model_name_or_path: meta-llama/Llama-3.2-11B-Vision-Instruct\nstage: sft\ndo_train: true\n"
                   "finetuning_type: full\nfreeze_vision_tower: false\ncutoff_len: 1024\n"
                   "per_device_train_batch_size: 1\nbf16: true\n")
    s = setup_from_plan(extract_file(str(cfg))).setup
    assert (s.images, s.train_vision, s.train_projector) == (1, True, False)
    v = s.model.vision
    assert trainable_params(s) == s.model.params - v["params_merger"]


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_fake_trace_refuses_images(model_type):
    from memlint.errors import MemlintError
    from memlint.measure.core import measure

    with pytest.raises(MemlintError, match="real tensors only"):
        measure(Setup(model=tiny(model_type), seq=64, images=1), device="trace")


# The independent check: transformers' own step, measured by the storage tracker (real tensors on the CPU).
CASES = [
    ("llava", dict(method="full")),
    ("llava", dict(method="full", train_projector=True)),
    ("llava", dict(method="full", train_vision=True)),
    ("llava", dict(method="full", train_vision=True, recompute=True)),
    ("llava", dict(method="full", recompute=True)),
    ("llava", dict(method="lora")),
    ("llava", dict(method="lora", recompute=True)),
    ("mllama", dict(method="full")),
    ("mllama", dict(method="full", train_projector=True)),
    ("mllama", dict(method="full", train_vision=True)),
    ("mllama", dict(method="full", recompute=True)),
    ("mllama", dict(method="full", train_vision=True, recompute=True)),
    ("mllama", dict(method="lora")),
    ("mllama", dict(method="lora", recompute=True)),
]
# Mllama's activations component is up to 5.5 % under the measured one in the compared cases (the text side of the
# cross-attention layers, counted as self-attention layers; their q_norm not counted; −6.7 % with LoRA + recompute,
# compared on the peak only): compared at 6 %; every peak within 3 %
ACT_TOLERANCE = {"llava": 0.03, "mllama": 0.06}


def _compare(model_type: str, kw: dict, steps: int = 2) -> dict:
    from memlint.measure.core import measure

    s = Setup(model=tiny(model_type), batch=1, seq=128, images=2 if model_type == "llava" else 1, **kw)
    r = measure(s, device="cpu", steps=steps)
    e = estimate(s)
    v = s.model.vision
    pixels = s.batch * s.images * vision.tiles(s) * v["in_channels"] * v["image_size"] ** 2 * 4  # an input
    return {"measured": r.measured_peak, "estimated": e.allocated_peak,
            "act_measured": r.components["activations"], "act_estimated": e.bytes("activations") - pixels,
            **{f"{k}_measured": r.components[k] for k in ("weights", "gradients", "optimizer", "logits")},
            **{f"{k}_estimated": e.bytes(k) for k in ("weights", "gradients", "optimizer", "logits")}}


@pytest.mark.parametrize("model_type,kw", CASES)
def test_estimate_matches_the_measured_step(model_type, kw):
    out = _compare(model_type, kw)
    assert out["estimated"] == pytest.approx(out["measured"], rel=0.03)
    for k in ("weights", "gradients", "optimizer", "logits"):
        assert out[f"{k}_estimated"] == pytest.approx(out[f"{k}_measured"], rel=0.01), k
    # under recompute the text model's own split of activations differs (tests/test_vlm.py says the same for
    # Qwen2-VL's LoRA + recompute): LLaVA + recompute and LoRA + recompute are compared on the peak only
    if not kw.get("recompute") or (model_type == "mllama" and kw["method"] == "full"):
        assert out["act_estimated"] == pytest.approx(out["act_measured"], rel=ACT_TOLERANCE[model_type])


if __name__ == "__main__":
    for mt, kw in CASES:
        o = _compare(mt, kw)
        print(mt, kw, " ".join(f"{k} {v:,}" for k, v in o.items()),
              f"peak {100 * (o['estimated'] - o['measured']) / o['measured']:+.2f}%",
              f"act {100 * (o['act_estimated'] - o['act_measured']) / o['act_measured']:+.2f}%", flush=True)
