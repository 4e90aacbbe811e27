"""`from m import a` walks only what `a` needs of m (extract/slicing.py), with m's line numbers kept."""

from __future__ import annotations

import textwrap
from pathlib import Path

from memlint.extract import extract_file
from memlint.extract.slicing import needed_source
from memlint.library.versions import pinned_versions

NEWEST = {"transformers": None, "torch": None, "peft": None, "trl": None, "unsloth": None}

UTILS = textwrap.dedent('''\
    import argparse, os
    from transformers import TrainingArguments

    BASE = 4
    UNUSED_TABLE = {i: i * i for i in range(10)}

    def unrelated(x):
        return x + UNUSED_TABLE[1]

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=BASE * 2)
    args, _ = parser.parse_known_args()

    CONFIG = {"model": "Qwen/Qwen2.5-0.5B"}
    CONFIG["max_length"] = 512

    def make_args(out):
        return TrainingArguments(out, per_device_train_batch_size=args.batch)
    a = 1; b = 2
    if __name__ == "__main__":
        unrelated(3)
''')


def test_only_what_the_names_need_is_kept_line_for_line():
    part = needed_source(UTILS, {"make_args"})
    assert part is not None
    assert part.count("\n") == UTILS.count("\n")  # every line is still there
    kept = [n for n, line in enumerate(part.splitlines(), 1) if line.strip()]
    original = UTILS.splitlines()
    for n in kept:
        assert part.splitlines()[n - 1] == original[n - 1]
    text = "\n".join(part.splitlines()[n - 1] for n in kept)
    assert "def make_args" in text and "parser.add_argument" in text and "BASE = 4" in text
    assert "import argparse" in text and "from transformers import TrainingArguments" in text
    assert "def unrelated" not in text and "UNUSED_TABLE" not in text and "__main__" not in text
    assert 'CONFIG["max_length"]' not in text


def test_a_mutation_of_a_needed_name_is_kept():
    part = needed_source(UTILS, {"CONFIG"})
    assert 'CONFIG["max_length"] = 512' in part and "def make_args" not in part


def test_everything_needed_or_unparsable_reads_the_whole_module():
    assert needed_source("A = 1\nB = A\n", {"B"}) is None
    assert needed_source("def f(:\n", {"f"}) is None
    # a line shared by a kept and a dropped statement stays whole
    assert needed_source("a = 1; b = 2\nc = 3\n", {"a"}) == "a = 1; b = 2\n\n"


def test_a_script_reads_a_sliced_sibling_with_its_real_lines(tmp_path: Path):
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''\
        from utils import make_args, CONFIG
        from transformers import AutoModelForCausalLM, Trainer
        model = AutoModelForCausalLM.from_pretrained(CONFIG["model"])
        Trainer(model=model, args=make_args("o")).train()
    '''), encoding="utf-8")
    with pinned_versions(NEWEST):
        plan = extract_file(script)
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B"
    batch = plan.get("per_device_batch")
    assert batch.value == 8
    assert batch.span.path.endswith("utils.py") and batch.line == 11


def test_a_second_import_of_more_names_reads_more_of_the_module(tmp_path: Path):
    (tmp_path / "hp.py").write_text("MODEL = 'gpt2'\nBATCH = 3\nOTHER = 1\n", encoding="utf-8")
    (tmp_path / "helpers.py").write_text("from hp import BATCH\nB2 = BATCH * 2\n", encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''\
        from helpers import B2
        from hp import MODEL
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained(MODEL)
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=B2)).train()
    '''), encoding="utf-8")
    with pinned_versions(NEWEST):
        plan = extract_file(script)
    assert plan.get("model_id").value == "gpt2" and plan.get("model_id").line == 1
    assert plan.get("per_device_batch").value == 6


def test_a_table_filled_by_calls_at_module_level_keeps_those_calls():
    text = textwrap.dedent('''\
        TEMPLATES = dict()

        def register_template(name, fmt):
            TEMPLATES[name] = fmt

        def unrelated():
            return 1

        register_template("default", "{x}")
        register_template("qwen", "<|im_start|>{x}")
    ''')
    part = needed_source(text, {"TEMPLATES"})
    assert part is not None and 'register_template("qwen"' in part and "def register_template" in part
    assert "def unrelated" not in part


# ---- lazy reading: a module of the checkout is read when a name from it is used (issue #26, item 3) ----------

TRAIN_WITH = '''\
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
{imports}
model = AutoModelForCausalLM.from_pretrained({model})
Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size={batch})).train()
'''


def _plan(tmp_path: Path, imports: str, model: str = "MODEL", batch: str = "2"):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_WITH.format(imports=imports, model=model, batch=batch), encoding="utf-8")
    with pinned_versions(NEWEST):
        return extract_file(script)


def _read(plan) -> set[str]:
    return {Path(s).relative_to(Path(plan.path).parent).as_posix() for s in plan.sources if s.endswith(".py")}


def test_a_module_imported_but_never_used_is_not_read(tmp_path: Path):
    (tmp_path / "hp.py").write_text("MODEL = 'gpt2'\n", encoding="utf-8")
    (tmp_path / "heavy.py").write_text("import torch\nHELPER = 1\n" + "X = HELPER\n" * 500, encoding="utf-8")
    plan = _plan(tmp_path, "from hp import MODEL\nfrom heavy import HELPER\nimport heavy as h")
    assert plan.get("model_id").value == "gpt2"
    assert _read(plan) == {"hp.py"}


def test_a_package_re_exporting_by_star_reads_what_the_name_needs(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import *\nfrom .b import *\n", encoding="utf-8")
    (pkg / "a.py").write_text("OTHER = 1\n", encoding="utf-8")
    (pkg / "b.py").write_text("from .c import BASE\nMODEL = 'Qwen/Qwen2.5-0.5B'\nBATCH = BASE * 2\n", encoding="utf-8")
    (pkg / "c.py").write_text("BASE = 3\nUNUSED = 0\n", encoding="utf-8")
    (pkg / "d.py").write_text("MODEL = 'never read'\n", encoding="utf-8")
    plan = _plan(tmp_path, "from pkg import MODEL, BATCH", batch="BATCH")
    assert plan.get("model_id").value == "Qwen/Qwen2.5-0.5B" and plan.get("per_device_batch").value == 6
    assert plan.get("per_device_batch").chain[0] == "BASE = 3 (line 1)"  # c.py's line, read through b.py
    assert _read(plan) == {"pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/c.py"}


def test_a_lazy_package_init_as_transformers_writes_it(tmp_path: Path):
    # transformers 4 (an _import_structure table and TYPE_CHECKING imports) and 5 (TYPE_CHECKING star imports); a
    # third package with the table alone: the _LazyModule reads the submodule a name is listed under
    for name, init in (("v4", '''\
from typing import TYPE_CHECKING
_import_structure = {"configuration": ["BATCH"], "modeling": ["MODEL"]}
if TYPE_CHECKING:
    from .configuration import BATCH
    from .modeling import MODEL
else:
    import sys
    sys.modules[__name__] = _LazyModule(__name__, globals()["__file__"], _import_structure, module_spec=__spec__)
'''), ("v5", '''\
from typing import TYPE_CHECKING
from ...utils import _LazyModule
if TYPE_CHECKING:
    from .configuration import *
    from .modeling import *
else:
    import sys
    _file = globals()["__file__"]
    sys.modules[__name__] = _LazyModule(__name__, _file, define_import_structure(_file), module_spec=__spec__)
'''), ("table", '''\
_import_structure = {"configuration": ["BATCH"], "modeling": ["MODEL"]}
import sys
sys.modules[__name__] = _LazyModule(__name__, globals()["__file__"], _import_structure, module_spec=__spec__)
''')):
        root = tmp_path / name
        pkg = root / "pkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(init, encoding="utf-8")
        (pkg / "configuration.py").write_text("BATCH = 4\n", encoding="utf-8")
        (pkg / "modeling.py").write_text("import torch\nMODEL = 'gpt2'\n", encoding="utf-8")
        (pkg / "unused.py").write_text("MODEL = 'never read'\n", encoding="utf-8")
        plan = _plan(root, "from pkg import MODEL, BATCH", batch="BATCH")
        assert plan.get("model_id").value == "gpt2" and plan.get("per_device_batch").value == 4, name
        assert "pkg/unused.py" not in _read(plan), name


def test_a_function_body_is_read_when_the_function_runs(tmp_path: Path):
    # the helper's body needs BASE, a table and a parser far from it: read when make_args runs, with the file's lines
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    from memlint.extract.slicing import needed_part

    part, kept, lines = needed_part(UTILS, {"make_args"}, bodies=False, compact=True)
    assert "def make_args" in part and "parser.add_argument" not in part  # the body's names: when it runs
    assert lines[:2] == (17, 18) and part.splitlines()[0] == UTILS.splitlines()[16]  # the kept lines alone, numbered
    plan_lines = part.count("\n")
    assert plan_lines == len(lines) < UTILS.count("\n")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''\
        from utils import make_args, CONFIG
        from transformers import AutoModelForCausalLM, Trainer
        model = AutoModelForCausalLM.from_pretrained(CONFIG["model"])
        Trainer(model=model, args=make_args("o")).train()
    '''), encoding="utf-8")
    with pinned_versions(NEWEST):
        plan = extract_file(script)
    batch = plan.get("per_device_batch")
    assert (batch.value, Path(batch.span.path).name, batch.line) == (8, "utils.py", 11)


def test_a_function_imported_and_never_called_is_still_walked(tmp_path: Path):
    # a collate function the script imports but passes nowhere memlint sees still says how it pads (as the
    # script's own uncalled functions do); an imported constant it never uses leaves its module unread
    (tmp_path / "data.py").write_text("def collate(batch, tok):\n"
                                      "    return tok(batch, padding='max_length', max_length=1024)\n", encoding="utf-8")
    (tmp_path / "consts.py").write_text("UNUSED = 1\n", encoding="utf-8")
    plan = _plan(tmp_path, "MODEL = 'gpt2'\nfrom data import collate\nfrom consts import UNUSED")
    assert plan.get("padding").value == "max_length" and plan.get("max_length").value == 1024
    assert _read(plan) == {"data.py"}
