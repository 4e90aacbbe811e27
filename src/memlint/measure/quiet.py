"""Third-party noise kept out of memlint's output while it builds and runs a real training step:
transformers' FutureWarnings and deprecation notices, bitsandbytes' kernel-loading warnings
("Failed to load CPU gemm_4bit_forward ..."), peft's and accelerate's advice. memlint prints
its own report; what the libraries say while it measures is not part of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import Iterator

LIBRARIES = ("transformers", "torch", "peft", "bitsandbytes", "accelerate", "trl", "huggingface_hub", "kernels",
             "torchao", "datasets")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Inside the block the libraries' loggers report errors only and their warnings are dropped;
    levels, warning filters and the environment are restored afterwards (a notebook keeps its own).
    transformers configures its logger from TRANSFORMERS_VERBOSITY when first imported; its level is
    the "transformers" logger's, restored with the others."""
    loggers = {name: logging.getLogger(name) for name in LIBRARIES}
    saved = {name: lg.level for name, lg in loggers.items()}
    env = {k: os.environ.get(k) for k in ("TRANSFORMERS_VERBOSITY", "TRANSFORMERS_NO_ADVISORY_WARNINGS")}
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    for lg in loggers.values():
        lg.setLevel(logging.ERROR)
    # and below ERROR nothing is logged at all while the block runs: a library imported inside it can reset the
    # levels above (torch._logging re-initialises "torch" when torchao, imported by transformers, registers types)
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            for name in LIBRARIES:
                warnings.filterwarnings("ignore", module=rf"{name}(\.|$)")
            for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
                warnings.filterwarnings("ignore", category=category)
            yield
    finally:
        logging.disable(disabled)
        for name, level in saved.items():
            loggers[name].setLevel(level)
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
