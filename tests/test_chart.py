"""The four-bucket chart: its numbers come from the estimator, its files are written, and
docs/seed_chart.json matches `memlint estimate --format json`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from rich.console import Console

from memlint.catalog import resolve
from memlint.cli import main
from memlint.estimate import COMPONENTS, GIB, Setup, estimate, find_gpu
from memlint.report.chart import Bar, alternatives, bars_for, chart_data, chart_svg, render_terminal, write_chart

ROOT = Path(__file__).resolve().parents[1]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="needs matplotlib (the 'plot' extra)")
SEED = json.loads((ROOT / "docs" / "seed_chart.json").read_text())


def estimate_json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("accounting", ["real", "textbook"])
def test_seed_chart_numbers_equal_the_estimate_json(capsys, accounting):
    chart = SEED["charts"][accounting]
    assert [b["label"] for b in chart["bars"]] == ["full, AdamW (fp32 master)", "LoRA r=16, bf16 base, recompute",
                                                   "QLoRA r=16, NF4 base, recompute"]
    for bar, command in zip(chart["bars"], chart["commands"]):
        argv = command.split()[1:]
        assert argv[argv.index("--accounting") + 1] == accounting and argv[argv.index("--seq") + 1] == "2048"
        doc = estimate_json(capsys, argv)
        assert bar["components"] == doc["components"]
        assert bar["peak"] == doc["peak"]
    assert chart["capacities"] == [{"label": "RTX4090", "bytes": find_gpu("RTX4090")[1]},
                                   {"label": "H100-80GB", "bytes": find_gpu("H100")[1]}]


def test_seed_chart_textbook_model_states_are_the_articles():
    # The article's table: model state 119.7 GiB (full), 15.6 GiB (LoRA), 5.9 GiB (QLoRA).
    bars = SEED["charts"]["textbook"]["bars"]
    states = [round(sum(b["components"][c] for c in ("weights", "gradients", "optimizer")) / GIB, 1) for b in bars]
    assert states == [119.7, 15.6, 5.9]
    assert round(SEED["charts"]["textbook"]["capacities"][1]["bytes"] / GIB, 1) == 79.6


def _setup(**kw) -> Setup:
    return Setup(model=resolve("Qwen/Qwen2.5-0.5B"), **kw)


def _held(est) -> int:
    return est.peak + est.paged_optimizer


def test_compare_adds_the_alternatives_each_estimated_and_none_worse():
    from memlint.estimate.levers import LEVERS

    s = _setup(batch=4, seq=1024)
    est = estimate(s, "real")
    caps = [("RTX4090", find_gpu("RTX4090")[1]), ("H100-80GB", find_gpu("H100")[1])]
    bars = bars_for(est, compare=True, capacities=caps)
    alts = alternatives(est, caps)
    assert [b.label for b in bars[1:]] == [label for label, _ in alts]
    assert all(b.suggested for b in bars[1:]) and not bars[0].suggested
    for bar, (label, alt) in zip(bars[1:], alts):
        # every bar is the estimator's own estimate of its configuration
        again = estimate(alt.setup, "real")
        assert bar.peak == again.peak == alt.peak
        assert dict(bar.components) == {c: again.bytes(c) for c in COMPONENTS}
        # never a worse configuration, except the largest micro-batch, which spends the room on purpose
        if not label.startswith("largest on "):
            assert _held(alt) < _held(est), label
    labels = [label for label, _ in alts]
    # levers stack: QLoRA with recompute, and the cheap levers together
    assert "+ QLoRA + recompute" in labels or any(lb.startswith("fits ") and "QLoRA + recompute" in lb for lb in labels)
    assert any(lb.count(" + ") >= 2 for lb in labels)
    # the guide's levers are there where they save memory here
    for word in ("recompute", "fused CE", "8-bit optim", "paged optim", "offload activations", "micro-batch 1"):
        assert any(word in lb for lb in labels), word
    assert {lv.key for lv in LEVERS} >= {"fused-loss", "8bit-optimizer", "paged-optimizer", "offload-activations",
                                         "recompute", "lora", "qlora"}


def test_compare_never_proposes_a_configuration_that_holds_more():
    # QLoRA on a small model can cost more than LoRA (fp32 upcasts of embeddings and lm_head):
    # such a bar is left out rather than drawn next to a smaller baseline.
    s = _setup(method="lora", batch=1, seq=512, recompute=True)
    est = estimate(s, "real")
    qlora = estimate(s.with_(method="qlora", quant="nf4"), "real")
    assert _held(qlora) >= _held(est)
    assert all(not label.endswith("QLoRA") for label, _ in alternatives(est))
    assert all(_held(alt) < _held(est) for label, alt in alternatives(est) if not label.startswith("largest"))


def test_what_is_already_on_is_never_suggested():
    s = _setup(method="qlora", quant="nf4", recompute=True, batch=1)
    for label, alt in alternatives(estimate(s)):
        assert alt.setup.recompute and alt.setup.method == "qlora", label
        assert "recompute" not in label and "QLoRA" not in label and "LoRA" not in label


def test_chart_data_is_bytes_per_bar_and_capacity():
    est = estimate(_setup())
    data = chart_data(bars_for(est), [("RTX4090", find_gpu("RTX4090")[1])])
    [bar] = data["bars"]
    assert data["components"] == list(COMPONENTS)
    assert bar["components"] == {c: est.bytes(c) for c in COMPONENTS} and bar["peak"] == est.peak
    assert data["capacities"] == [{"label": "RTX4090", "bytes": 25757220864}]


def test_terminal_bars_are_proportional_with_a_mark_at_each_capacity():
    bars = [Bar("a", {**dict.fromkeys(COMPONENTS, 0), "weights": 10 * GIB}, 10 * GIB),
            Bar("b", {**dict.fromkeys(COMPONENTS, 0), "weights": 15 * GIB, "optimizer": 5 * GIB}, 20 * GIB,
                measured=18 * GIB)]
    console = Console(record=True, width=120, color_system=None)
    render_terminal(bars, [("card", 40 * GIB)], console, width=40)
    rows = console.export_text().splitlines()
    assert rows[0].startswith("a " + "█" * 10 + " " * 29 + "┆") and rows[0].endswith("10.0 GiB")
    # without colour each component keeps its own fill character
    assert rows[1].startswith("b " + "█" * 15 + "▒" * 3 + "◆" + "▒" + " " * 19 + "┆")
    assert "(measured 18.0)" in rows[1]
    assert rows[2] == "┆ card 40.0 GiB"
    assert all(name in rows[3] for name in COMPONENTS) and "peak beyond" not in rows[3]
    assert "█ weights" in rows[3] and "▒ optimizer" in rows[3] and "░ activations" in rows[3]


def test_terminal_chart_follows_the_width_and_never_cuts_a_label():
    long = "fits RTX4090: micro-batch 1, accum 16 + fused CE + recompute"
    bars = [Bar("base", {**dict.fromkeys(COMPONENTS, 0), "weights": 10 * GIB}, 10 * GIB),
            Bar(long, {**dict.fromkeys(COMPONENTS, 0), "weights": 5 * GIB}, 5 * GIB, suggested=True)]
    for width in (200, 100, 60):
        console = Console(record=True, width=width, color_system=None)
        render_terminal(bars, [("card", 24 * GIB)], console)
        rows = console.export_text().splitlines()
        assert all(len(r) <= width for r in rows), width
        assert any(long in r for r in rows) and not any("…" in r for r in rows)
    wide = Console(record=True, width=200, color_system=None)
    render_terminal(bars, [("card", 24 * GIB)], wide)
    narrow = Console(record=True, width=100, color_system=None)
    render_terminal(bars, [("card", 24 * GIB)], narrow)
    assert wide.export_text().splitlines()[0].count("█") > narrow.export_text().splitlines()[0].count("█")


@needs_mpl
def test_png_and_svg_files_are_written(tmp_path):
    est = estimate(_setup(batch=2), "real")
    bars = bars_for(est, compare=True)
    caps = [("RTX4090", find_gpu("RTX4090")[1]), ("H100-80GB", find_gpu("H100")[1])]
    png = write_chart(tmp_path / "c.png", bars, caps, measured=est.peak - GIB)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    svg = write_chart(tmp_path / "c.SVG", bars, caps).read_text()
    assert svg.lstrip().startswith("<?xml") and "RTX4090 24.0 GiB" in svg and "H100-80GB 79.6 GiB" in svg
    assert f"peak {est.peak / GIB:.1f}" in svg and "recompute" in svg


@needs_mpl
def test_chart_svg_embeds_the_measured_marker_and_is_deterministic():
    bars = bars_for(estimate(_setup()))
    caps = [("T4", find_gpu("T4")[1])]
    one = chart_svg(bars, caps, measured=3 * GIB)
    assert "measured 3.0" in one and one == chart_svg(bars, caps, measured=3 * GIB)
    assert "measured" not in chart_svg(bars, caps)


@needs_mpl
def test_estimate_plot_and_compare_from_the_cli(tmp_path, capsys):
    out = tmp_path / "chart.svg"
    code = main(["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--batch", "4", "--gpu", "RTX4090", "--plot", str(out),
                 "--compare"])
    stdout, err = capsys.readouterr()
    assert code == 0 and out.is_file() and "chart written to" in err
    assert "+ recompute\n" in stdout and "+ micro-batch 1, accum 4\n" in stdout and "┆ RTX4090 24.0 GiB" in stdout
    assert "fits RTX4090: " in stdout
    # JSON stays JSON; the file is still drawn.
    code = main(["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--format", "json", "--plot", str(tmp_path / "j.png")])
    assert code == 0 and json.loads(capsys.readouterr().out)["peak"] > 0 and (tmp_path / "j.png").is_file()


@needs_mpl
def test_plan_plot_draws_each_script(tmp_path, capsys):
    out = tmp_path / "plan.png"
    code = main(["plan", str(ROOT / "fixtures" / "scripts" / "trl_sft_qlora.py"), "--plot", str(out)])
    assert code == 0 and out.is_file()
    # The terminal chart names the bar with the whole path, never a cut one.
    path = str(ROOT / "fixtures" / "scripts" / "trl_sft_qlora.py")
    assert any(line.startswith(path) for line in capsys.readouterr().out.splitlines())


def test_plot_needs_png_or_svg_and_names_the_extra_when_matplotlib_is_missing(tmp_path, capsys, monkeypatch):
    argv = ["estimate", "--model", "gpt2"]
    assert main([*argv, "--plot", str(tmp_path / "c.pdf")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().endswith("the file name must end in .png or .svg")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main([*argv, "--plot", str(tmp_path / "c.png")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == "memlint: error: --plot needs matplotlib: pip install 'torch-memlint[plot]'"
