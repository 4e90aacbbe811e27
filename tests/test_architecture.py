"""docs/architecture.md is true of the code: the import graph has no cycle and no arrow up the
stage table, heavy libraries stay where they belong, functions stay short, and adding a
trainer, an optimizer or an attention implementation is one data edit."""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import pytest

from memlint import data
from memlint.estimate import estimate
from memlint.estimate.from_plan import setup_from_plan
from memlint.extract import extract_source

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "memlint"
DOC = ROOT / "docs" / "architecture.md"
MAX_FUNCTION_LINES = 80
HEAVY = ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "trl", "IPython", "traitlets")
HEAVY_ALLOWED = ("memlint.measure", "memlint.notebook", "memlint.catalog.meta")
LIBCST_ALLOWED: tuple[str, ...] = ("memlint.extract", "memlint.fix")  # the parser (extract/parsed.py) and the fixes located in its tree
# IPython's contract: `%load_ext memlint` calls memlint.load_ipython_extension (docs/architecture.md)
ALLOWED_UP = {("memlint", "memlint.notebook.magic")}


def _stages() -> dict[str, int]:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- stages: read by tests/test_architecture.py -->", 1)[1].split("<!-- /stages -->", 1)[0]
    units: dict[str, int] = {}
    for row in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        for name in re.findall(r"`([\w.]+)`", cells[1]):
            units[name] = int(cells[0])
    return units


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    mods = {_module_name(p): p for p in SRC.rglob("*.py")}
    _MODULES.update(mods)
    return mods


_MODULES: set[str] = set()


def _imports(path: Path, module: str) -> list[str]:
    """Every module `path` imports, at module level or inside functions (a lazy import is still an arrow)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from memlint import data` imports the module memlint.data, not the package
            out += [f"{mod}.{a.name}" if f"{mod}.{a.name}" in _MODULES else mod for a in node.names]
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for imp in _imports(path, name):
            if not imp.startswith("memlint"):
                continue
            while imp not in mods and "." in imp:
                imp = imp.rsplit(".", 1)[0]
            if imp in mods and imp != name:
                deps.add(imp)
        graph[name] = deps
    return graph


def _unit(module: str, units: dict[str, int]) -> str | None:
    hits = [u for u in units if module == u or module.startswith(u + ".")]
    return max(hits, key=len) if hits else None


def test_every_module_has_a_stage():
    units = _stages()
    missing = [m for m in _modules() if m != "memlint" and _unit(m, units) is None]
    assert not missing, f"modules in no stage of docs/architecture.md: {missing}"


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_imports_point_down_the_stages():
    units = _stages()
    bad = []
    for module, deps in _graph().items():
        mu = _unit(module, units)
        for dep in deps:
            du = _unit(dep, units)
            if mu is None or du is None or mu == du or (module, dep) in ALLOWED_UP:
                continue
            if units[du] >= units[mu]:
                bad.append(f"{module} (level {units[mu]}) imports {dep} (level {units[du]})")
    assert not bad, "arrows against docs/architecture.md's stages:\n" + "\n".join(sorted(bad))


@pytest.mark.parametrize("library, allowed", [("libcst", LIBCST_ALLOWED), *[(h, HEAVY_ALLOWED) for h in HEAVY]])
def test_third_party_imports_stay_in_their_stages(library, allowed):
    bad = [m for m, p in _modules().items()
           if any(i == library or i.startswith(library + ".") for i in _imports(p, m))
           and not any(m == a or m.startswith(a + ".") for a in allowed)]
    assert not bad, f"{library} imported outside {allowed}: {bad}"


def test_functions_stay_short():
    long = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {n} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them along their sections):\n" + "\n".join(long)


# ---- one data edit each ------------------------------------------------------------------------

_TRAINER_SCRIPT = '''
from acme_rl import AcmeTrainer, AcmeConfig

args = AcmeConfig(output_dir="out", per_device_train_batch_size=3, max_length=512, bf16=True)
trainer = AcmeTrainer(model="Qwen/Qwen2.5-0.5B", args=args, train_dataset=None)
trainer.train()
'''


def _plan(source: str):
    return extract_source(source, "train.py")


def test_a_new_trainer_class_is_one_data_edit():
    before = _plan(_TRAINER_SCRIPT)
    assert not before.get("trainer").known
    doc = copy.deepcopy(data.load("library_api.json"))
    doc["training_arguments"]["AcmeConfig"] = "trl.SFTConfig"
    doc["trainers"]["AcmeTrainer"] = {"arguments": "trl.SFTConfig", "data": "sft"}
    with data.overridden("library_api.json", doc):
        plan = _plan(_TRAINER_SCRIPT)
        assert plan.value("trainer") == "AcmeTrainer"
        assert plan.value("per_device_batch") == 3 and plan.value("max_length") == 512
        assert plan.get("packing").source == "library-default"  # TRL's SFT path: packing is SFTConfig's
        planned = setup_from_plan(plan)
        assert planned.setup is not None and planned.setup.batch == 3 and planned.setup.seq == 512
    assert not _plan(_TRAINER_SCRIPT).get("trainer").known  # the override is gone with the block


_OPTIM_SCRIPT = '''
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype="bfloat16")
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, optim="acme_adamw", bf16=True)
Trainer(model=model, args=args, train_dataset=None).train()
'''


def test_a_new_optimizer_name_is_one_data_edit():
    plan = _plan(_OPTIM_SCRIPT).with_values()
    from memlint.estimate.from_plan import apply_assumptions

    plan, extra = apply_assumptions(plan, ["max_length=1024"])
    planned = setup_from_plan(plan, extra)
    assert planned.setup.optim == "adamw_torch" and any("acme_adamw" in n for n in planned.notes)
    doc = copy.deepcopy(data.load("optimizers.json"))
    base = doc["optimizers"]["adamw_torch"]
    doc["optimizers"]["acme_adamw"] = {**base, "state_bytes_per_param": 2 * base["state_bytes_per_param"]} \
        if "state_bytes_per_param" in base else copy.deepcopy(base)
    with data.overridden("optimizers.json", doc):
        planned = setup_from_plan(plan, extra)
        assert planned.setup.optim == "acme_adamw" and not any("acme_adamw" in n for n in planned.notes)
        assert estimate(planned.setup).peak > 0


_ATTN_SCRIPT = '''
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype="bfloat16", attn_implementation="acme_attn")
args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, bf16=True)
Trainer(model=model, args=args, train_dataset=None).train()
'''


def test_a_new_attention_implementation_is_one_data_edit():
    assert not _plan(_ATTN_SCRIPT).get("attn_implementation").known
    doc = copy.deepcopy(data.load("library_api.json"))
    doc["attention"]["acme_attn"] = {"kernel": "flash", "trace_as": "sdpa", "note": "acme_attn saves what SDPA saves"}
    with data.overridden("library_api.json", doc):
        from memlint.estimate.from_plan import apply_assumptions

        plan, extra = apply_assumptions(_plan(_ATTN_SCRIPT), ["max_length=1024"])
        assert plan.value("attn_implementation") == "acme_attn"
        setup = setup_from_plan(plan, extra).setup
        assert setup.attn == "acme_attn"
        est = estimate(setup)
        assert est.peak == estimate(setup.with_(attn="sdpa")).peak
        assert "acme_attn saves what SDPA saves" in est.assumptions


def test_a_config_format_is_one_module_found_by_the_registry():
    """Every Reader subclass in extract/configs/ with a kind registers (configs/registry.py), and the package's
    front (configs/__init__.py) names no format: adding one is a module plus its data rows."""
    from memlint.extract.configs import registry

    folder = SRC / "extract" / "configs"
    declared = set()
    for f in folder.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "kind" for t in stmt.targets) \
                            and isinstance(stmt.value, ast.Constant) and stmt.value.value:
                        has_matches = any(isinstance(s, ast.FunctionDef) and s.name == "matches" for s in node.body)
                        assert has_matches, f"{f.name}: {node.name} (kind {stmt.value.value!r}) has no matches()"
                        declared.add(stmt.value.value)
    assert declared == set(registry.names())
    front = (folder / "__init__.py").read_text(encoding="utf-8")
    named = [k for k in declared if re.search(rf"[\"']{re.escape(k)}[\"']", front)]
    assert not named, f"configs/__init__.py names formats {named}: they belong to their modules"
