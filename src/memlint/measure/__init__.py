"""Measured ground truth: run the real training step(s) of a Setup and report memory.

    from memlint.measure import measure
    m = measure(setup)            # CUDA allocator on a GPU, fake-tensor trace without one
    m.to_json()                   # components / measured_peak / phase / steps / device / method

Only this package (and magic.py) imports torch, transformers, peft and bitsandbytes, and
only when `measure` is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["measure", "Measurement", "StepMeasurement", "tiny_spec"]

if TYPE_CHECKING:  # pragma: no cover
    from memlint.measure.core import Measurement, StepMeasurement


def measure(setup: Any, **kwargs: Any) -> "Measurement":
    from memlint.measure.core import measure as _measure

    return _measure(setup, **kwargs)


measure.__doc__ = """measure(setup, *, device="auto", steps=2, model=None, lora_dropout=0.0) -> Measurement

Run `steps` training steps of `setup` (step 1 creates the optimizer state, step 2 is the
steady state) and measure live tensor bytes per phase. See memlint.measure.core.measure."""


def tiny_spec(model_type: str, config: dict, model_id: str | None = None) -> Any:
    """A ModelSpec for an arbitrary (small) config, counted on the meta device."""
    from memlint.catalog.spec import spec_from_entry
    from memlint.catalog.meta import count_on_meta

    entry = count_on_meta(model_type, dict(config))
    entry.update(model_type=model_type, config=dict(config))
    return spec_from_entry(model_id or f"tiny-{model_type}", entry, source="local")


def __getattr__(name: str) -> Any:
    if name in ("Measurement", "StepMeasurement"):
        from memlint.measure import core

        return getattr(core, name)
    raise AttributeError(name)
