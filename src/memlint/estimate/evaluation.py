"""The evaluation step inside a training run: what `Trainer.evaluate()` holds at its peak.

Between optimizer steps the Trainer evaluates with the training state still resident:
weights and optimizer state stay, gradients were freed by `zero_grad(set_to_none=True)`,
the forward runs under `no_grad` (one layer's activations live at a time), and the loss
needs the full-vocabulary logits of the eval micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memlint.estimate import activations as act
from memlint.estimate import reserved
from memlint.estimate.core import DEFAULT_CONTEXT, estimate
from memlint.estimate.setup import Setup


@dataclass(frozen=True)
class EvalEstimate:
    batch: int
    seq: int
    weights: int
    optimizer: int
    activations: int   # one layer's transient under no_grad
    logits: int
    overhead: int

    @property
    def peak(self) -> int:
        return self.weights + self.optimizer + self.activations + self.logits + self.overhead


def eval_estimate(s: Setup, eval_batch: int, accounting: str = "real", context_bytes: int | None = None) -> EvalEstimate:
    # Liger's patched forward fuses the loss only in training; evaluation builds the full logits.
    e = s.with_(batch=eval_batch, fused_loss=False)
    train = estimate(e, accounting, context_bytes)
    terms = act.activations(e, accounting)
    alloc = train.bytes("weights") + train.bytes("optimizer") + terms.per_layer + terms.logits_forward
    ctx = DEFAULT_CONTEXT if context_bytes is None else context_bytes
    # the training step's allocator slack without backward: the freed layer transients and the segment
    # rounding stay cached beside the logits; no gradient needs the half logits' block (not validated
    # by a replay: the traces run training steps)
    f = replace(reserved.features(e, terms), logits_half=0, activations=0, largest=0)
    slack, _ = reserved.slack(f, {"forward": alloc, "backward": 0, "optimizer": 0})
    return EvalEstimate(eval_batch, e.seq, train.bytes("weights"), train.bytes("optimizer"), terms.per_layer,
                        terms.logits_forward, ctx + slack)
