"""The caching allocator's slack: what `max_memory_reserved()` holds beyond `max_memory_allocated()`.

PyTorch's CUDA caching allocator keeps freed blocks cached in their segments, so the memory it
reserves is the live bytes plus blocks that were freed but do not fit what is asked for next.
`memlint measure` predicts it by replaying the traced allocation sequence through a model of the
allocator (measure/allocator.py). The estimator has no allocation sequence; it uses a formula of
its own quantities, fitted on those replays: the accuracy matrix, more shapes, long sequences without full logits
and one rank of N-GPU FSDP runs traced at full size (`python benchmarks/reserved_fit.py`; coefficients and
residuals in data/cuda_allocator.json "reserved_fit" and docs/accounting.md; no published measurement is in the fit):

    reserved  = max(max(forward, backward) + slack_fb, optimizer + slack_opt)
    slack_fb  = a_logits · (s·b·V × c)    the lm_head output in the compute dtype, freed once the loss
                                           has its fp32 copy, is too small for the fp32 gradients
              + a_layer · layer            one decoder layer's activations (its working set under
                                           recompute), made and freed layer after layer: the blocks the
                                           next layer carves its saved tensors from
              + a_big_b · largest tensor   the largest trainable tensor's gradient (a full fine-tune's
                                           embedding or lm_head; FSDP: its shard) arrives late and fits no hole
              + a_gath · gathered          FSDP's all-gather outputs, a unit at a time
    slack_opt = a_act · activations        (no recompute) the activations freed in backward fragment the
                                           segments that step 1 puts the optimizer state in
              + a_big_o · largest tensor   its state and foreach temporaries fit no freed hole either
              + a_gath_o · gathered + a_layer_o · layer

Each phase is a live total of the estimate (`Estimate.phases`); the larger of the two sums is the
reserved peak, since reserved memory only grows during a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlint import data
from memlint.estimate import activations as act
from memlint.estimate import model_state as ms
from memlint.estimate import tensor_parallel as tp
from memlint.estimate.setup import DTYPE_BYTES, Setup
from memlint.vocab import GIB


@dataclass(frozen=True)
class Features:
    """The estimate's quantities the slack formula reads, in bytes."""

    logits_half: int    # s·b·V × compute bytes when the loss upcasts half logits (HF's ForCausalLMLoss)
    hidden_states: int  # L × s·b·h × compute bytes: one hidden-state-sized tensor per decoder layer (not fitted)
    activations: int    # the activations freed in backward (0 under recompute: only layer inputs)
    largest: int        # the largest trainable tensor, in its dtype, as one rank holds it (FSDP: its shard)
    layer: int = 0      # one decoder layer's saved activations (+ its working set under recompute), made and freed
                        # layer after layer
    gathered: int = 0   # FSDP's gathered parameters at the peak (the root unit and one layer's all-gather output)


def coefficients() -> dict[str, float]:
    return data.load("cuda_allocator.json")["reserved_fit"]["coefficients"]


def features(s: Setup, terms, gathered: int = 0) -> Features:
    """`terms`: the ActivationTerms of the (per-rank) step; `gathered`: FSDP's gathered bytes (sharding.Layout)."""
    m = s.model
    c = DTYPE_BYTES[s.compute_dtype]
    rows = s.batch
    vocab_logits = True
    if s.objective != "sft":
        from memlint.estimate.setup import preference

        obj = preference()["objectives"][s.objective]
        rows *= obj["rows"]
        vocab_logits = obj["head"] != "scalar"
    if s.encoder:  # an encoder's head: vocabulary logits only for masked LM
        vocab_logits = s.head == "masked-lm"
    # one rank's tokens: context parallelism splits the sequence, and sequence parallelism splits the
    # hidden states between the tensor-parallel regions again (`s` is the rank's setup: its model is
    # the TP rank's, tensor_parallel.rank_spec, so the largest tensor below is already its shard)
    tokens = rows * -(-s.seq // s.cp)
    hidden_tokens = rows * -(-s.seq // (s.cp * s.tp)) if tp.sequence_parallel(s) else tokens
    # no full logits under a fused loss, nor under TRL's fused LM head (SFTTrainer / DPO / KTO >= 1.15)
    sft = act.sft_layout(s)
    fused_head = (sft is not None and sft["layout"] == "chunked") or (
        s.objective in ("dpo", "kto") and act.logps_layout(s)["layout"] == "chunked")
    half = c < 4 and not s.fused_loss and vocab_logits and not fused_head
    tensors = ms.full_setup_tensors(s) if s.method == "full" else ms.setup_lora_tensors(s)
    largest = max((t.numel for t in tensors), default=0) * DTYPE_BYTES[ms.trainable_dtype(s, "real")]
    if s.shard.startswith("fsdp"):
        largest //= max(1, s.shard_group)
    return Features(logits_half=tokens * act.logits_vocab(s) * c if half else 0,
                    hidden_states=m.layers * hidden_tokens * m.hidden * c,
                    activations=0 if s.recompute else terms.body, largest=largest,
                    layer=terms.per_layer + (terms.transient if s.recompute else 0), gathered=gathered)


def slack(f: Features, phases: dict[str, int]) -> tuple[int, str]:
    """(reserved minus allocated at the reserved peak, its formula) for the real phases."""
    k = coefficients()
    fb_terms = [("half logits", k.get("logits_half", 0), f.logits_half), ("layer", k.get("layer", 0), f.layer),
                ("largest tensor", k.get("largest_backward", 0), f.largest),
                ("gathered", k.get("gathered", 0), f.gathered), ("hidden states", k.get("hidden_states", 0), f.hidden_states)]
    opt_terms = [("freed activations", k.get("activations", 0), f.activations),
                 ("largest tensor", k.get("largest_optimizer", 0), f.largest),
                 ("gathered", k.get("gathered_optimizer", 0), f.gathered), ("layer", k.get("layer_optimizer", 0), f.layer)]
    fb = max(phases["forward"], phases["backward"]) + int(sum(c * x for _, c, x in fb_terms))
    opt = phases["optimizer"] + int(sum(c * x for _, c, x in opt_terms))
    peak = max(phases.values())
    terms, where = (fb_terms, "over the forward/backward peak") if fb >= opt else (opt_terms, "over the optimizer step")
    how = " + ".join(f"{c:.2f} × {name} {x / GIB:.2f} GiB" for name, c, x in terms if c) or "none"
    how += " " + where
    return max(fb, opt, peak) - peak, how
