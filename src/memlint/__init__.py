"""memlint: will this fine-tuning run fit on the GPU, and which line do I change?"""

__version__ = "0.1.0"
