"""NVIDIA NeMo 1.x / NeMo-Megatron training YAML (Hydra): `python megatron_gpt_pretraining.py --config-name
megatron_llama_config`, `megatron_gpt_finetuning.py` with tuning/conf/megatron_gpt_finetuning_config.yaml, and the
NeMo-Framework-Launcher's stage files (launcher_scripts/conf/peft/llama/squad.yaml ...).

Read as NeMo reads them (nemo/collections/nlp/parts/megatron_trainer_builder.py, models/language_modeling/
megatron_base_model.py, parts/peft_config.py): `trainer` is Lightning's (devices, num_nodes, precision), `model`
the MegatronGPTModel config (micro/global batch, tensor/pipeline/context parallel sizes, sequence_parallel,
megatron_amp_O2, activations_checkpoint_*, optim.name, peft). `${...}` references are resolved first
(configs/interpolate.py); the launcher's `${peft.model.x}` (the stage mounted under its group) is the file's own
`model.x`. Gradient accumulation is NeMo's: global_batch_size / (micro_batch_size × data-parallel size), the
data-parallel size devices × num_nodes / (TP × PP × CP). A fine-tuning config names no architecture (it is inside
the .nemo checkpoint): the model is then unknown; a pretraining config's shape (num_layers, hidden_size,
ffn_hidden_size, num_attention_heads, num_query_groups) is matched to the catalog model of the same shape.
Facts that drift with NeMo versions are data (frameworks.json "nemo").
"""

from __future__ import annotations

import math
import re
from typing import Any

from memlint.extract.configs import frameworks
from memlint.extract.configs.common import Bad
from memlint.extract.configs.document import Document
from memlint.extract.configs.interpolate import resolve
from memlint.extract.configs.readers import FrameworkReader
from memlint.library.versions import in_range, installed_version
from memlint.plan import Value

_REF = re.compile(r"\$\{([A-Za-z_]\w*)\.")
_MISSING = "???"  # OmegaConf's mandatory value: given on the command line (Hydra override) or the run fails
_FULL = (None, "none", "null", "")


def _groups_to_own_keys(doc: Document, groups: list[str]) -> bool:
    """`${peft.model.x}` -> `${model.x}` where `peft` is a launcher group and not a key of the file."""
    top = set(doc.data) if isinstance(doc.data, dict) else set()
    names = {g for g in groups if g not in top}
    changed = False

    def fix(v: Any) -> Any:
        nonlocal changed
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, str) and "${" in v:
            out = _REF.sub(lambda m: "${" if m.group(1) in names else m.group(0), v)
            changed = changed or out != v
            return out
        return v

    doc.data = fix(doc.data)
    return changed


_RESOLVER = re.compile(r"^\$\{([a-z_]+):\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\}$")
_OPS = {"mul": lambda x, y: x * y, "add": lambda x, y: x + y,
        "ceil_div": lambda x, y: int(math.ceil(x / y)), "floor_div": lambda x, y: int(math.floor(x / y))}


def _num(text: str) -> int | float:
    return float(text) if "." in text else int(text)


def _apply_resolvers(doc: Document, res: Any, table: dict) -> None:
    """`${multiply:4, 4096}` (left by interpolate.py once its inner references are resolved) -> 16384, for the
    resolvers NeMo and its launcher register (frameworks.json "nemo" "resolvers"); any other stays unresolved."""

    def walk(v: Any, at: tuple) -> Any:
        if isinstance(v, dict):
            return {k: walk(x, at + (k,)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, at + (i,)) for i, x in enumerate(v)]
        m = _RESOLVER.match(v) if isinstance(v, str) else None
        if m is None or m.group(1) not in table or m.group(1).startswith("_"):
            return v
        x, y = _num(m.group(2)), _num(m.group(3))
        if table[m.group(1)] in ("ceil_div", "floor_div") and y == 0:
            return v
        out = _OPS[table[m.group(1)]](x, y)
        res.unresolved.pop(at, None)
        res.how[at] = f"{res.how[at].rsplit(' -> ', 1)[0] if at in res.how else v} -> {v} -> {out!r}"
        return out

    doc.data = walk(doc.data, ())


_MARKERS = {"model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.megatron_amp_O2"}
_MARKERS_TEXT = re.compile(r"^[ \t]+(?:tensor_model_parallel_size|pipeline_model_parallel_size|megatron_amp_O2)[ \t]*:",
                           re.M)


class NeMo(FrameworkReader):
    kind = "nemo"
    rank = 30

    @staticmethod
    def matches(keys: set[str], text: str) -> bool:
        # NeMo 1.x / NeMo-Megatron: Lightning's `trainer:` beside a MegatronGPTModel `model:` with its parallel sizes
        return {"trainer", "model"} <= keys and bool(
            keys & _MARKERS or {"model.micro_batch_size", "model.global_batch_size"} <= keys or _MARKERS_TEXT.search(text))

    @staticmethod
    def not_training(doc: Document) -> str | None:
        """A generation/evaluation config (tuning/conf/megatron_gpt_generate_config.yaml: `inference:` beside the
        model, run by megatron_gpt_generate.py) trains nothing."""
        if doc.ok and isinstance(doc.get("run"), dict) and {"huggingface_ckpt_path", "nemo_file_name"} & set(doc.get("run")):
            return ("a NeMo-Framework-Launcher conversion stage (a Hugging Face checkpoint to .nemo, run.nemo_file_name): "
                    "it trains nothing, so there is no training step to size")
        if doc.ok and "inference" in doc.data:
            return ("a NeMo generation/evaluation config (an `inference:` section, run by megatron_gpt_generate.py or "
                    "megatron_gpt_eval.py): it trains nothing, so there is no training step to size")
        return None

    def read(self) -> None:
        self.facts = frameworks.framework(self.kind)
        if _groups_to_own_keys(self.doc, self.facts["launcher_groups"]["names"]):
            self.notes.append("${<group>.model...} references read as the file's own keys (NeMo-Framework-Launcher "
                              "mounts the stage config under its group)")
        self.res = resolve(self.doc)
        _apply_resolvers(self.doc, self.res, self.facts["resolvers"])
        for path, why in self.res.unresolved.items():
            self.unread[path] = why
        self.world = self.dp = None
        self._parallel()
        self._batch()
        self._precision()
        self._model()
        self._peft()
        self._sequence()
        self._recompute()
        self._optimizer()
        self.trainer(*frameworks.substitution(self.kind, "trainer"))
        self.lib("attn_implementation", *frameworks.substitution(self.kind, "attn_implementation"))
        self.lib("group_by_length", *frameworks.substitution(self.kind, "group_by_length"))
        self.lib("fused_loss", *frameworks.substitution(self.kind, "fused_loss"))
        self.lib("offload", "none", "NeMo's Megatron strategy keeps parameters, gradients and optimizer states on the GPU")
        if self.doc.get("model", "fp8") is True:
            self.notes.append("model.fp8: Transformer Engine FP8 GEMMs are not modelled; estimated in the 16-bit "
                              "precision (an upper bound on the saved activations)")
        self._check_keys()

    # ---- helpers -------------------------------------------------------------------------------

    def lit(self, name: str, value: Any, *path: Any, chain: tuple[str, ...] = ()) -> None:
        how = self.res.how.get(tuple(path))
        if how and not chain:
            chain = (f"{'.'.join(map(str, path))}: {how}",)
        super().lit(name, value, *path, chain=chain)

    def _default(self, key: str):
        d = frameworks.default(self.kind, key)
        assert d is not None, key
        return d

    def _int(self, *path: str, default: str | None = None, name: str | None = None) -> tuple[int | None, bool]:
        """(the integer at `path` or the default of `default`, whether the file says it); (None, True) when the
        file's value is unreadable (already a diagnostic, or unresolved), `name` then unknown."""
        where = ".".join(path)
        v = self.doc.get(*path)
        if v == _MISSING:
            if name:
                self.unknown(name, f"{where} is ??? (mandatory: given on the command line)", *path)
            return None, True
        try:
            n = self.int_at(*path)
        except Bad:
            if name:
                why = self.unread.get(tuple(path)) or "is not an integer"
                self.unknown(name, f"{where} {why}", *path)
            return None, True
        if n is not None:
            if name:
                self.lit(name, n, *path)
            return n, True
        if default is None:
            return None, False
        d = self._default(default)
        if name:
            self.lib(name, d.value, d.why)
        return d.value, False

    def _field_version(self, field: str) -> None:
        """A key of a NeMo release other than the installed one is said (frameworks.json "nemo" "fields")."""
        version = installed_version(self.facts["package"])
        entry = self.facts["fields"][field][0]
        if version is not None and not in_range(version, entry["versions"]):
            self.notes.append(f"{field} is read by NeMo {entry['versions']}, not by the installed {version}: {entry['ref']}")

    # ---- sections ------------------------------------------------------------------------------

    def _parallel(self) -> None:
        m = "model"
        tp, _ = self._int(m, "tensor_model_parallel_size", default="model.tensor_model_parallel_size", name="tp_size")
        pp, _ = self._int(m, "pipeline_model_parallel_size", default="model.pipeline_model_parallel_size")
        cp, _ = self._int(m, "context_parallel_size", default="model.context_parallel_size", name="cp_size")
        nodes, _ = self._int("trainer", "num_nodes", default="trainer.num_nodes")
        self.pp = pp
        devices = self.doc.get("trainer", "devices")
        dev_path = ("trainer", "devices")
        if isinstance(devices, list) and devices:
            ndev = len(devices)
        elif devices is None or devices in ("auto", -1, "-1") or devices == _MISSING:
            ndev = None
            self.notes.append("trainer.devices " + (f"{devices!r}" if devices is not None else "not set (Lightning's 'auto')")
                              + ": every visible GPU, which the config does not say: pass --gpus N (or --assume gpus=N)")
        else:
            try:
                ndev = self.int_at(*dev_path)
            except Bad:
                ndev = None
        sp = self.doc.get(m, "sequence_parallel")
        if isinstance(sp, bool):
            if sp and tp == 1:  # megatron_base_model.py: "Sequence parallel should only be used with tensor parallel size > 1"
                self.lit("sequence_parallel", False, m, "sequence_parallel",
                         chain=("model.sequence_parallel: true with tensor_model_parallel_size 1: NeMo sets it to False "
                                "(megatron_base_model.py)",))
            else:
                self.lit("sequence_parallel", sp, m, "sequence_parallel")
        else:
            d = self._default("model.sequence_parallel")
            self.lib("sequence_parallel", d.value, d.why)
        if (isinstance(tp, int) and tp > 1) or (isinstance(cp, int) and cp > 1):
            self.lib("tp_stack", "megatron", "NeMo's Megatron-core model: VocabParallelEmbedding, ColumnParallelLinear "
                                             "output layer, vocab-parallel cross-entropy")
        if isinstance(pp, int) and pp > 1:
            self.notes.append(f"pipeline_model_parallel_size = {pp}: pipeline parallelism is not modelled; estimated as if "
                              "one stage held every layer (an upper bound per rank)")
        sizes = (tp, pp, cp)
        if not all(isinstance(x, int) and x >= 1 for x in sizes) or not isinstance(nodes, int) or nodes < 1:
            if ndev is not None:
                self.unknown("num_gpus", "the model-parallel sizes are not all known")
            return
        if ndev is None or ndev < 1:
            return
        world = ndev * nodes
        mp = tp * pp * cp
        where = dev_path if self.doc.has(*dev_path) else ()
        if world % mp:
            self.bad(f"devices × num_nodes = {world} is not a multiple of tensor × pipeline × context parallel "
                     f"{tp} × {pp} × {cp} = {mp}: Megatron's initialize_model_parallel refuses it", *where)
            self.unknown("num_gpus", f"{world} GPUs do not divide into TP {tp} × PP {pp} × CP {cp}", *where)
            return
        self.world, self.dp = world, world // mp
        self.fields["num_gpus"] = Value(world // pp, "literal", self.doc.span(*where) if where else None,
                                        (f"trainer.devices {ndev} × num_nodes {nodes} = {world} GPUs: data-parallel "
                                         f"{self.dp} × tensor {tp} × context {cp}"
                                         + (f" (one of {pp} pipeline stages)" if pp > 1 else ""),))

    def _batch(self) -> None:
        m = "model"
        micro, _ = self._int(m, "micro_batch_size", name="per_device_batch")
        if "per_device_batch" not in self.fields:
            self.unknown("per_device_batch", "no model.micro_batch_size")
        glob, given = self._int(m, "global_batch_size")
        if not given or glob is None:
            self.unknown("grad_accum", "model.global_batch_size " + ("is not readable" if given else "not set"),
                         *((m, "global_batch_size") if self.doc.has(m, "global_batch_size") else ()))
            return
        if not isinstance(micro, int) or micro < 1 or self.dp is None:
            self.unknown("grad_accum", "global_batch_size / (micro_batch_size × data-parallel size) with "
                         + ("an unknown micro-batch" if not isinstance(micro, int) else "an unknown data-parallel size "
                            "(trainer.devices × num_nodes / (TP × PP × CP))"), m, "global_batch_size")
            return
        per_step = micro * self.dp
        if glob % per_step:
            self.bad(f"model.global_batch_size {glob} is not a multiple of micro_batch_size {micro} × data-parallel size "
                     f"{self.dp} = {per_step}: Megatron's microbatch calculator refuses it", m, "global_batch_size")
            self.unknown("grad_accum", "global_batch_size does not divide", m, "global_batch_size")
            return
        self.lit("grad_accum", glob // per_step, m, "global_batch_size",
                 chain=(f"global_batch_size {glob} / (micro_batch_size {micro} × data-parallel {self.dp}) micro-batches "
                        "per step (Megatron's num_microbatches)",))

    def _precision(self) -> None:
        table = self.facts["precision"]
        where = ("trainer", "precision")
        raw = self.doc.get(*where)
        o2 = self.doc.get("model", "megatron_amp_O2") is True
        fsdp = self.doc.get("model", "fsdp") is True
        name = self.doc.get("model", "optim", "name")
        dist = isinstance(name, str) and name in self.facts["optimizers"] and self.facts["optimizers"][name][1]
        if raw is None:
            d = self._default("trainer.precision")
            raw, given, why = d.value, False, d.why
        else:
            given, why = True, ""
        key = str(raw).strip().lower()
        if key not in table:
            self.bad(f"trainer.precision {raw!r} is not one NeMo's trainer builder knows (16, bf16, 16-mixed, bf16-mixed, 32)",
                     *where)
            self.unknown("precision", f"trainer.precision {raw!r}", *where)
            self.lib("torch_dtype", "fp32", "NeMo's params_dtype is float32 unless megatron_amp_O2 with 16-bit precision")
            return
        if key in ("16-mixed", "bf16-mixed"):
            self._field_version("trainer.precision")
        half = table[key]
        if o2 and fsdp:
            self.notes.append("model.fsdp with megatron_amp_O2: NeMo sets megatron_amp_O2 False (megatron_trainer_builder.py)")
            o2 = False
        if half == "fp32":
            prec, dtype, how = "fp32", "fp32", "fp32 throughout (no precision plugin)"
        elif not o2:
            prec, dtype = ("amp-bf16" if half == "bf16" else "amp-fp16"), "fp32"
            how = (f"{half} autocast over fp32 parameters (params_dtype float32 without megatron_amp_O2; "
                   "PipelineMixedPrecisionPlugin)")
        elif half == "fp16" and not dist:
            self.bad("trainer.precision 16 with megatron_amp_O2 and a non-distributed optimizer: NeMo raises 'fp16 training "
                     "is not yet supported with O2' (megatron_base_model.py configure_optimizers)", "model", "megatron_amp_O2")
            self.unknown("precision", "fp16 with megatron_amp_O2", "model", "megatron_amp_O2")
            self.lib("torch_dtype", "fp16", "megatron_amp_O2: params_dtype is the 16-bit type")
            return
        else:
            prec, dtype = "master-fp32", "bf16"
            how = (f"megatron_amp_O2: {half} parameters (Float16Module) with fp32 main parameters in the optimizer"
                   + (" (fp16 counted as bf16: the same 2 B)" if half == "fp16" else ""))
            if not dist:
                self.notes.append("megatron_amp_O2: MainParamsOptimizerWrapper accumulates gradients in fp32 main_grad "
                                  "buffers (fp32_grad_accum); counted as 16-bit gradients (2 B per trainable parameter "
                                  "under)")
        chain = (f"trainer.precision {raw!r}: {how}",)
        if given:
            self.lit("precision", prec, *where, chain=chain)
        else:
            self.lib("precision", prec, why + "; " + how)
        o2_path = ("model", "megatron_amp_O2")
        if self.doc.has(*o2_path) and prec != "fp32":
            self.lit("torch_dtype", dtype, *o2_path, chain=(f"megatron_amp_O2 {o2}: {how}",))
        else:
            self.lib("torch_dtype", dtype, self._default("model.megatron_amp_O2").why + "; " + how)

    def _model(self) -> None:
        m = "model"
        # the base checkpoint: restore_from_path (pretraining, SFT, PEFT), language_model_path (the prompt-learning,
        # adapter and IA3 models of NeMo <= 1.x, megatron_gpt_prompt_learning_model.py / the launcher's stages)
        key = next((k for k in ("restore_from_path", "language_model_path") if self.doc.get(m, k) is not None), "restore_from_path")
        restore, where = self.doc.get(m, key), f"model.{key}"
        family = self._family()
        if family is not None:
            self.unknown("model_id", f"{family[0]}: memlint sizes decoder-only GPT-style models (MegatronGPTModel), not "
                                     "this NeMo model family", *family[1])
            return
        if self._shape() is not None:
            return
        if isinstance(restore, str) and restore.strip() and restore != _MISSING:
            r = restore.strip()
            from memlint.catalog import catalog_entry

            if not r.endswith(".nemo") and "/" in r and not r.startswith(("/", ".", "~", "$")) and catalog_entry(r):
                self.lit("model_id", r, m, key)
                return
            why = (f"{where} {r!r}: the architecture is inside the NeMo checkpoint, not in this config"
                   if (m, key) not in self.unread else f"{where} {self.unread[(m, key)]}")
            self.unknown("model_id", why + "; pass --model ID (the Hugging Face model it was converted from)", m, key)
            return
        if restore == _MISSING:
            self.unknown("model_id", f"{where} is ??? (the .nemo checkpoint is given on the command line); "
                                     "pass --model ID", m, key)
            return
        self.unknown("model_id", "neither model.restore_from_path nor the model's shape (num_layers, hidden_size, ...)",
                     *((m,) if self.doc.has(m) else ()))

    def _family(self) -> tuple[str, tuple] | None:
        """(what, key path) of a NeMo model family other than GPT (frameworks.json "nemo" "not_gpt"), or None."""
        m = "model"
        if isinstance(self.doc.get(m, "encoder"), dict) and isinstance(self.doc.get(m, "decoder"), dict):
            return "an encoder-decoder model (model.encoder + model.decoder: T5/BART-style)", (m, "encoder")
        if isinstance(self.doc.get(m, "mm_cfg"), dict):
            return "a multimodal model (model.mm_cfg: NeVA-style)", (m, "mm_cfg")
        words = self.facts["not_gpt"]["words"]
        for path in (("name",), (m, "name")):
            name = self.doc.get(*path)
            if isinstance(name, str):
                hit = next((w for w in re.split(r"[^a-z0-9]+", name.lower()) if w in words), None)
                if hit:
                    return f"name {name!r}: {words[hit]}", path
        return None

    def _shape(self) -> bool | None:
        """model_id from the config's own architecture (a pretraining config), matched to the catalog; None when
        the config gives no shape."""
        m = "model"
        keys = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads")
        vals = {k: self.doc.get(m, k) for k in keys}
        if all(v is None for v in vals.values()):
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in vals.values()):
            bad = [k for k, v in vals.items() if not (isinstance(v, int) and not isinstance(v, bool) and v > 0)]
            self.unknown("model_id", f"the model's shape is incomplete (model.{', model.'.join(bad)} not a positive integer)",
                         m, *(bad[:1] if self.doc.has(m, bad[0]) else ()))
            return True
        groups = self.doc.get(m, "num_query_groups")
        groups = groups if isinstance(groups, int) and not isinstance(groups, bool) and groups > 0 else vals["num_attention_heads"]
        act = self.doc.get(m, "activation")
        act = act if isinstance(act, str) else "gelu"  # megatron_gpt_model.py cfg.get('activation', 'gelu')
        mlp = "gated" if "glu" in act.lower() else "plain"
        norm = self.doc.get(m, "normalization")
        norm = "rmsnorm" if isinstance(norm, str) and norm.lower() == "rmsnorm" else "layernorm"  # cfg.get('normalization', 'layernorm')
        kv = self.doc.get(m, "kv_channels")
        experts = self.doc.get(m, "num_moe_experts")
        experts = experts if isinstance(experts, int) and not isinstance(experts, bool) and experts > 1 else None
        from memlint.catalog import entries

        found = []
        for mid, e in sorted(entries().items()):
            a = e.get("arch") or {}
            if (a.get("num_layers"), a.get("hidden_size"), a.get("intermediate_size"), a.get("num_heads"),
                    a.get("num_kv_heads"), a.get("mlp")) == (vals["num_layers"], vals["hidden_size"], vals["ffn_hidden_size"],
                                                              vals["num_attention_heads"], groups, mlp) \
                    and a.get("norm") == norm and (not isinstance(kv, int) or a.get("head_dim") == kv) \
                    and (a.get("num_experts") or None) == experts:
                found.append((mid, e))
        what = (f"model shape: {vals['num_layers']} layers, hidden {vals['hidden_size']}, ffn {vals['ffn_hidden_size']}, "
                f"{vals['num_attention_heads']} heads, {groups} query groups, {mlp} MLP ({act}), {norm}"
                + (f", {experts} experts" if experts else ""))
        span_path = (m, "num_layers") if self.doc.has(m, "num_layers") else (m,)
        if not found:
            self.unknown("model_id", f"{what}: no catalog model of that shape", *span_path)
            return True
        tok = self.doc.get(m, "tokenizer", "type")
        words = set(re.findall(r"[a-z]+", str(self.doc.get("name") or "").lower())) - {"megatron", "nemo", "gpt", "config"}
        # the config's name's family first, then the shortest id (a base before its -it / -chat variants)
        found.sort(key=lambda f: (not any(w in f[0].lower() for w in words), len(f[0]), f[0]))
        ids = [mid for mid, _ in found]
        pick = None
        named = [mid for mid, e in found if isinstance(tok, str) and tok.strip().lower() in
                 {mid.lower(), *(x.lower() for x in e.get("aliases", []))}]
        if named:
            pick, how = named[0], f"model.tokenizer.type {tok!r} names it"
        elif len({e["params"] for _, e in found}) == 1:
            pick, how = ids[0], "the only catalog shape" + (f" (the same as {', '.join(ids[1:4])})" if len(ids) > 1 else "")
        if pick is None:
            self.unknown("model_id", f"{what}: {len(ids)} catalog models of that shape with different vocabularies "
                                     f"({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}); the tokenizer decides: "
                                     "pass --model ID", *span_path)
            return True
        vocab = dict(found)[pick]["arch"].get("vocab_size")
        self.fields["model_id"] = Value(pick, "literal", self.doc.span(*span_path), (
            what, f"matched the catalog's {pick}: {how}",
            f"the vocabulary is the tokenizer's, not in the config: {pick}'s {vocab} counted"))
        self.notes.append(f"model_id {pick} matched by the config's shape (num_layers, hidden_size, ffn_hidden_size, heads, "
                          "query groups); its vocabulary and tied embeddings are the catalog model's")
        return True

    def _peft(self) -> None:
        peft = ("model", "peft")
        scheme = self.doc.get(*peft, "peft_scheme")
        self.lib("quant_bits", None, "NeMo quantizes the base only under peft_scheme qlora")
        if not isinstance(self.doc.get(*peft), dict) or (isinstance(scheme, str) and scheme.lower() in _FULL) or scheme is None:
            if self.doc.has(*peft, "peft_scheme"):
                self.lit("method", "full", *peft, "peft_scheme", chain=(f"peft_scheme {scheme!r}: every parameter trains "
                                                                         "(PEFT_CONFIG_MAP none -> no adapters)",))
            else:
                self.lib("method", "full", "no model.peft: every parameter trains")
            return
        s = str(scheme).lower()
        if s not in ("lora", "qlora"):
            self.unknown("method", f"peft_scheme {scheme!r} ({'p-tuning prompt encoder' if s == 'ptuning' else 'adapters'}) "
                                   "is not modelled (memlint models full, LoRA and QLoRA)", *peft, "peft_scheme")
            return
        self.lit("method", s, *peft, "peft_scheme")
        lt = peft + ("lora_tuning",)
        if s == "qlora":
            self.lit("quant_bits", 4, *peft, "peft_scheme",
                     chain=("peft_scheme qlora: NF4Weight (adapters/qlora.py) quantizes the base linears with modelopt's "
                            "NF4 (block 64, 8-bit scales per 256): counted like bitsandbytes' double-quantized NF4",))
            self.lit("quant_type", "nf4", *peft, "peft_scheme")
            self.lit("double_quant", True, *peft, "peft_scheme")
        r, _ = self._int(*lt, "adapter_dim", name="lora_r")
        if "lora_r" not in self.fields:
            self.unknown("lora_r", "no model.peft.lora_tuning.adapter_dim (LoraPEFTConfig reads it)")
        if self.doc.get(*lt, "alpha") is not None:
            self._field_version("lora_tuning.target_modules")  # alpha arrived with target_modules (v2.0.0)
            self._int(*lt, "alpha", name="lora_alpha")
        elif isinstance(r, int):
            v = self.fields["lora_r"]
            self.fields["lora_alpha"] = Value(r, v.source, v.span, ("lora_cfg.get('alpha', lora_cfg.adapter_dim) "
                                                                   "(peft_config.py)",))
        else:
            self.unknown("lora_alpha", "alpha defaults to adapter_dim, which is unknown")
        if self.doc.has(*lt, "adapter_dropout"):
            self.number_field("lora_dropout", *lt, "adapter_dropout")
        else:
            self.lib("lora_dropout", 0.0, "lora_tuning.adapter_dropout not set (ParallelLinearAdapterConfig dropout 0.0)")
        self._targets(lt)
        if self.doc.get(*lt, "layer_selection") not in (None, []):
            self.notes.append("lora_tuning.layer_selection: adapters on some layers only; memlint counts them on every "
                              "layer (an overestimate)")

    def _targets(self, lt: tuple) -> None:
        table = self.facts["lora_targets"]
        t = self.doc.get(*lt, "target_modules")
        variant = self.doc.get(*lt, "variant")
        if t is None:
            d = self._default("model.peft.lora_tuning.target_modules")
            names, given = d.value, False
        else:
            self._field_version("lora_tuning.target_modules")
            names, given = ([t] if isinstance(t, str) else t), True
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            self.unknown("lora_targets", "lora_tuning.target_modules is not a list of names", *lt, "target_modules")
            return
        bad = [x for x in names if x not in table or x.startswith("_")]
        if bad:
            self.bad(f"lora_tuning.target_modules {bad[0]!r} is not one of NeMo's ({', '.join(k for k in table if k != '_doc')})",
                     *lt, "target_modules")
            self.unknown("lora_targets", f"target module {bad[0]!r}", *lt, "target_modules")
            return
        hf = list(dict.fromkeys(x for n in names for x in table[n]))
        chain = (f"target_modules {names!r}: {table['_doc']}",)
        if given:
            self.lit("lora_targets", hf, *lt, "target_modules", chain=chain)
        else:
            self.lib("lora_targets", hf, self._default("model.peft.lora_tuning.target_modules").why + "; " + chain[0])
        if variant != "canonical" and any(x in hf for x in ("q_proj", "gate_proj")):
            self.notes.append("LoRA variant 'nemo' puts one adapter on the fused linear_qkv / linear_fc1 (one A matrix "
                              "where memlint counts one per q/k/v or gate/up projection): the adapter count is slightly over")

    def _sequence(self) -> None:
        ds = ("model", "data", "train_ds")
        if self.doc.has(*ds, "max_seq_length"):
            n, _ = self._int(*ds, "max_seq_length", name="max_length")
            pos = self.doc.get("model", "max_position_embeddings")
            if isinstance(n, int) and isinstance(pos, int) and not isinstance(pos, bool) and n > pos:
                self.lit("max_length", pos, "model", "max_position_embeddings",
                         chain=(f"train_ds.max_seq_length {n} > max_position_embeddings {pos}: NeMo sets it to {pos} "
                                "(megatron_gpt_sft_model.py)",))
            if self.doc.get(*ds, "packed_sequence") is True:
                self.lit("packing", True, *ds, "packed_sequence")
                self.lit("padding", "packing", *ds, "packed_sequence")
                return
            self.lib("packing", False, "train_ds.packed_sequence not set: one sample per row (GPTSFTDataset)")
            pad = self.doc.get(*ds, "pad_to_max_length")
            if pad is True:
                self.lit("padding", "max_length", *ds, "pad_to_max_length")
            else:
                d = self._default("model.data.train_ds.pad_to_max_length")
                self.fields["padding"] = Value("longest", "literal" if pad is False else "library-default",
                                               self.doc.span(*ds, "pad_to_max_length"), (d.why,))
            return
        for path in (("model", "encoder_seq_length"), ("model", "data", "seq_length")):
            if self.doc.has(*path):
                self._int(*path, name="max_length")
                break
        else:
            self.unknown("max_length", "neither model.data.train_ds.max_seq_length nor model.encoder_seq_length")
        value, why = frameworks.substitution(self.kind, "padding_pretrain")
        self.lib("padding", value, why)
        self.lib("packing", True, why)

    def _recompute(self) -> None:
        m = "model"
        gran = self.doc.get(m, "activations_checkpoint_granularity")
        method = self.doc.get(m, "activations_checkpoint_method")
        n = self.doc.get(m, "activations_checkpoint_num_layers")
        gp = (m, "activations_checkpoint_granularity")
        if gran is None:
            if self.doc.has(*gp):
                self.lit("gradient_checkpointing", False, *gp)
            else:
                self.lib("gradient_checkpointing", False, "model.activations_checkpoint_granularity not set: no recompute")
            return
        if gran == "selective":
            self.lit("gradient_checkpointing", False, *gp,
                     chain=("granularity 'selective': Megatron recomputes only core attention (softmax, dropout); with "
                            "fused/flash attention no s x s scores are saved, so it is counted as no checkpointing",))
            return
        if gran != "full":
            self.bad(f"model.activations_checkpoint_granularity should be 'selective' or 'full', not {gran!r}", *gp)
            self.unknown("gradient_checkpointing", f"granularity {gran!r}", *gp)
            return
        mp = (m, "activations_checkpoint_method")
        if method not in ("uniform", "block"):
            self.bad("activations_checkpoint_granularity 'full' needs activations_checkpoint_method 'uniform' or 'block'"
                     f" (Megatron-core TransformerConfig raises), not {method!r}", *(mp if self.doc.has(*mp) else gp))
            self.unknown("gradient_checkpointing", f"full recompute with method {method!r}", *gp)
            return
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            np_ = (m, "activations_checkpoint_num_layers")
            self.bad(f"model.activations_checkpoint_num_layers should be an integer with method {method!r}, not {n!r}",
                     *(np_ if self.doc.has(*np_) else mp))
            self.unknown("gradient_checkpointing", "activations_checkpoint_num_layers unknown", *mp)
            return
        np_ = (m, "activations_checkpoint_num_layers")
        if method == "uniform":
            self.lit("gradient_checkpointing", True, *gp,
                     chain=(f"granularity 'full', method 'uniform', num_layers {n}: the input of every chunk of {n} "
                            "layer(s) saved, each chunk recomputed in backward",))
            if n > 1:
                self.notes.append(f"activations_checkpoint_num_layers {n} (uniform): a chunk of {n} layers is recomputed "
                                  f"at once, so backward holds {n} layers' activations; counted as one (an underestimate)")
            return
        layers = self.doc.get(m, "num_layers")
        if n == 0:
            self.lit("gradient_checkpointing", False, *np_, chain=("method 'block', num_layers 0: no layer checkpointed",))
            return
        if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
            self.lit("gradient_checkpointing", True, *gp)
            self.unknown("recompute_every", f"method 'block' checkpoints the first {n} layers of each pipeline stage, and "
                                            "the layer count is in the checkpoint, not the config", *np_)
            return
        per_stage = layers // self.pp if isinstance(self.pp, int) and self.pp >= 1 else layers
        self.lit("gradient_checkpointing", True, *gp,
                 chain=(f"method 'block', num_layers {n}: the first {min(n, per_stage)} of {per_stage} layers per stage "
                        "checkpointed",))
        if n < per_stage:
            k = math.ceil(per_stage / n)
            self.lit("recompute_every", k, *np_,
                     chain=(f"{n} of {per_stage} layers checkpointed, counted as every {k}th layer ({per_stage // k} "
                            "checkpointed" + (", an upper bound)" if per_stage % n else ")"),))

    def _optimizer(self) -> None:
        table = self.facts["optimizers"]
        where = ("model", "optim", "name")
        name = self.doc.get(*where)
        if name is None:
            d = self._default("model.optim.name")
            name, given, why = d.value, False, d.why
        else:
            given, why = True, ""
        fsdp = self.doc.get("model", "fsdp") is True
        if not isinstance(name, str) or name not in table or name.startswith("_"):
            self.unknown("optimizer", f"model.optim.name {name!r} is not an optimizer memlint models", *where)
            sharded = False
        else:
            opt, sharded = table[name]
            chain = (f"model.optim.name {name!r}: {table['_doc']}",)
            if given:
                self.lit("optimizer", opt, *where, chain=chain)
            else:
                self.lib("optimizer", opt, why + "; " + chain[0])
        if fsdp:
            strat = self.doc.get("model", "fsdp_sharding_strategy")
            value = {"full": "fsdp", "hybrid": "fsdp_hybrid", "grad": "fsdp_shard_grad_op", None: "fsdp"}.get(strat)
            if value is None:
                self.bad(f"model.fsdp_sharding_strategy should be full, hybrid or grad, not {strat!r}", "model", "fsdp_sharding_strategy")
                value = "fsdp"
            self.lit("distributed", value, "model", "fsdp", chain=(f"model.fsdp: torch FSDP ({strat or 'full'} sharding)",))
        elif sharded:
            self.lit("distributed", "zero1", *where,
                     chain=(f"{name}: optimizer states and fp32 main parameters sharded over the data-parallel ranks "
                            "(counted as ZeRO-1)",))
            self.notes.append(f"{name}: counted as ZeRO-1 with DeepSpeed's bucket sizes; its own buffers (contiguous grad "
                              "buffer, bf16 parameter remainders instead of fp32 main parameters) are approximated")
        else:
            self.lib("distributed", "none", "NeMo's Megatron data parallelism (DDP): every data-parallel rank holds the "
                                            "whole (TP/PP-split) model state")

    def _check_keys(self) -> None:
        self.checked_keys()
        for section, known in self.facts["section_keys"].items():
            self.checked_keys(known, {}, tuple(section.split(".")), f"{section} ")
