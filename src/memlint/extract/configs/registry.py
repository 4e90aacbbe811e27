"""Every framework config reader, by format name (configs/__init__.py detect() names the format)."""

from __future__ import annotations

from memlint.extract.configs.foundry import Foundry
from memlint.extract.configs.h2o import H2OLLMStudio
from memlint.extract.configs.lightning import LightningCLI
from memlint.extract.configs.litgpt import LitGPT
from memlint.extract.configs.llmtune import LlmTune
from memlint.extract.configs.nanotron import Nanotron
from memlint.extract.configs.nemo import NeMo
from memlint.extract.configs.oumi import Oumi
from memlint.extract.configs.readers import READERS as _BASE
from memlint.extract.configs.torchtitan import Torchtitan

READERS = {**_BASE, "litgpt": LitGPT, "llm-foundry": Foundry, "oumi": Oumi, "llmtune": LlmTune, "torchtitan": Torchtitan,
           "h2o-llmstudio": H2OLLMStudio, "nemo": NeMo, "lightning-cli": LightningCLI,
           "nanotron": Nanotron}
