"""A BitsAndBytesConfig handed to from_pretrained with neither load_in flag set: transformers 4.38's quantizer picks
the 4-bit one unless load_in_8bit (fp4 by default), 4.37 loaded the model unquantized (the 4.37.2 and 4.38.0 wheels'
modeling_utils.py and quantizers/auto.py)."""

from __future__ import annotations

from functools import partial

import pytest

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_SCRIPT = """
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments
    from peft import LoraConfig, get_peft_model
    use_4bit = False
    bnb = BitsAndBytesConfig({flags}bnb_4bit_compute_dtype=torch.float16)
    model = AutoModelForCausalLM.from_pretrained("gpt2", quantization_config=bnb)
    model = get_peft_model(model, LoraConfig(r=8))
    Trainer(model=model, args=TrainingArguments(output_dir="o")).train()
"""


@pytest.mark.parametrize("pin, flags, want", [
    ("4.45.0", "load_in_4bit=use_4bit, ", {"quant_bits": 4, "quant_type": "fp4", "method": "qlora"}),
    ("4.45.0", "", {"quant_bits": 4, "quant_type": "fp4", "method": "qlora"}),
    ("4.45.0", "load_in_8bit=True, ", {"quant_bits": 8, "method": "lora"}),
    ("4.37.2", "load_in_4bit=use_4bit, ", {"quant_bits": None, "method": "lora"}),
])
def test_a_config_without_flags_quantizes_by_version(tmp_path, monkeypatch, pin, flags, want):
    root = _write(tmp_path, {"train.py": _SCRIPT.format(flags=flags), "requirements.txt": f"transformers=={pin}\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, *want) == want
