"""The bundled catalog (models.json) and ModelSpec, the exact model facts the accounting reads.

Every count is exact (instantiated on the meta device by scripts/gen_catalog.py); family facts
(families.json) are fields of each entry's architecture data, so the estimator never branches
on model_type.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from memlint.data import derived, load


@dataclass(frozen=True)
class Linear:
    """One linear projection repeated `count` times (once per layer, or per expert)."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    count: int
    role: str = "attn_out"  # what it reads: attn_in | mlp_in | mlp_out | attn_out | head (families.json)

    @property
    def params(self) -> int:
        return (self.in_features * self.out_features + (self.out_features if self.bias else 0)) * self.count


@dataclass(frozen=True)
class ModelSpec:
    """What memory accounting needs to know about a model, all of it exact."""

    id: str
    family: str
    model_type: str
    params: int
    groups: Mapping[str, int]  # embeddings, lm_head, norms, linear, experts, other
    tied_embeddings: bool
    linears: tuple[Linear, ...]  # lm_head included, under the name "lm_head"
    arch: Mapping[str, Any]
    config: Mapping[str, Any] = field(default_factory=dict)
    torch_dtype: str = "float32"
    source: str = "catalog"  # catalog | local | hf-cache | folder-name | script-class (extract/custom_model.py)
    # folder-name: the path the script names, not on this machine, whose last component is this checkpoint's name
    assumed_from: str | None = None
    text_only: bool = False
    # remote-code families (catalog/remote.py): the transformers architecture counted in its place
    counted_as: str | None = None
    # a pre-quantized checkpoint's config.json quantization_config (GPTQ / AWQ): quant_method, bits, group_size, desc_act
    quantization: Mapping[str, Any] | None = None
    # an encoder (arch["encoder"]): what each task head adds, counted on transformers' own head classes
    # (catalog/meta.py _count_encoder): fixed + per_label parameters, the head's linears, a tied decoder
    task_heads: Mapping[str, Any] | None = None
    # a vision-language model (Qwen2-VL, Qwen2.5-VL): its vision tower and merger, counted on transformers' own class
    # (catalog/meta.py _count_vlm): depth, embed_dim, heads, MLP, patch / temporal patch / spatial merge sizes, the
    # merger's widths, params (all in groups["vision"] and `params`; `linears` are the text model's only)
    vision: Mapping[str, Any] | None = None

    # Convenience views over `arch`, named as the formulas name them.
    @property
    def hidden(self) -> int:
        return self.arch["hidden_size"]

    @property
    def layers(self) -> int:
        return self.arch["num_layers"]

    @property
    def vocab(self) -> int:
        return self.arch["vocab_size"]

    @property
    def heads(self) -> int:
        return self.arch["num_heads"]

    @property
    def kv_heads(self) -> int:
        return self.arch["num_kv_heads"]

    @property
    def head_dim(self) -> int:
        return self.arch["head_dim"]

    @property
    def intermediate(self) -> int:
        return self.arch["intermediate_size"]

    def layer_linears(self) -> tuple[Linear, ...]:
        """The linears inside the layers: not lm_head, nor an encoder's task-head linears (role "head")."""
        return tuple(l for l in self.linears if l.name != "lm_head" and l.role != "head")

    @property
    def lm_head(self) -> Linear | None:
        return next((l for l in self.linears if l.name == "lm_head"), None)

    @property
    def quantizable_params(self) -> int:
        """Parameters bitsandbytes replaces with 4/8-bit layers: the Linear weights
        inside the blocks. Embeddings, norms, lm_head and biases stay in compute dtype."""
        return sum(l.in_features * l.out_features * l.count for l in self.layer_linears())


def spec_from_entry(model_id: str, entry: Mapping[str, Any], source: str = "catalog") -> ModelSpec:
    linears = tuple(
        Linear(name, d["in"], d["out"], d["bias"], d["count"], d["role"])
        for name, d in entry["linear_modules"].items()
    )
    return ModelSpec(
        id=model_id,
        family=entry.get("family", entry["model_type"]),
        model_type=entry["model_type"],
        params=entry["params"],
        groups=dict(entry["groups"]),
        tied_embeddings=entry["tied_embeddings"],
        linears=linears,
        arch=dict(entry["arch"]),
        config=dict(entry.get("config", {})),
        torch_dtype=entry.get("torch_dtype", "float32"),
        source=source,
        text_only=entry.get("text_only", False),
        counted_as=entry.get("counted_as"),
        quantization=prequantized(entry.get("quantization") or entry.get("config", {}).get("quantization_config")),
        task_heads=entry.get("heads"),
        vision=entry.get("vision"),
    )


def prequantized(qc: Any) -> dict[str, Any] | None:
    """The memory-relevant keys of a checkpoint's quantization_config when it is a GPTQ or AWQ one (transformers
    loads such a checkpoint quantized whatever the script asks); None otherwise."""
    if not isinstance(qc, Mapping) or str(qc.get("quant_method", "")).lower() not in ("gptq", "awq"):
        return None
    out = {"quant_method": str(qc["quant_method"]).lower(), "bits": qc.get("bits", qc.get("w_bit", 4)),
           "group_size": qc.get("group_size", qc.get("q_group_size", 128))}
    if "desc_act" in qc:
        out["desc_act"] = qc["desc_act"]
    return out


@lru_cache(maxsize=1)
def entries() -> dict[str, Any]:
    """The catalog's entries by canonical id."""
    text = resources.files("memlint.catalog").joinpath("models.json").read_text("utf-8")
    return json.loads(text)["models"]


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Lower-cased id or alias -> canonical id. A name ending in `-hf` (the Hugging Face conversion of a checkpoint
    first published in another format: Llama-2-13b-hf, llava-1.5-7b-hf) also stands without it (Llama-2-13b is the
    same weights), unless that shorter name is another checkpoint's."""
    idx: dict[str, str] = {}
    for mid, entry in entries().items():
        idx[mid.lower()] = mid
        for alias in entry.get("aliases", []):
            idx[alias.lower()] = mid
    for key, canonical in list(idx.items()):
        if key.endswith("-hf"):
            idx.setdefault(key[:-3], canonical)
    return idx


def known_ids() -> list[str]:
    return sorted(entries())


_UNSLOTH_QUANT = re.compile(r"^unsloth/(?P<name>.+?)(?:-unsloth)?-bnb-4bit$")


def _unsloth_base(key: str) -> str | None:
    """unsloth's pre-quantized mirrors (unsloth/qwen3-14b-unsloth-bnb-4bit) keep the shapes of the
    checkpoint they quantize: the canonical id whose name (or an alias's) is the same, when only one is."""
    m = _UNSLOTH_QUANT.match(key)
    if m is None:
        return None
    name = m.group("name")
    hits = {c for k, c in _index().items() if k.rsplit("/", 1)[-1] == name}
    return hits.pop() if len(hits) == 1 else None


def catalog_entry(model_id: str) -> ModelSpec | None:
    key = model_id.strip().lower()
    canonical = _index().get(key)
    if canonical is None:
        canonical = _unsloth_base(key)
        if canonical is None:
            return None
        return spec_from_entry(model_id.strip(), entries()[canonical])
    entry = entries()[canonical]
    # Report the id the user named (an -Instruct alias is not its base), spelled as published.
    shown = next((a for a in [canonical, *entry.get("aliases", [])] if a.lower() == key), model_id.strip())
    return spec_from_entry(shown, entry)


_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def _spelling(name: str) -> str:
    """A checkpoint name as folders spell it: ModelScope writes `.` as `___` (Qwen2___5-1___5B), and `_` stands
    for `-` (llama_7b); case aside."""
    return name.lower().replace("___", ".").replace("_", "-")


def named_by_folder(path: str) -> ModelSpec | None:
    """A local checkpoint path that is not on this machine (`~/model_weights/llama-7b`, `/data/vicuna-7b-v1.5-16k`)
    whose last component is, letter for letter (case aside), the name of exactly one catalogued checkpoint: that
    checkpoint's spec, marked as assumed from the folder name. A bare name (`ChatGLM2-6B`, `llama-7b`) that is no
    catalogued id is such a folder too: from_pretrained reads a folder of that name, and no Hub repository has a
    name without an organisation but the legacy ones the catalog holds. A hub id (`org/name`) is never read this way:
    another organisation's `name` may be any model; a placeholder (`<your_path>`, `/path/to/70B`) names none."""
    text = path.strip()
    if "/" in text and _HUB_ID.match(text) and not text.startswith("."):
        return None
    parts = text.replace("\\", "/").rstrip("/").split("/")
    name = parts[-1].lower()
    if not name or name in (".", "..", "~"):
        return None
    hits = {c for k, c in _index().items() if k.rsplit("/", 1)[-1] == name}
    if not hits and _BARE_SIZE.match(name) and len(parts) > 1:
        # a size folder inside a family folder (`llama_hf/7B`, `Llama-2/7b`): the family's words then the size, the
        # longest run of the parent's leading words that names a catalogued checkpoint (only words without a digit,
        # such as `hf`, are dropped from its end)
        words = [w for w in re.split(r"[-_.]", parts[-2].lower()) if w]
        for k in range(len(words), 0, -1):
            if k < len(words) and any(ch.isdigit() for w in words[k:] for ch in w):
                break  # a dropped word with a digit is a version (Llama-2): another model, never dropped
            joined = "-".join(words[:k]) + "-" + name
            hits = {c for key, c in _index().items() if key.rsplit("/", 1)[-1] == joined}
            if hits:
                name = joined
                break
    if not hits:  # ModelScope's copy (Qwen2___5-7B for Qwen2.5-7B), or `_` where the id has `-` (llama_7b)
        hits = {c for k, c in _index().items() if _spelling(k.rsplit("/", 1)[-1]) == _spelling(name)}
        if hits:
            name = next(k.rsplit("/", 1)[-1] for k, c in _index().items() if c in hits
                        and _spelling(k.rsplit("/", 1)[-1]) == _spelling(name))
    if not hits and len(parts) > 1:
        # a folder named after a catalogued base with more around it (yahma_llama_7b, Qwen2.5-7B-sft): a fine-tune
        # keeps its base's shapes, by named_after_base's rule
        spec = named_after_base("local/" + _spelling(name))
        return replace(spec, source="folder-name", assumed_from=text) if spec is not None else None
    if len(hits) != 1:
        return None
    canonical = hits.pop()
    entry = entries()[canonical]
    shown = next((a for a in [canonical, *entry.get("aliases", [])] if a.lower().rsplit("/", 1)[-1] == name), canonical)
    return replace(spec_from_entry(shown, entry, source="folder-name"), assumed_from=text)


_BARE_SIZE = re.compile(r"^\d+(?:\.\d+)?[bm]$")


# A checkpoint that is not its base's weights' shapes: quantized exports, merged adapters of another size
_NOT_SAME_SHAPES = re.compile(r"(?:^|[-_.])(?:gptq|awq|gguf|ggml|exl2|bnb|4bit|8bit|int4|int8|nf4|fp8|mxfp4|hqq|"
                              r"mlx|onnx|lora|qlora|adapter|pruned|sheared|distill(?:ed)?|moe)(?:$|[-_.])")
_SIZE = re.compile(r"\d+(?:\.\d+)?[bm](?:$|[-_.])")


def named_after_base(model_id: str) -> ModelSpec | None:
    """A Hub checkpoint the catalog lacks whose name is a catalogued checkpoint's name with more around it, at word
    boundaries and with its size in it (willcb/Qwen3-1.7B-Wordle, yahma/llama-7b-hf, my-org/Mistral-7B-v0.1-sft):
    a fine-tune keeps its base's shapes, so that base's spec, marked as assumed from the name (every report says
    so). The longest such name wins; none when two bases tie, when the name says its weights differ (a GPTQ / AWQ /
    GGUF / bnb export, an adapter, a pruned or distilled model), when no size is in the matched name, or when the
    organisation is the base's own (meta-llama/Llama-3.1-8b-instrct is a misspelling: the error names the closest)."""
    text = model_id.strip()
    if not _HUB_ID.match(text) or "/" not in text:
        return None
    name = text.rsplit("/", 1)[-1].lower()
    if _NOT_SAME_SHAPES.search(name) or text.lower() in _index():  # a catalogued id is itself, not an assumption
        return None
    best: dict[int, set[str]] = {}
    for key, canonical in _index().items():
        base = key.rsplit("/", 1)[-1]
        if len(base) < 4 or not _SIZE.search(base + "-") or base == name:
            continue
        at = name.find(base)
        while at >= 0:
            end = at + len(base)
            if (at == 0 or name[at - 1] in "-_.") and (end == len(name) or name[end] in "-_."):
                best.setdefault(len(base), set()).add(canonical)
                break
            at = name.find(base, at + 1)
    if not best:
        return None
    hits = best[max(best)]
    if len(hits) != 1:
        return None
    canonical = hits.pop()
    orgs = {i.split("/", 1)[0].lower() for i in (canonical, *entries()[canonical].get("aliases", ())) if "/" in i}
    if text.split("/", 1)[0].lower() in orgs:  # the base's own organisation: a misspelling or a variant, not a fine-tune
        return None
    return replace(spec_from_entry(canonical, entries()[canonical], source="named-base"), assumed_from=text)


# the suffixes an organisation's chat/instruct release adds to its base's name (Qwen/Qwen1.5-0.5B-Chat of
# Qwen/Qwen1.5-0.5B, meta-llama/Llama-2-7b-chat-hf of Llama-2-7b-hf, google/gemma-2-2b-it of gemma-2-2b): the two share
# every shape (the same config.json apart from its name)
_VARIANT_SUFFIXES = ("-chat", "-instruct", "-it", "-chat-hf", "-hf", "-base")


def chat_or_base_sibling(model_id: str) -> ModelSpec | None:
    """A checkpoint of the catalogue's organisation whose name is a catalogued checkpoint's with a chat/instruct/base
    suffix added or removed (Qwen/Qwen1.5-0.5B beside Qwen/Qwen1.5-0.5B-Chat): that one's shapes, marked as assumed
    from the name (source "named-variant"); none when several siblings differ in shape or the name says its weights
    differ (a GPTQ / AWQ / GGUF export, an adapter)."""
    text = model_id.strip()
    if not _HUB_ID.match(text) or "/" not in text or text.lower() in _index():
        return None
    org, name = text.lower().split("/", 1)
    if _NOT_SAME_SHAPES.search(name):
        return None
    stems = {name} | {name[: -len(s)] for s in _VARIANT_SUFFIXES if name.endswith(s) and len(name) > len(s) + 3}
    cands = {f"{org}/{stem}{suffix}" for stem in stems for suffix in ("", *_VARIANT_SUFFIXES)} - {text.lower()}
    hits = sorted({_index()[c] for c in cands if c in _index()})
    if not hits or len({entries()[h]["params"] for h in hits}) != 1:
        return None
    return replace(spec_from_entry(hits[0], entries()[hits[0]], source="named-variant"), assumed_from=text)


@derived
def _twins() -> dict[str, str]:
    """ModelScope id (lower case) -> the Hugging Face id ms-swift 2.x's registry gives the same weights."""
    return {ms.lower(): hf for ms, hf in load("swift_model_types.json")["model_types"].values()
            if hf and ms != hf}


def modelscope_twin(model_id: str) -> str | None:
    """The Hugging Face id of the same weights as a ModelScope id (ms-swift 2.x's registry), else None."""
    return _twins().get(model_id.strip().lower()) if isinstance(model_id, str) else None


def hub_twin(model_id: str) -> ModelSpec | None:
    """A ModelScope id the catalogue lacks that ms-swift's registry pairs with a Hugging Face id of the same weights
    (qwen/Qwen2-7B-Instruct, LLM-Research/Meta-Llama-3-8B-Instruct; data/swift_model_types.json): sized as that id,
    marked as assumed from the pairing (source "hub-twin")."""
    twin = modelscope_twin(model_id)
    if twin is None or twin.lower() not in _index():
        return None
    canonical = _index()[twin.lower()]
    return replace(spec_from_entry(canonical, entries()[canonical], source="hub-twin"), assumed_from=model_id.strip())


_NAME = re.compile(r"[a-z]+")


def _family_word(model_id: str) -> str:
    """The leading word of a checkpoint's name (its last path component): llama, qwen, bert, dbrx ..."""
    m = _NAME.match(model_id.lower().rsplit("/", 1)[-1])
    return m.group(0) if m else ""


def closest_ids(model_id: str, n: int = 3) -> list[str]:
    """Catalogued ids spelled like `model_id`, and of its family: a similar string of another family
    (bert-base-uncased against databricks/dbrx-base: its last component dbrx-base, difflib ratio 0.54) is no
    suggestion."""
    word = _family_word(model_id)
    names = [k for k in _index() if _family_word(k) == word] if word else []
    key = model_id.lower()
    hits = difflib.get_close_matches(key, names, n=n, cutoff=0.4)
    if not hits:  # match on the last path component: "llama-3.1-8b" vs "meta-llama/llama-3.1-8b"
        tail = {n.rsplit("/", 1)[-1]: n for n in names}
        hits = [tail[h] for h in difflib.get_close_matches(key.rsplit("/", 1)[-1], list(tail), n=n, cutoff=0.4)]
    seen: list[str] = []
    for h in hits:
        canonical = _index()[h]
        # Show the spelling the user is likely to type: the alias hit, not always the canonical id.
        shown = next((a for a in [canonical, *entries()[canonical]["aliases"]] if a.lower() == h), canonical)
        if shown not in seen:
            seen.append(shown)
    return seen




# A parameter count in a checkpoint's name, at word boundaries: 7b, 1.5B, 350m; ModelScope's 1___5B and 1_8b are 1.5b
# and 1.8b (_spelling turns `_` into `-`, so the decimal underscore is read first)
_NOMINAL = re.compile(r"(?:^|[-.])(\d+(?:\.\d+)?)([bm])(?=$|[-.])")
_DECIMAL_UNDERSCORE = re.compile(r"(?<=\d)_+(?=\d+[bm](?:$|[-_.]))")
# a mixture of experts' name (8x7b, 30b-a3b, 16e, e4b) or a vision-language model's: the total says nothing of
# what a dense decoder of that size holds
_NOT_DENSE = re.compile(r"(?:^|[-.])(?:\d+x\d+(?:\.\d+)?b|a\d+(?:\.\d+)?b|\d+e|e\d+b|vl|vision|mm|moe|siglip|clip|"
                        r"llava|vit|omni|audio|speech)(?:$|[-.])")


def naming_component(model_id: str) -> str:
    """The path component that names a checkpoint: its last, or, for a local folder a training run saved
    (/models/luacoder-7b/beta2/checkpoint-2272, ./out/qwen-1.5b-sft/step_500), the nearest of its last three that
    gives a size, the ones after it naming the run's saves and saying nothing of other weights (no adapter, export or
    second size). A Hub id (org/name) is its name."""
    parts = [p for p in model_id.strip().replace("\\", "/").rstrip("/").split("/") if p not in ("", ".", "..", "~")]
    last = parts[-1] if parts else ""
    local = model_id.strip().startswith(("/", "./", "../", "~")) or len(parts) > 2
    if not local or _sizes(last):
        return last
    for i in range(len(parts) - 2, max(len(parts) - 4, -1), -1):
        after = parts[i + 1:]
        if any(_NOT_SAME_SHAPES.search(p.lower()) or _sizes(p) for p in after):
            return last
        if len(_sizes(parts[i])) == 1:
            return parts[i]
    return last


def _sizes(component: str) -> set[float]:
    text = _spelling(_DECIMAL_UNDERSCORE.sub(".", component.lower()))
    return {float(n) * (1e9 if unit == "b" else 1e6) for n, unit in _NOMINAL.findall(text)}


def nominal_params(name: str) -> int | None:
    """The parameter count a checkpoint's name (its naming path component) gives, when it gives exactly one: 13B for
    llm-jp-13b-v1.0, 1.5B for qwen-1.5b and Qwen2___5-1___5B; None for no size or two different sizes."""
    text = _DECIMAL_UNDERSCORE.sub(".", naming_component(name).lower())
    text = _spelling(text)
    sizes = {float(n) * (1e9 if unit == "b" else 1e6) for n, unit in _NOMINAL.findall(text)}
    return int(sizes.pop()) if len(sizes) == 1 else None


def _dense_decoder(entry: Mapping[str, Any]) -> bool:
    arch = entry.get("arch", {})
    return (not entry.get("text_only") and not entry.get("vision") and not arch.get("encoder")
            and not arch.get("encoder_decoder") and not entry.get("groups", {}).get("experts"))


def size_candidates(model_id: str) -> tuple[str, ...]:
    """The catalogued dense decoders a checkpoint the catalog lacks may be shaped like, by the parameter count its
    name gives (and its family, when a word of its name is a catalogued family's: qwen-1.5b is a Qwen): those whose
    own name gives the same count, else those of its family within 35 % of it; sorted by parameter count. Empty for
    a name without exactly one size, a mixture of experts, a vision-language model, or a name that says its weights
    are not a dense checkpoint's (a GPTQ / AWQ / GGUF export, an adapter, a pruned or distilled model)."""
    name = _spelling(naming_component(model_id))
    nominal = nominal_params(model_id)
    if nominal is None or _NOT_SAME_SHAPES.search(name) or _NOT_DENSE.search(name):
        return ()
    words = set(_NAME.findall(name))
    dense = {mid: e for mid, e in entries().items() if _dense_decoder(e)}
    family = {mid: e for mid, e in dense.items() if _family_word(e.get("family", "")) in words}

    def named_size(mid: str) -> bool:
        return any(nominal_params(n) == nominal for n in (mid, *dense[mid].get("aliases", ())))

    hits = [mid for mid in family if named_size(mid)]
    if not hits and family:
        hits = [mid for mid, e in family.items() if abs(e["params"] - nominal) <= 0.35 * nominal]
    if not hits and not family:
        hits = [mid for mid in dense if named_size(mid)]
    shapes: dict[int, str] = {}  # one checkpoint per parameter count (Qwen2-1.5B, Qwen2.5-1.5B: one shape), the shortest id
    for mid in sorted(hits, key=lambda mid: (len(mid), mid)):
        shapes.setdefault(dense[mid]["params"], mid)
    return tuple(shapes[p] for p in sorted(shapes))


def sized_by_name(model_id: str) -> ModelSpec | None:
    """A checkpoint the catalog lacks, named with its size (llm-jp/llm-jp-13b-v1.0, /data/qwen-1.5b,
    h2oai/h2o-danube2-1.8b-base): sized as the catalogued dense decoder of that size in the middle of the range
    (size_candidates), marked as an assumption (source "size-name", every report says so, and the estimate says the
    range the other candidates, size_candidates(assumed_from), give). Never for a placeholder or when no catalogued checkpoint has that size."""
    from memlint.catalog.names import is_placeholder

    text = model_id.strip()
    last = naming_component(text)
    if not last or is_placeholder(last) or (is_placeholder(text) and _BARE_SIZE.match(last.lower())):
        return None  # `<model-13b>`; `/path/to/13B` names a size and nothing else (`/path/to/llm-jp-13b` names one)
    if _misspelt(text):
        return None
    hits = size_candidates(text)
    if not hits:
        return None
    middle = hits[(len(hits) - 1) // 2]
    return replace(spec_from_entry(middle, entries()[middle], source="size-name"), assumed_from=text)


def _misspelt(model_id: str) -> bool:
    """A Hub id of an organisation the catalog holds, spelled almost like one of its catalogued checkpoints of the same
    size (meta-llama/Llama-3.1-8b-instrct): a misspelling, for the error to name the closest, not a model to size."""
    if not _HUB_ID.match(model_id) or "/" not in model_id:
        return False
    key = model_id.lower()
    org, size = key.split("/", 1)[0], nominal_params(key)
    return any(k.split("/", 1)[0] == org and nominal_params(k) == size
               and difflib.SequenceMatcher(None, key, k).ratio() >= 0.93 for k in _index() if "/" in k)
