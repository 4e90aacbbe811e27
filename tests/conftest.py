import importlib.util
import os

import pytest

# pytest-xdist's workers get COLUMNS=80 from the controller; memlint's `full` output wraps at $COLUMNS, so the
# suite runs with it unset, as a CI log (no terminal) does, whether or not it runs on several cores.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch + transformers (the 'test' extra)")
