"""The shapes the accounting modules hand each other: a trainable tensor (model_state) and one micro-batch's
activation terms (activations, and the model-code variants in litgpt). Here, below all of them, so the
model-code modules use them without importing the modules that dispatch to them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tensor:
    """A trainable tensor's shape, enough for per-tensor optimizer rules."""

    rows: int
    cols: int  # 1 for vectors
    count: int = 1
    embedding: bool = False  # an nn.Embedding's weight (transformers' Trainer gives it 32-bit bitsandbytes state)

    @property
    def numel(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes per micro-batch, split the way the phases need them."""

    body: int            # saved by all decoder layers at the end of forward
    per_layer: int       # saved by one layer (what recompute re-creates at a time)
    logits_forward: int  # extra live bytes around the loss in forward
    logits_backward: int  # extra live bytes at the start of backward (logits grads)
    formula: str
    logits_formula: str
    transient: int = 0   # forward working memory next to the saved body (DoRA's weight norm of its largest layer)
    forward_transient: int = 0  # forward-only working memory next to the saved body (an encoder layer's own)
    backward_transient: int = 0  # backward working memory of one layer next to what is still saved (float8 casts)
    recompute_keep: int = 0  # under recompute, saved bytes still alive beside the last gradients (T5's encoder part)
    # alive beside every gradient at the end of backward, next to the recomputed layer: what a part whose backward runs
    # last still holds (a vision-language model's tower: its saved inputs and activations, its gradient stream)
    end_of_backward: int = 0
    # a part whose backward runs after the text model's (LLaVA's tower): alive beside every gradient at its own end
    # (a candidate of its own), and the bytes of its gradients, which do not exist yet when the text model's ends
    vision_end: int = 0
    late_grads: int = 0
    # an encoder-decoder's encoder part of `body` (its layers and once-saved tensors), still alive when the decoder's
    # embedding backward sums a gradient into the shared embedding's (core.shared_embedding_moments)
    encoder_body: int = 0
