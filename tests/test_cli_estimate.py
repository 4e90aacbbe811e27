import json
import subprocess
import sys

import pytest

from memlint.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_exactly_the_documented_keys(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora",
                       "--recompute", "--gpu", "RTX4090", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["model", "components", "peak", "allocated_peak", "reserved_peak", "paged_optimizer",
                         "peak_terms", "fits", "verdict", "free", "min_headroom", "max_batch", "assumptions"]
    assert doc["allocated_peak"] == doc["peak"] - doc["components"]["overhead"] < doc["reserved_peak"] < doc["peak"]
    # the rows add up: the components but the overhead, and what the peak holds beyond them, are the allocated peak
    rows = sum(v for k, v in doc["components"].items() if k != "overhead")
    assert rows + sum(t["bytes"] for t in doc["peak_terms"]) == doc["allocated_peak"]
    assert list(doc["model"]) == ["id", "params", "trainable_params"]
    assert list(doc["components"]) == ["weights", "gradients", "optimizer", "activations", "logits", "overhead"]
    assert all(isinstance(v, int) for v in doc["components"].values())
    # peft's LoraConfig r=8 (the shared defaults table) on every linear layer
    assert doc["model"]["params"] == 8_030_261_248 and doc["model"]["trainable_params"] == 20_971_520
    assert doc["fits"] == {"RTX4090": True} and doc["verdict"] == {"RTX4090": "fits"}
    assert doc["free"]["RTX4090"] == 25757220864 - doc["peak"] and doc["min_headroom"] == 0.1
    assert doc["max_batch"]["RTX4090"] >= 1


def test_without_gpu_every_common_gpu_gets_a_verdict(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "meta-llama/Llama-3.1-8B", "--format", "json")
    doc = json.loads(out)
    assert {"T4", "A100-80GB", "H100-80GB", "H200", "MI300X"} <= set(doc["fits"])
    assert doc["fits"]["T4"] is False and doc["max_batch"]["T4"] == 0


def test_paged_optimizer_is_reported_apart_from_the_peak(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--format", "json", "--gpu", "A100-80GB"]
    _, out, _ = run(capsys, *base, "--optim", "paged_adamw_32bit")
    paged = json.loads(out)
    _, out, _ = run(capsys, *base, "--optim", "adamw_torch")
    plain = json.loads(out)
    assert paged["components"]["optimizer"] == 0
    assert paged["paged_optimizer"] == plain["components"]["optimizer"]
    assert paged["peak"] < plain["peak"]


@pytest.mark.parametrize("argv,needle", [
    (["--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--quant", "none"], "qlora needs a 4-bit base"),
    (["--model", "acme/not-a-model"], "unknown model"),
    (["--model", "gpt2", "--batch", "0"], "positive integer"),
    (["--model", "gpt2", "--optim", "adamw_typo"], "unknown optimizer"),
    (["--model", "gpt2", "--shard", "zero3"], "needs --gpus 2"),
    (["--model", "gpt2", "--gpu", "V100-ish"], "unknown GPU"),
    (["--model", "gpt2", "--batch", "two"], "invalid int value"),
    (["--model", "gpt2", "--method", "magic"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    try:
        code = main(["estimate", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_table_names_every_component_and_the_peak(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "Qwen/Qwen2.5-0.5B", "--gpu", "T4")
    assert code == 0
    for word in ("weights", "gradients", "optimizer", "activations", "logits", "overhead", "peak", "T4"):
        assert word in out


def test_textbook_accounting_flag(capsys):
    _, out, _ = run(capsys, "estimate", "--model", "meta-llama/Llama-3.1-8B", "--accounting", "textbook",
                    "--format", "json", "--gpu", "H100")
    doc = json.loads(out)
    assert sum(doc["components"][k] for k in ("weights", "gradients", "optimizer")) == 16 * 8_030_261_248
    assert doc["fits"] == {"H100-80GB": False}


@pytest.mark.parametrize("argv", [
    ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--format", "json"],
    ["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--objective", "dpo", "--format", "json"],
])
def test_estimate_never_imports_torch_or_transformers(argv):
    code = (f"import sys; from memlint.cli import main; main({argv!r}); "
            "bad=[m for m in sys.modules if m.split('.')[0] in ('torch','transformers','trl')]; "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_version_and_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "memlint", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("memlint ")
