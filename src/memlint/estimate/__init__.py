"""Pure accounting: a Setup (model + training configuration) -> an Estimate in bytes."""

from memlint.estimate.core import COMPONENTS, GIB, Component, Estimate, estimate, find_gpu, gpus
from memlint.estimate.setup import Setup

__all__ = ["COMPONENTS", "GIB", "Component", "Estimate", "Setup", "estimate", "find_gpu", "gpus"]
