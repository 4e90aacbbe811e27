"""The caching allocator's slack: what `max_memory_reserved()` holds beyond `max_memory_allocated()`.

PyTorch's CUDA caching allocator keeps freed blocks cached in their segments, so the memory it
reserves is the live bytes plus blocks that were freed but do not fit what is asked for next.
`memlint measure` predicts it by replaying the traced allocation sequence through a model of the
allocator (measure/allocator.py). The estimator has no allocation sequence; it uses a formula of
its own quantities, fitted on those replays across the accuracy matrix and a few more shapes
(`python benchmarks/reserved_fit.py`; coefficients and residuals in data/cuda_allocator.json
"reserved_fit" and docs/accounting.md):

    reserved  = max(max(forward, backward) + slack_fb, optimizer + slack_opt)
    slack_fb  = a_logits · (s·b·V × c)    the lm_head output in the compute dtype, freed once the loss
                                           has its fp32 copy, is too small for the fp32 gradients
              + a_hidden · (L · s·b·h × c) hidden-state-sized tensors, one per layer (the checkpointed
                                           inputs under recompute): carved out of freed transients, they
                                           leave holes the next layer's transients do not fit
              + a_big_b · largest tensor   the largest trainable tensor's gradient (a full fine-tune's
                                           embedding or lm_head) arrives in backward and fits no hole
    slack_opt = a_act · activations        (no recompute) the activations freed in backward fragment the
                                           segments that step 1 puts the optimizer state in
              + a_big_o · largest tensor   its state and foreach temporaries fit no freed hole either

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
    hidden_states: int  # L × s·b·h × compute bytes: one hidden-state-sized tensor per decoder layer
    activations: int    # the activations freed in backward (0 under recompute: only layer inputs)
    largest: int        # the largest trainable tensor, in its dtype


def coefficients() -> dict[str, float]:
    return data.load("cuda_allocator.json")["reserved_fit"]["coefficients"]


def features(s: Setup, terms) -> Features:
    """`terms`: the ActivationTerms of the (per-rank) step."""
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
    half = c < 4 and not s.fused_loss and vocab_logits
    tensors = ms.full_setup_tensors(s) if s.method == "full" else ms.setup_lora_tensors(s)
    largest = max((t.numel for t in tensors), default=0) * DTYPE_BYTES[ms.trainable_dtype(s, "real")]
    return Features(logits_half=tokens * act.logits_vocab(s) * c if half else 0,
                    hidden_states=m.layers * hidden_tokens * m.hidden * c,
                    activations=0 if s.recompute else terms.body, largest=largest)


def slack(f: Features, phases: dict[str, int]) -> tuple[int, str]:
    """(reserved minus allocated at the reserved peak, its formula) for the real phases."""
    k = coefficients()
    fb_slack = int(k["logits_half"] * f.logits_half + k["hidden_states"] * f.hidden_states
                   + k["largest_backward"] * f.largest)
    opt_slack = int(k["activations"] * f.activations + k["largest_optimizer"] * f.largest)
    fb = max(phases["forward"], phases["backward"]) + fb_slack
    opt = phases["optimizer"] + opt_slack
    peak = max(phases.values())
    if fb >= opt:
        how = (f"{k['logits_half']:.2f} × half logits {f.logits_half / GIB:.2f} GiB + {k['hidden_states']:.2f} × "
               f"hidden states {f.hidden_states / GIB:.2f} GiB + {k['largest_backward']:.2f} × largest tensor "
               f"{f.largest / GIB:.2f} GiB over the forward/backward peak")
    else:
        how = (f"{k['activations']:.2f} × freed activations {f.activations / GIB:.2f} GiB + {k['largest_optimizer']:.2f} × "
               f"largest tensor {f.largest / GIB:.2f} GiB over the optimizer step")
    return max(fb, opt, peak) - peak, how
