import importlib.util

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch + transformers (the 'test' extra)")
