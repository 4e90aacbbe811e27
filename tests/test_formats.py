"""One fixed set of check results rendered in every output format, against golden files.

Regenerate the goldens after an intended change: MEMLINT_REGEN=1 python -m pytest tests/test_formats.py
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from memlint.errors import MemlintError
from memlint.estimate import GIB, Component, Estimate
from memlint.plan import Span, TrainingPlan
from memlint.report import formats
from memlint.report.formats import FORMATS, escape_data, escape_property, statistics, write_results, write_statistics
from memlint.rules.base import Context, FileResult, Finding, Fix, Related, Rule

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "fixtures" / "output"
SCRIPT = "fixtures/output/train.py"
SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
H100 = ("H100-80GB", 85_520_809_984, 536_870_912)


class ExceedsRule(Rule):
    """
    ## What it does
    Test rule: the peak exceeds the GPU.

    ## Why is this bad?
    Out of memory.

    ## Example
    ```python
    TrainingArguments(per_device_train_batch_size=8)
    ```

    ## Use instead
    ```python
    TrainingArguments(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    ```
    """

    code = "MEM199"
    name = "test-exceeds-gpu"
    severity = "error"
    summary = "the peak exceeds the GPU"


class PaddingRule(Rule):
    """
    ## What it does
    Test rule: pads every batch to max_length.
    """

    code = "MEM299"
    name = "test-pads-to-max-length"
    summary = "every batch is padded to max_length"
    fix = Fix("pad per batch", "unsafe", "padding_longest")


class RecomputeRule(Rule):
    """Test rule without sections."""

    code = "MEM298"
    name = "test-recompute-off"
    summary = "gradient checkpointing is off"
    default_enabled = False


class UnknownModelRule(Rule):
    """Test rule: the model is unknown."""

    code = "MEM099"
    name = "test-unknown-model"
    severity = "note"
    summary = "the model id is unknown"


RULES = (ExceedsRule, PaddingRule, RecomputeRule, UnknownModelRule)


def _estimate() -> Estimate:
    # Hand-written numbers: the goldens test the rendering, not the estimator's calibration.
    parts = {"weights": 16 * GIB, "gradients": 16 * GIB, "optimizer": 32 * GIB,
             "activations": 30 * GIB + 3 * GIB // 10, "logits": 2 * GIB, "overhead": 4 * GIB}
    comps = {k: Component(k, v, f"{k} formula") for k, v in parts.items()}
    setup = SimpleNamespace(batch=8, seq=4096, model=SimpleNamespace(id="meta-llama/Llama-3.1-8B"))
    peak = sum(parts.values())
    return Estimate(setup, "real", comps, peak, "backward", {"backward": peak - parts["overhead"]},
                    0, 8_030_261_248)


def _results() -> list[FileResult]:
    lines = (ROOT / SCRIPT).read_text().splitlines()
    pad_col = lines[11].index('padding="max_length"') + 1
    est = _estimate()
    over = est.peak - H100[1]
    train = [
        Finding("MEM299", "test-pads-to-max-length",
                "every batch is padded to max_length: each step costs 8 × 4096 tokens", "warning",
                Span(SCRIPT, 12, pad_col), (Related(Span(SCRIPT, 5, 1), "max_length set here"),),
                PaddingRule.fix, "pad per batch (padding=\"longest\") with a collator"),
        Finding("MEM199", "test-exceeds-gpu",
                f"estimated peak {est.peak / GIB:.1f} GiB exceeds H100-80GB (79.6 GiB) by {over / GIB:.1f} GiB",
                "error", Span(SCRIPT, 17, 5),
                (Related(Span(SCRIPT, 5, 1), "max_length set here"),
                 Related(Span(SCRIPT, 18, 5), "gradient checkpointing set here")),
                None, "per_device_train_batch_size=4 with gradient_accumulation_steps=2",
                {"peak_bytes": est.peak, "gpu_bytes": H100[1], "max_batch": 4}),
        Finding("MEM298", "test-recompute-off", "gradient checkpointing is off; turning it on saves 27.6 GiB",
                "warning", Span(SCRIPT, 18, 5), (),
                Fix("turn on gradient checkpointing", "safe", "set_keyword",
                    {"keyword": "gradient_checkpointing", "value": True}),
                None, {"saved_bytes": 29_635_755_622}),
    ]
    plan = TrainingPlan(SCRIPT)
    ctx = Context(plan, planned=SimpleNamespace(setup=None, missing=(), notes=()), estimate=est, gpu=H100)
    notes_plan = TrainingPlan("scripts/notes.py")
    notes_ctx = Context(notes_plan, planned=SimpleNamespace(setup=None, missing=("model_id", "max_length"),
                                                            notes=()))
    note = Finding("MEM099", "test-unknown-model",
                   "the model id comes from the command line; use --assume model_id=NAME", "note",
                   Span("scripts/notes.py", 3, 1))
    clean = FileResult("clean.py", TrainingPlan("clean.py"), Context(TrainingPlan("clean.py")), [])
    return [FileResult("scripts/notes.py", notes_plan, notes_ctx, [note]),
            FileResult(SCRIPT, plan, ctx, sorted(train, key=Finding.sort_key), lines), clean]


def render(fmt: str, results=None, **kw) -> str:
    buf = io.StringIO()
    write_results(_results() if results is None else results, fmt, buf, rules=RULES, **kw)
    return buf.getvalue()


GOLDEN_NAMES = {"concise": "concise.txt", "full": "full.txt", "json": "json.json", "json-lines": "json-lines.jsonl",
                "github": "github.txt", "gitlab": "gitlab.json", "junit": "junit.xml", "sarif": "sarif.json"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_matches_its_golden_file(fmt):
    text = render(fmt)
    path = GOLDEN / GOLDEN_NAMES[fmt]
    if os.environ.get("MEMLINT_REGEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{fmt} output changed; MEMLINT_REGEN=1 rewrites {path}"


def test_concise_is_one_line_per_finding_then_each_files_answer():
    lines = render("concise").splitlines()
    assert [ln.split(": ", 1)[0] for ln in lines] == [
        f"{SCRIPT}:12:74", f"{SCRIPT}:17:5", f"{SCRIPT}:18:5", SCRIPT, "scripts/notes.py:3:1", "scripts/notes.py"]
    # the severity follows the code; Ruff's [*] marks a safe fix only; --show-fixes marks the unsafe one too
    assert lines[2].startswith(f"{SCRIPT}:18:5: MEM298 [*] warning: gradient checkpointing is off")
    assert lines[1].startswith(f"{SCRIPT}:17:5: MEM199 error: estimated peak")
    assert lines[4].startswith("scripts/notes.py:3:1: MEM099 note: the model id")
    assert " [*] " not in lines[0]
    assert " [*] " in render("concise", show_fixes=True).splitlines()[0]
    # each file ends with its peak and verdict, or why there is none
    assert lines[3] == f"{SCRIPT}: peak 100.3 GiB, does not fit H100-80GB: 20.7 GiB over its 79.6 GiB"
    assert lines[5] == ("scripts/notes.py: no estimate, unknown model_id, max_length "
                        "(--assume model_id=… --assume max_length=…)")


def test_a_run_that_fits_says_so_with_or_without_a_gpu():
    r = _results()[1]
    r.findings = []
    r.context.gpu = ("H200", 150_754_820_096, 536_870_912)
    assert render("concise", [r]) == f"{SCRIPT}: peak 100.3 GiB, fits H200 with 40.1 GiB free\n"
    r.context.gpu = None
    assert render("concise", [r]) == (f"{SCRIPT}: peak 100.3 GiB, smallest common GPU that fits: H200 (140.4 GiB) "
                                      "(--gpu NAME checks one)\n")
    assert render("full", [r]).endswith(render("concise", [r]))


def test_the_summary_counts_each_severity_and_says_why_notes_exit_0():
    results = _results()
    assert formats.summary(results) == "Found 4 findings (1 error, 2 warnings, 1 note).\n" + \
        "[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"
    notes = [results[0]]
    assert formats.summary(notes, fail_on="warning") == ("Found 1 finding (1 note).\n"
                                                         "None at or above fail-on (warning): exit 0.\n")


def test_colour_only_when_asked():
    for fmt in ("concise", "full"):
        assert "\x1b[" not in render(fmt)
        coloured = render(fmt, color=True)
        assert "\x1b[31;1mMEM199\x1b[0m" in coloured


def test_full_shows_source_caret_related_lines_help_and_the_estimate():
    text = render("full")
    assert "17 |     per_device_train_batch_size=8,  # tuned on an 80 GB card\n" in text
    # the underline covers the argument, not its comma or comment
    assert "   |     " + "^" * len("per_device_train_batch_size=8") + " MEM199\n" in text
    assert f"   = max_length set here: {SCRIPT}:5:1: MAX_LEN = 4096\n" in text
    assert "   = help: per_device_train_batch_size=4 with gradient_accumulation_steps=2\n" in text
    assert "   = fix: turn on gradient checkpointing (safe)\n" in text
    assert "  peak           100.30 GiB  at the backward phase\n" in text
    assert f"{SCRIPT}: peak 100.3 GiB, does not fit H100-80GB: 20.7 GiB over its 79.6 GiB\n" in text
    # no estimate: say which values to assume
    assert ("scripts/notes.py: no estimate, unknown model_id, max_length "
            "(--assume model_id=… --assume max_length=…)\n") in text
    # a file without findings prints nothing
    assert "clean.py" not in text.replace(SCRIPT, "")


def test_full_estimate_table_reads_a_real_estimate():
    from memlint.catalog import resolve
    from memlint.estimate import Setup, estimate

    est = estimate(Setup(resolve("Qwen/Qwen2.5-0.5B"), batch=2, seq=1024), "real", H100[2])
    r = _results()[1]
    r.context.estimate = est
    table = formats.estimate_table(r)
    assert f"{est.peak / GIB:,.2f} GiB" in table
    assert f"{est.bytes('weights') / GIB:,.2f} GiB" in table
    assert "fits H100-80GB with" in table and "Qwen/Qwen2.5-0.5B, micro-batch 2 × 1024" in table


def test_json_has_ruffs_keys_plus_memlints_numbers():
    items = json.loads(render("json"))
    assert len(items) == 4
    ruff_keys = {"cell", "code", "end_location", "filename", "fix", "location", "message", "noqa_row", "url"}
    ours = {"name", "severity", "related", "hint", "data"}
    assert all(set(i) == ruff_keys | ours for i in items)
    exceeds = next(i for i in items if i["code"] == "MEM199")
    assert exceeds["location"] == {"row": 17, "column": 5}
    assert exceeds["end_location"] == {"row": 17, "column": 5 + len("per_device_train_batch_size=8")}
    assert exceeds["data"]["max_batch"] == 4 and exceeds["fix"] is None
    assert exceeds["related"][1] == {"cell": None, "filename": SCRIPT, "location": {"row": 18, "column": 5},
                                     "message": "gradient checkpointing set here"}
    fixed = next(i for i in items if i["code"] == "MEM298")
    assert fixed["fix"]["applicability"] == "safe" and fixed["fix"]["message"] == "turn on gradient checkpointing"
    # absolute links, as Ruff's; [tool.memlint] docs-url moves them
    assert fixed["url"] == formats.DOCS_URL + "MEM298-test-recompute-off.md" and fixed["url"].startswith("https://")
    moved = json.loads(render("json", docs_url="https://example.org/memlint/rules"))
    assert {i["url"] for i in moved} >= {"https://example.org/memlint/rules/MEM298-test-recompute-off.md"}


def test_github_annotations_map_severity_and_escape_what_github_requires():
    lines = render("github").splitlines()
    assert lines[1] == (f"::error title=memlint (MEM199),file={SCRIPT},line=17,col=5,endLine=17,endColumn=34"
                        f"::{SCRIPT}:17:5: MEM199 " + _results()[1].findings[1].message)
    assert lines[3].startswith("::notice title=memlint (MEM099),file=scripts/notes.py,line=3,col=1,")
    assert escape_data("100% of 80 GB\r\nnext") == "100%25 of 80 GB%0D%0Anext"
    assert escape_property("a,b:c%\n") == "a%2Cb%3Ac%25%0A"
    odd = FileResult("dir,1/x:y.py", TrainingPlan("dir,1/x:y.py"), Context(TrainingPlan("dir,1/x:y.py")),
                     [Finding("MEM099", "n", "50% over\nby a lot", "warning", Span("dir,1/x:y.py", 2, 3))])
    out = render("github", [odd])
    assert out == ("::warning title=memlint (MEM099),file=dir%2C1/x%3Ay.py,line=2,col=3,endLine=2,endColumn=3"
                   "::dir,1/x:y.py:2:3: MEM099 50%25 over%0Aby a lot\n")


def _check_sarif_structure(log: dict) -> None:
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "memlint"
    from memlint import __version__
    assert driver["version"] == __version__
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for res in run["results"]:
        assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note", "none")
        assert res["message"]["text"]
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert "\\" not in loc["artifactLocation"]["uri"] and not loc["artifactLocation"]["uri"].startswith("/")
        assert loc["region"]["startLine"] >= 1 and loc["region"]["startColumn"] >= 1


def test_sarif_carries_every_rule_and_points_results_at_them():
    log = json.loads(render("sarif"))
    _check_sarif_structure(log)
    driver = log["runs"][0]["tool"]["driver"]
    assert [r["id"] for r in driver["rules"]] == ["MEM099", "MEM199", "MEM298", "MEM299"]
    exceeds = next(r for r in driver["rules"] if r["id"] == "MEM199")
    assert exceeds["shortDescription"]["text"] == "the peak exceeds the GPU"
    assert exceeds["help"]["markdown"].startswith("## What it does")
    assert exceeds["defaultConfiguration"] == {"enabled": True, "level": "error"}
    recompute = next(r for r in driver["rules"] if r["id"] == "MEM298")
    assert recompute["defaultConfiguration"]["enabled"] is False
    res = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "MEM199")
    assert [r["message"]["text"] for r in res["relatedLocations"]] == [
        "max_length set here", "gradient checkpointing set here"]
    assert res["relatedLocations"][0]["physicalLocation"]["region"] == {"startLine": 5, "startColumn": 1}


def test_sarif_paths_are_relative_uris_with_forward_slashes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path / "sub dir" / "t.py")
    r = FileResult(absolute, TrainingPlan(absolute), Context(TrainingPlan(absolute)),
                   [Finding("MEM099", "n", "m", "note", Span(absolute, 1, 1))])
    loc = json.loads(render("sarif", [r]))["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "sub%20dir/t.py", "uriBaseId": "%SRCROOT%"}


def test_sarif_is_valid_against_the_2_1_0_schema():
    jsonschema = pytest.importorskip("jsonschema")
    if not SCHEMA.exists():
        pytest.skip("SARIF schema not vendored in tests/data/")
    validator = jsonschema.Draft4Validator(json.loads(SCHEMA.read_text()))
    log = json.loads(render("sarif"))
    validator.validate(log)
    validator.validate(json.loads(render("sarif", [])))
    # the schema is strict where memlint could go wrong: a level SARIF lacks, an unknown key
    log["runs"][0]["results"][0]["level"] = "fatal"
    log["runs"][0]["tool"]["driver"]["rules"][0]["summary"] = "not a SARIF key"
    assert len(list(validator.iter_errors(log))) == 2


def test_sarif_lists_the_registry_rules_by_default():
    registry = pytest.importorskip("memlint.rules.registry")
    buf = io.StringIO()
    write_results(_results(), "sarif", buf)
    log = json.loads(buf.getvalue())
    _check_sarif_structure(log)
    ids = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert set(ids) >= {r.code for r in registry.all_rules()}


def test_real_check_results_render_in_every_format():
    """The engine's own findings on the bundled scripts (real data values, related lines,
    fixes) go through every format; json and sarif stay valid documents."""
    check = pytest.importorskip("memlint.check")
    from memlint.config import Settings

    results = check.check_paths([str(ROOT / "fixtures" / "scripts")], Settings(gpu="RTX4090", extend_select=("ALL",)))
    assert sum(len(r.findings) for r in results) >= 10
    for fmt in FORMATS:
        buf = io.StringIO()
        write_results(results, fmt, buf)
        text = buf.getvalue()
        assert text and "Traceback" not in text
    buf = io.StringIO()
    write_results(results, "json", buf)
    assert len(json.loads(buf.getvalue())) == sum(len(r.findings) for r in results)
    buf = io.StringIO()
    write_results(results, "sarif", buf)
    log = json.loads(buf.getvalue())
    _check_sarif_structure(log)
    if SCHEMA.exists() and importlib.util.find_spec("jsonschema") is not None:
        import jsonschema

        jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)


def test_statistics_counts_per_code_most_frequent_first():
    results = _results()
    results[0].findings.extend([results[0].findings[0]] * 2)
    stats = statistics(results)
    assert stats == [("MEM099", "test-unknown-model", 3, False), ("MEM199", "test-exceeds-gpu", 1, False),
                     ("MEM298", "test-recompute-off", 1, True), ("MEM299", "test-pads-to-max-length", 1, True)]
    buf = io.StringIO()
    write_statistics(stats, buf)
    assert buf.getvalue().splitlines() == [
        "3\tMEM099\t[ ] test-unknown-model", "1\tMEM199\t[ ] test-exceeds-gpu",
        "1\tMEM298\t[*] test-recompute-off", "1\tMEM299\t[*] test-pads-to-max-length"]
    buf = io.StringIO()
    write_statistics(stats, buf, "json")
    assert json.loads(buf.getvalue())[0] == {"code": "MEM099", "count": 3, "fixable": False,
                                             "name": "test-unknown-model"}


def test_summary_counts_findings_and_fixes():
    assert formats.summary(_results()) == (
        "Found 4 findings (1 error, 2 warnings, 1 note).\n[*] 1 fixable with the `--fix` option "
        "(1 hidden fix can be enabled with the `--unsafe-fixes` option).\n")
    assert formats.summary(_results(), show_fixes=True) == (
        "Found 4 findings (1 error, 2 warnings, 1 note).\n[*] 2 fixable with the `--fix` option.\n")
    unsafe_only = _results()[1]
    unsafe_only.findings = [f for f in unsafe_only.findings if f.code != "MEM298"]
    assert formats.summary([unsafe_only]) == (
        "Found 2 findings (1 error, 1 warning).\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n")
    assert formats.summary([]) == "All checks passed!\n"


def test_empty_results_render_empty_but_valid_documents():
    assert render("concise", []) == "" and render("github", []) == "" and render("full", []) == ""
    assert json.loads(render("json", [])) == []
    assert json.loads(render("sarif", []))["runs"][0]["results"] == []


def test_unknown_format_is_a_usage_error():
    with pytest.raises(MemlintError, match="unknown output format 'xml'"):
        render("xml")
    with pytest.raises(MemlintError):
        write_statistics([], io.StringIO(), "sarif")


# ---- the formats added for issue #16: json-lines, gitlab, junit; notebooks in every format ----


def test_json_lines_is_one_json_finding_per_line_in_json_order():
    lines = render("json-lines").splitlines()
    assert [json.loads(ln) for ln in lines] == json.loads(render("json"))


def test_gitlab_code_quality_has_a_stable_fingerprint_per_finding():
    issues = json.loads(render("gitlab"))
    assert len(issues) == 4 and len({i["fingerprint"] for i in issues}) == 4
    for i in issues:
        assert set(i) == {"check_name", "description", "fingerprint", "severity", "location"}
        assert i["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert set(i["location"]["positions"]) == {"begin", "end"}
    exceeds = next(i for i in issues if i["check_name"] == "MEM199")
    assert exceeds["severity"] == "major" and exceeds["location"]["positions"]["begin"] == {"line": 17, "column": 5}
    # the fingerprint follows the finding, not its figures: a new number keeps it
    results = _results()
    f = results[1].findings[1]
    results[1].findings[1] = Finding(f.code, f.name, f.message.replace("100.3", "101.0"), f.severity, f.span,
                                     f.related, f.fix, f.hint, f.data)
    moved = json.loads(render("gitlab", results))
    assert [i["fingerprint"] for i in moved] == [i["fingerprint"] for i in issues]


def test_junit_is_xml_with_a_failed_case_per_finding():
    import xml.etree.ElementTree as ET

    root = ET.fromstring(render("junit"))
    assert root.tag == "testsuites" and root.get("failures") == "4"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases][:3] == ["org.memlint.MEM299", "org.memlint.MEM199", "org.memlint.MEM298"]
    assert all(c.find("failure") is not None for c in cases)
    empty = ET.fromstring(render("junit", []))
    assert empty.get("failures") == "0" and empty.find("./testsuite/testcase").get("name") == "No errors found"


def test_notebook_findings_point_at_the_cell_and_at_the_raw_json_line(capsys, monkeypatch):
    from memlint.cli import main

    from memlint.library.versions import pinned_versions

    monkeypatch.chdir(ROOT)
    nb = "fixtures/scripts/gemma_sft_notebook.ipynb"
    raw = (ROOT / nb).read_text().splitlines()
    outs = {}
    with pinned_versions({"trl": "1.14.2"}):  # an SFTTrainer that still materialises the logits: MEM205
        for fmt in ("concise", "json", "github", "sarif", "full", "junit"):
            main(["check", nb, "--gpu", "14", "--output-format", fmt, "--no-cache"])
            outs[fmt] = capsys.readouterr().out
    assert f"{nb}:cell 2:6:1: MEM205" in outs["concise"]
    finding = next(i for i in json.loads(outs["json"]) if i["code"] == "MEM205")
    assert finding["cell"] == 2 and finding["location"] == {"row": 6, "column": 1}
    # github and SARIF annotate the file on disk: the JSON line that holds the cell's text
    line = next(ln for ln in outs["github"].splitlines() if "MEM205" in ln)
    row = int(line.split(",line=")[1].split(",")[0])
    col = int(line.split(",col=")[1].split(",")[0])
    assert raw[row - 1][col - 1:].startswith('model_id = \\"google/gemma-2b\\"')
    region = next(r for r in json.loads(outs["sarif"])["runs"][0]["results"] if r["ruleId"] == "MEM205")
    region = region["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (row, col)
    assert "cell 2:6:1: MEM205" in outs["full"] and "\n6 | model_id = " in outs["full"]
    assert "cell 2, line 6" in outs["junit"]


def test_full_follows_the_terminal_width():
    text = render("full", width=60)
    head = next(ln for ln in text.splitlines() if " MEM199 " in ln)
    assert len(head) <= 60
    assert all(len(ln) <= 60 for ln in text.splitlines() if "= help:" in ln)
    assert "  peak           100.30 GiB" in text and render("full") != text
