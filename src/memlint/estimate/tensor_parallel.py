"""Tensor parallelism (with or without sequence parallelism) and context parallelism, per rank.

Tensor parallelism over t ranks (Megatron-LM; Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4): the column-parallel linears (q, k, v, gate,
up) keep 1/t of their output features, the row-parallel ones (o, down) 1/t of their input features,
so the attention heads and the MLP intermediate are split t ways; norms stay replicated; the
embeddings and lm_head are split over the vocabulary where the stack's plan says so
(data/distributed.json "tensor_parallel").

The accounting is done on the *rank's model*: `rank_spec` returns the ModelSpec one TP rank holds
(heads / t, kv heads / t, intermediate / t, the sharded linears' shapes, the vocabulary-split
embeddings). Weights, gradients and optimizer states are then counted tensor by tensor as for one
GPU, and the per-op activation terms of activations.py scale exactly where a tensor is inside a TP
region (q/k/v, SDPA's output and logsumexp, the eager scores, the MLP intermediate and down_proj's
input); what sits between the regions (norm inputs, the residual stream, q/k/v's and gate/up's
input) keeps the full hidden size, divided by the sequence instead when sequence parallelism shards
it (activations.py `tp_sequence_shards`). The logits are full unless the loss is vocab-parallel.

Context parallelism over c ranks splits the sequence: every activation is that of s / c tokens,
plus the ring's K/V chunks in flight (approximate; `cp_transient`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from memlint import data
from memlint.errors import MemlintError
from memlint.vocab import DTYPE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from memlint.catalog import ModelSpec


def facts() -> dict:
    return data.load("distributed.json")["tensor_parallel"]


def stacks() -> tuple[str, ...]:
    return tuple(facts()["stacks"])


def stack(s: "Setup") -> dict:
    return facts()["stacks"][s.tp_stack]


def loss_parallel(s: "Setup") -> bool:
    """The loss runs on vocabulary-split logits (torchtitan's loss_parallel, Megatron's
    vocab_parallel_cross_entropy): each rank holds s·b·V/t of them."""
    if s.tp == 1:
        return False
    return stack(s)["loss_parallel"] if s.loss_parallel is None else s.loss_parallel


def sequence_parallel(s: "Setup") -> bool:
    return s.tp > 1 and (s.sequence_parallel or stack(s)["sequence_parallel"] == "always")


def _split(n: int, t: int) -> int:
    """The largest shard of n split t ways (torch's Shard placement: ceil)."""
    return -(-n // t)


def validate(s: "Setup") -> None:
    for name in ("tp", "cp"):
        v = getattr(s, name)
        if not isinstance(v, int) or v < 1:
            raise MemlintError(f"--{name} must be a positive integer")
    if s.tp_stack not in stacks():
        raise MemlintError(f"invalid tp_stack {s.tp_stack!r}; expected one of: {', '.join(stacks())}")
    if s.gpus % (s.tp * s.cp):
        raise MemlintError(f"--gpus {s.gpus} is not a multiple of --tp {s.tp} × --cp {s.cp}")
    if s.sequence_parallel and s.tp == 1:
        raise MemlintError("--sequence-parallel shards what lies between the tensor-parallel regions: it needs --tp 2 or more")
    if s.sequence_parallel and stack(s)["sequence_parallel"] == "never":
        raise MemlintError(f"the {s.tp_stack} TP plan has no sequence parallelism: use --tp-stack torchtitan or megatron")
    if s.tp == 1 and s.cp == 1:
        return
    if s.shard == "fsdp_hybrid" and s.dp % s.nodes:
        raise MemlintError(f"{s.dp} data-parallel ranks do not split over --nodes {s.nodes}")
    if s.tp > 1 and not s.model.arch.get("tp"):
        m = s.model
        for what, n in (("attention heads", m.heads), ("key/value heads", m.kv_heads), ("MLP intermediate", m.intermediate)):
            if n % s.tp:
                raise MemlintError(f"--tp {s.tp} does not divide the {what} ({n}) of {m.id}")
        if s.quant != "none":
            raise MemlintError("--tp with a quantized base is not modelled (bitsandbytes / GPTQ layers are not "
                               "tensor-parallel styles)")
        if m.arch.get("num_experts"):
            raise MemlintError("--tp on a mixture-of-experts model is not modelled (expert parallelism differs)")
    if s.cp > 1 and s.attn in ("eager",):
        raise MemlintError("--cp runs ring attention over SDPA / FlashAttention: not with --attn eager")


def _role(name: str) -> str | None:
    f = facts()
    short = name.rsplit(".", 1)[-1]
    if short in f["colwise"]:
        return "colwise"
    if short in f["rowwise"]:
        return "rowwise"
    return None


def rank_spec(s: "Setup") -> "ModelSpec":
    """The model one TP rank holds. Parameter counts are exact for the shapes (ceil where torch's
    Shard placement splits unevenly); `arch["tp"]` marks it, so it is never split twice."""
    m = s.model
    t = s.tp
    if t == 1 or m.arch.get("tp"):
        return m
    st = stack(s)
    linears = []
    for l in m.linears:
        role = "colwise" if l.name == "lm_head" and st["lm_head"] == "vocab" else _role(l.name)
        if role == "colwise":  # output features (and their bias) split
            linears.append(replace(l, out_features=_split(l.out_features, t)))
        elif role == "rowwise":  # input features split; the bias is added once, replicated
            linears.append(replace(l, in_features=_split(l.in_features, t)))
        else:
            linears.append(l)
    linears = tuple(linears)
    groups = dict(m.groups)
    old_layer = sum(l.params for l in m.linears if l.name != "lm_head")
    new_layer = sum(l.params for l in linears if l.name != "lm_head")
    if "linear" in groups:
        groups["linear"] = groups["linear"] - old_layer + new_layer
    head_old = next((l.params for l in m.linears if l.name == "lm_head"), 0)
    head_new = next((l.params for l in linears if l.name == "lm_head"), 0)
    if groups.get("lm_head"):
        groups["lm_head"] = groups["lm_head"] - head_old + head_new
    arch = dict(m.arch)
    V, h = m.vocab, m.hidden
    rows = V
    if st["embeddings"] == "vocab" or (m.tied_embeddings and st["lm_head"] == "vocab"):
        # a tied lm_head shares the embedding's weight: splitting one splits both
        rows = _split(V, t)
        groups["embeddings"] = groups["embeddings"] - V * h + rows * h
    arch.update(num_heads=m.heads // t, num_kv_heads=m.kv_heads // t, intermediate_size=m.intermediate // t,
                embedding_rows=rows, tp=t)
    params = m.params - old_layer + new_layer - head_old + head_new - (V - rows) * h
    return replace(m, params=params, groups=groups, linears=linears, arch=arch)


def embedding_grad_extra(s: "Setup", grad_bytes: int) -> int:
    """torch's RowwiseParallel embedding (torchtitan) leaves a gradient storage of the full V x h on each
    rank (measured: data/distributed.json embedding_grad_citation); Megatron's VocabParallelEmbedding
    keeps its shard's. `s` is the rank's setup."""
    m = s.model
    if s.tp == 1 or s.method != "full" or not stack(s).get("embedding_grad_full"):
        return 0
    rows = m.arch.get("embedding_rows", m.vocab)
    return (m.vocab - rows) * m.hidden * grad_bytes if rows < m.vocab else 0


def gathered_logits_shard(s: "Setup") -> int:
    """Elements of the rank's own logits shard alive beside the all-gathered logits (lm_head's output
    gathered to full, no loss parallelism): s·b·⌈V/t⌉."""
    if s.tp == 1 or loss_parallel(s) or stack(s)["lm_head"] != "vocab":
        return 0
    return s.seq * s.batch * _split(s.model.vocab, s.tp)


def cp_transient(s: "Setup") -> int:
    """Ring attention's K/V chunks in flight on a rank: the local chunk's keys and values it
    computes on and the next rank's arriving, `kv_chunks_in_flight` of them (approximate)."""
    if s.cp == 1:
        return 0
    m = rank_spec(s)
    chunk = _split(s.seq, s.cp) * s.batch
    a = DTYPE_BYTES[s.compute_dtype]
    return facts()["context_parallel"]["kv_chunks_in_flight"] * 2 * m.kv_heads * m.head_dim * chunk * a


def notes(s: "Setup") -> list[str]:
    """What a TP / CP estimate assumes, for the estimate's assumptions."""
    out: list[str] = []
    if s.tp > 1:
        st = stack(s)
        sp = sequence_parallel(s)
        out.append(
            f"tensor parallel over {s.tp} ranks ({s.tp_stack} plan): q/k/v/gate/up column-parallel and o/down "
            f"row-parallel hold 1/{s.tp} of their weights, gradients and optimizer state; norms replicated; "
            f"embeddings {'split over the vocabulary' if st['embeddings'] == 'vocab' else 'replicated'}, lm_head "
            f"split over the vocabulary; activations inside attention and the MLP ÷ {s.tp}, between them "
            + (f"(norms, residual stream) ÷ {s.tp} by the sequence (sequence parallel)" if sp else
               "(norms, residual stream, the linears' shared inputs) replicated")
            + f"; logits {'vocab-parallel (÷ ' + str(s.tp) + ')' if loss_parallel(s) else 'all-gathered to full'}")
        if sp and st["sp_saves_gathered_input"]:
            out.append("sequence parallel in torch's DTensor styles: the all-gathered input of q/k/v and gate/up is "
                       "saved whole for their weight gradients (Megatron saves the shard and gathers again)")
        if s.method != "full":
            out.append("TP with LoRA: the frozen base is split like a full fine-tune's, the adapters counted whole on "
                       "every rank (not validated)")
        out.append("TP communication buffers (all-gather / reduce-scatter outputs in flight) are not counted "
                   "separately: approximate")
    if s.cp > 1:
        out.append(f"context parallel over {s.cp} ranks: activations and logits of ⌈s/{s.cp}⌉ tokens per rank, plus "
                   f"the ring's K/V chunks in flight ({cp_transient(s):,} B); approximate, not validated by a "
                   "measurement")
    if s.tp * s.cp > 1:
        out.append(f"{s.gpus} GPUs = {s.dp} data-parallel × {s.tp} tensor-parallel × {s.cp} context-parallel ranks")
    return out
