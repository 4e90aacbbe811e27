"""memlint.extract.syntax builds libcst's node shapes and positions from CPython's `ast`; on every
fixture and every memlint source file, each node's class, fields and syntactic range must equal
what libcst's parser and PositionProvider give (libcst is the oracle here; memlint itself never
imports it). The differences that remain are deliberate and listed in KNOWN."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memlint.extract import syntax
from memlint.extract.parsed import parse

cst = pytest.importorskip("libcst")
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("fixtures/**/*.py"), *ROOT.glob("src/memlint/**/*.py"), *ROOT.glob("tests/*.py")])

TRICKY = '''\
# -*- coding: utf-8 -*-
"""doc
string"""
@decorator(a,
           b)
def f(x: int = (1 +
                2), *, y="""multi
line""") -> None:
    if x: return [i for i in range(3) if i]
    with open(x) as fh, open(y) as gh:  # comment
        pass
    z = {**{"a": 1}, 'b': lambda q: q}\r
    return "a" \\
        "tail"  'x'
class C(Base, metaclass=M):
    attr: int = 3
    é = "naïve"; ü = 'ü' if x else None
try:
    pass
except (ValueError, KeyError) as err:
    raise RuntimeError() from err
else:
    del a, b
finally:
    (a, b), = c
for (i, j) in zip(a, b):
    x[1:2, ::3] += f(*args, k=(1), **kw)
else: print(sum(v for v in x if v), g((v for v in y), 1))
while not (a or b or (c and d)): break
global q
'''

# (node class, what differs) that are deliberate:
KNOWN = {
    ("Parameters", "pos"),  # libcst's owns the whitespace and trailing comma before ")"; nothing reads it
}


def _compare(m, c, mpos, cpos, pairs, problems, where="Module"):
    mt, ct = type(m).__name__, type(c).__name__
    if mt != ct:
        # an f-string concatenated with strings: libcst keeps the pieces, ast (and memlint) one f-string
        if not (ct == "ConcatenatedString" and mt == "FormattedString"):
            problems.append(f"{where}: {ct} read as {mt}")
        return
    pairs.append((m, c))
    if m in mpos and c in cpos and (mt, "pos") not in KNOWN:
        a, b = mpos[m], cpos[c]
        if tuple(a.start) + tuple(a.end) != (b.start.line, b.start.column, b.end.line, b.end.column):
            problems.append(f"{where}.{mt}: range {tuple(a.start)}-{tuple(a.end)}, libcst's {b.start}-{b.end}")
    for attr in ("value", "star"):
        if attr in m.__slots__ and mt not in ("FormattedStringText",):
            mv, cv = getattr(m, attr), getattr(c, attr, None)
            if isinstance(cv, str) and not isinstance(mv, syntax.CSTNode) and mv != cv and not (attr == "star" and mv == ""):
                problems.append(f"{where}.{mt}.{attr}: {mv!r}, libcst's {cv!r}")
    if hasattr(m, "operator") and type(m.operator).__name__ != type(c.operator).__name__:
        problems.append(f"{where}.{mt}.operator")
    for f in m._fields:
        mv, cv = getattr(m, f), getattr(c, f, None)
        if isinstance(cv, cst.MaybeSentinel):
            cv = None
        if mt == "FormattedString" and f == "parts":
            continue  # ast splits the text parts at other places (same text, same expressions)
        if isinstance(mv, list):
            cv = list(cv) if isinstance(cv, (list, tuple)) else cv
            if not isinstance(cv, list) or len(cv) != len(mv):
                problems.append(f"{where}.{mt}.{f}: {len(mv)} items, libcst's {cv if cv is None else len(cv)}")
                continue
            for x, y in zip(mv, cv):
                if isinstance(x, syntax.CSTNode):
                    _compare(x, y, mpos, cpos, pairs, problems, f"{mt}.{f}")
        elif isinstance(mv, syntax.CSTNode):
            if cv is None:
                problems.append(f"{where}.{mt}.{f}: libcst has none")
            else:
                _compare(mv, cv, mpos, cpos, pairs, problems, f"{mt}.{f}")
        elif mv is None and cv is not None and not (isinstance(cv, (list, tuple)) and not cv):
            problems.append(f"{where}.{mt}.{f}: missing ({type(cv).__name__})")


def _same(source: str) -> None:
    c = cst.parse_module(source)
    wrapper = MetadataWrapper(c, unsafe_skip_copy=True)
    cpos = wrapper.resolve(PositionProvider)
    cparent = wrapper.resolve(ParentNodeProvider)
    mtree, mpos, mparent = parse(source)
    problems: list[str] = []
    pairs: list = []
    assert len(mtree.body) == len(c.body)
    for x, y in zip(mtree.body, c.body):
        _compare(x, y, mpos, cpos, pairs, problems)
    assert not problems, "\n".join(problems[:20])
    # parents: the same parent where both have the node; in source (pre-)order, as libcst's codegen
    cnode = {id(m): cn for m, cn in pairs}
    for m, cn in pairs:
        p = mparent.get(m)
        if p is not None and id(p) in cnode:
            assert cparent[cn] is cnode[id(p)], type(m).__name__
    order: dict = {}
    stack = [c]
    while stack:  # libcst's pre-order: codegen's
        n = stack.pop()
        order[id(n)] = len(order)
        stack.extend(reversed(n.children))
    seen = [order[id(cnode[id(m)])] for m in mparent if id(m) in cnode and id(cnode[id(m)]) in order]
    assert seen == sorted(seen)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nodes_and_ranges_match_libcst(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError:
        pytest.skip("a fixture libcst does not parse")
    _same(text)


def test_tricky_source() -> None:
    _same(TRICKY)


def test_parse_is_cached_and_errors_are_one_exception() -> None:
    first = parse(TRICKY)
    assert parse(TRICKY) is first
    with pytest.raises(syntax.ParserSyntaxError) as err:
        parse("def f(:\n    pass\n")
    assert err.value.raw_line == 1 and err.value.message
    with pytest.raises(syntax.ParserSyntaxError):
        parse("x = 1\0\n")


def test_values_of_literals() -> None:
    tree = parse('a = 0x10\nb = 1_000.5\nc = "x" \'y\'\nd = b"z"\ne = rf"{a}\\n"\n').module
    vals = [s.body[0].value for s in tree.body]
    assert [vals[0].evaluated_value, vals[1].evaluated_value] == [16, 1000.5]
    assert vals[0].value == "0x10" and vals[2].evaluated_value == "xy"
    assert isinstance(vals[2], syntax.ConcatenatedString) and vals[3].evaluated_value == b"z"
    assert isinstance(vals[4], syntax.FormattedString)


def test_lines_are_pythons_not_splitlines() -> None:
    """A form feed or \\x1c inside a line is not a line break for Python (ast's line numbers)."""
    src = "a = 1  # \x0c page\nb = '\x1c'\nc = 3\n"
    tree, pos, _ = parse(src)
    assert [pos[s].start.line for s in tree.body] == [1, 2, 3]
    assert syntax.code_for(tree, tree.body[2].body[0].value) == "3"


def test_the_lint_path_does_not_import_libcst() -> None:
    code = ("import sys, contextlib, io; from memlint.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['check', 'fixtures/scripts/trl_sft_qlora.py', '--no-cache', '--fix', '--diff'])\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('libcst', 'torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_form_feed_or_line_separator_does_not_shift_the_lines(tmp_path):
    """A page break (\\f on its own line, GNU style) or a U+2028 inside a string is not a line break for
    Python: the plan's lines and the findings' lines stay the file's."""
    from memlint.check import check_source
    from memlint.extract import extract_file

    script = tmp_path / "train.py"
    script.write_text('from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n'
                      '\x0c\n'
                      'PROMPT = "a\u2028b"\n'
                      'model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")\n'
                      'args = TrainingArguments("out", per_device_train_batch_size=4)\n'
                      'Trainer(model=model, args=args).train()\n', encoding="utf-8")
    plan = extract_file(script)
    batch, model = plan.get("per_device_batch"), plan.get("model_id")
    assert batch.value == 4 and batch.span.line == 5
    assert model.value == "Qwen/Qwen2.5-0.5B" and model.span.line == 4
    result = check_source(script.read_text(encoding="utf-8"), str(script))
    assert all(1 <= f.span.line <= 6 for f in result.findings)
