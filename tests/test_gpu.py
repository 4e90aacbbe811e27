"""GPUs and the one notion of fit: ambiguous names are errors, capabilities are data, and every
front door (estimate, plan, check, diff, %memcheck) says fits / tight / over for the same peak."""

from __future__ import annotations

import json

import pytest

from memlint import data
from memlint.check import check_source
from memlint.cli import main
from memlint.errors import MemlintError
from memlint.gpu import MIN_HEADROOM, Gpu, find_gpu, fit
from memlint.rules.samples import script

GIB = 1 << 30


@pytest.mark.parametrize("name,listed", [("A100", ("A100-40GB", "A100-80GB")), ("rtx", ("RTX3090", "RTX4090", "RTX5090"))])
def test_an_ambiguous_gpu_name_is_an_error_listing_the_candidates(name, listed):
    with pytest.raises(MemlintError) as exc:
        find_gpu(name)
    assert "ambiguous GPU" in str(exc.value) and all(x in str(exc.value) for x in listed)


def test_exact_names_aliases_and_sizes_still_resolve():
    assert find_gpu("A100-80GB").label == "A100-80GB" and find_gpu("a100_40gb").label == "A100-40GB"
    assert find_gpu("h100").label == "H100-80GB" and find_gpu("a10").label == "A10G"
    assert find_gpu("24").total == 24 * GIB
    with pytest.raises(MemlintError, match="unknown GPU"):
        find_gpu("V100-ish")


def test_every_gpu_says_whether_it_has_bf16_and_flash_attention():
    for label, g in data.load("gpus.json")["gpus"].items():
        assert isinstance(g["bf16"], bool) and isinstance(g["flash_attention_2"], bool), label
    t4 = find_gpu("T4")
    assert t4.supports("bf16") is False and t4.supports("flash_attention_2") is False
    assert find_gpu("L4").supports("bf16") is True and find_gpu("24").supports("bf16") is None


def test_fit_is_fits_tight_or_over_by_the_headroom():
    g = Gpu("card", 80 * GIB, 0)
    assert fit(70 * GIB, g).status == "fits"
    assert fit(79 * GIB, g).status == "tight" and not fit(79 * GIB, g).ok and fit(79 * GIB, g).runs
    assert fit(81 * GIB, g).status == "over"
    assert fit(79 * GIB, g, min_headroom=0.01).status == "fits"
    assert fit(10 * GIB, find_gpu("T4"), compute_dtype="bf16").missing == ("bf16",)
    assert MIN_HEADROOM == 0.10


def _estimate_json(capsys, *argv) -> dict:
    assert main(["estimate", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_says_tight_where_check_raises_mem102(capsys):
    base = ["--model", "meta-llama/Llama-3.2-1B", "--batch", "2", "--seq", "2048"]
    doc = _estimate_json(capsys, *base)
    peak = doc["peak"]
    gpu = f"{(peak + 0.03 * peak) / GIB:.2f}"  # 3 % free: fits, under the 10 % headroom
    doc = _estimate_json(capsys, *base, "--gpu", gpu)
    label = next(iter(doc["verdict"]))
    assert doc["verdict"][label] == "tight" and doc["fits"][label] is False
    src = script(batch=2, max_length=2048, recompute=False)
    codes = {f.code for f in check_source(src, "s.py", gpu=gpu).findings}
    assert "MEM102" in codes and "MEM101" not in codes
    assert main(["estimate", *base, "--gpu", gpu]) == 0
    assert " tight " in capsys.readouterr().out


def test_bf16_on_a_t4_is_a_finding_and_not_a_fit(capsys):
    doc = _estimate_json(capsys, "--model", "Qwen/Qwen2.5-0.5B", "--precision", "amp-bf16", "--gpu", "T4")
    assert doc["verdict"] == {"T4": "unsupported"} and doc["fits"] == {"T4": False}
    fp16 = _estimate_json(capsys, "--model", "Qwen/Qwen2.5-0.5B", "--dtype", "fp16", "--gpu", "T4")
    assert fp16["verdict"] == {"T4": "fits"}
    res = check_source(script("Qwen/Qwen2.5-0.5B", precision="bf16=True"), "s.py", gpu="T4")
    [f] = [f for f in res.findings if f.code == "MEM104"]
    assert f.severity == "error" and "T4" in f.message and "bf16" in f.message


def test_estimate_plan_and_check_print_one_peak_whichever_gpu(capsys):
    base = ["--model", "Qwen/Qwen2.5-0.5B", "--batch", "2"]
    peaks = {_estimate_json(capsys, *base, *gpu)["peak"] for gpu in ([], ["--gpu", "T4"], ["--gpu", "H100"])}
    assert len(peaks) == 1
    src = script("Qwen/Qwen2.5-0.5B", batch=2)
    assert len({check_source(src, "s.py", gpu=g).context.estimate.peak for g in (None, "T4", "H200", "24")}) == 1


def test_a_gpu_named_in_the_config_or_the_command_line_is_checked_once(capsys):
    assert main(["check", "--gpu", "A100", "fixtures/scripts/branches.py", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "ambiguous GPU 'A100'" in err and len(err.strip().splitlines()) == 1
