"""The imports run one way: no cycles between our modules, and the layers of DESIGN.md hold.

The graph is read from the source (``ast``), not from ``sys.modules``, so it sees
every import, including the ones a test run never reaches:

- ``import a.b`` and ``from a import b`` (when ``a.b`` is a module) are edges to
  ``a.b``; ``from a import name`` (a name, not a module) is an edge to the package
  ``a`` itself, whose ``__init__`` must have run far enough to define it.
- Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``: those are
  edges too, except to the importer's own parent packages, which Python always
  initialises before the importer.
- A package's lazy exports (``lazy_exports(__name__, {...})``) are edges from the
  package to the modules it names, loaded when the name is first used.

Layering counts every edge, including imports inside functions and under
``TYPE_CHECKING``. Cycles are checked twice:

- among the imports that run when a module is imported: none at all;
- among every import that runs (adding those inside functions): none but those
  listed in ``KNOWN_LAZY_CYCLES`` (empty: an accepted one goes there with its reason).
  A function-level import runs when the function is called, after every module
  has finished initialising, so it cannot meet a half-initialised module; such
  a cycle is a design smell, not a crash. ``TYPE_CHECKING`` imports never run and
  lazy exports are by definition on first use, so neither enters a cycle.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tf_config", "strategies", "toolkit", "models")

# package -> the packages of ours it may import (besides itself)
ALLOWED = {
    "tf_config": set(),
    "strategies": {"tf_config"},
    "models": set(),
    "toolkit": {"tf_config", "strategies", "models"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return name in modules and modules[name].name == "__init__.py"


def _absolute(node: ast.ImportFrom, importer: str, modules: dict[str, Path]) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer, modules):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


EAGER, IN_FUNCTION, NEVER_RUN = "eager", "in function", "never run"

# Cycles through imports inside functions that are still there, and why; each is a
# sorted strongly connected group. Remove an entry when its cycle is broken.
KNOWN_LAZY_CYCLES: set[tuple[str, ...]] = set()


def _kinds(tree: ast.AST) -> dict[int, str]:
    """ids of the import nodes inside a function body or an ``if TYPE_CHECKING:`` block."""
    kinds: dict[int, str] = {}

    def visit(node: ast.AST, kind: str) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kinds[id(node)] = kind
        inner = IN_FUNCTION if kind == EAGER and isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else kind
        checking = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.iter_child_nodes(node):
            visit(child, NEVER_RUN if checking and child in node.body else inner)

    visit(tree, EAGER)
    return kinds


# Calls whose second argument is a {name: module} table loaded on first use: lazy exports, and the
# old paths of moved modules (``moved_modules(package, {old name: new module})``, toolkit._moved).
LAZY_CALLS = ("lazy_exports", "moved_modules")


def _lazy_targets(tree: ast.Module, importer: str) -> list[str]:
    """The modules named in ``lazy_exports(__name__, {name: module}, modules=(...))`` or ``moved_modules`` calls."""
    assigned = {t.id: node.value for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in LAZY_CALLS:
            table = node.args[1] if len(node.args) > 1 else None
            if isinstance(table, ast.Name):
                table = assigned.get(table.id)
            assert isinstance(table, ast.Dict), f"{importer}: lazy_exports needs a dict literal the test can read"
            targets += [v.value for v in table.values if isinstance(v, ast.Constant)]
            for keyword in node.keywords:
                if keyword.arg == "modules":
                    targets += [f"{importer}.{e.value}" for e in ast.walk(keyword.value) if isinstance(e, ast.Constant)]
    return targets


def _edges(importer: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(imported module of ours, kind of import) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    kinds = _kinds(tree)
    found: list[tuple[str, str]] = []

    def add(target: str, kind: str) -> None:
        for name in [*_parents(target), target]:
            if name in modules and name != importer and name not in _parents(importer):
                found.append((name, kind))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, kinds.get(id(node), EAGER))
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, importer, modules)
            for alias in node.names:
                child = f"{source}.{alias.name}"
                add(child if child in modules else source, kinds.get(id(node), EAGER))
    for target in _lazy_targets(tree, importer):
        assert target in modules, f"{importer} lazily exports from {target}, which is not a module"
        found.append((target, NEVER_RUN))  # loaded on first use of the name: part of the layering only
    return found


@functools.cache
def _graph() -> dict[str, list[tuple[str, str]]]:
    modules = _modules()
    return {name: _edges(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _report(cycles: list[list[str]]) -> str:
    return "\n".join("  " + " <-> ".join(c) for c in cycles)


def test_graph_sees_the_packages_and_every_kind_of_import():
    graph = _graph()
    # A parser that found nothing would pass every check below.
    assert len(graph) > 150
    assert ("strategies._errors", EAGER) in graph["strategies._factory"]
    assert ("tf_config", IN_FUNCTION) in graph["strategies._factory"]
    assert ("tf_config.ports", IN_FUNCTION) in graph["tf_config._generate"]  # a relative one
    assert ("toolkit.launcher", NEVER_RUN) in graph["toolkit.jobs.engines.local._run_parts"]  # under TYPE_CHECKING
    assert ("toolkit.estimator.export", NEVER_RUN) in graph["toolkit.estimator"]  # lazy_exports(modules=...)
    assert ("toolkit.layers", NEVER_RUN) in graph["toolkit"]  # lazy_exports table
    assert ("toolkit.jobs.storage.store", NEVER_RUN) in graph["toolkit.jobs._moved"]  # moved_modules table


def test_no_import_cycles_when_modules_are_imported():
    eager = {m: {t for t, kind in edges if kind == EAGER} for m, edges in _graph().items()}
    cycles = _cycles(eager)
    assert not cycles, "import cycles (each line is one strongly connected group):\n" + _report(cycles)


def test_no_import_cycles_through_function_level_imports_but_the_known_ones():
    running = {m: {t for t, kind in edges if kind != NEVER_RUN} for m, edges in _graph().items()}
    cycles = [c for c in _cycles(running) if tuple(c) not in KNOWN_LAZY_CYCLES]
    assert not cycles, "import cycles through imports inside functions:\n" + _report(cycles)


def test_layers_import_only_downwards():
    wrong = []
    for module, edges in _graph().items():
        own = module.split(".")[0]
        for target, kind in edges:
            other = target.split(".")[0]
            if other != own and other not in ALLOWED[own]:
                wrong.append(f"{module} imports {target} ({kind})")
    assert not wrong, "imports against the layering (tf_config <- strategies <- toolkit; models alone):\n" + \
        "\n".join(sorted(set(wrong)))


# Inside toolkit.jobs: the job model at the bottom, the store on it, the engines on both, and the
# front (api, backends, reader, views, tuning) on top. A subpackage may import only the ones listed.
JOBS_LAYERS = {
    "toolkit.jobs.model": {"toolkit.jobs.errors"},
    "toolkit.jobs.storage": {"toolkit.jobs.errors", "toolkit.jobs.model"},
    "toolkit.jobs.engines": {"toolkit.jobs.errors", "toolkit.jobs.model", "toolkit.jobs.storage",
                             "toolkit.jobs.tuning"},  # the supervisor runs a study's trials
}


def _jobs_layer(module: str) -> str | None:
    return next((layer for layer in JOBS_LAYERS if module == layer or module.startswith(layer + ".")), None)


def test_jobs_subpackages_import_only_downwards():
    wrong = []
    for module, edges in _graph().items():
        layer = _jobs_layer(module)
        if layer is None:
            continue
        for target, kind in edges:
            if target.startswith("toolkit.jobs.") and _jobs_layer(target) != layer and not any(
                    target == allowed or target.startswith(allowed + ".") for allowed in JOBS_LAYERS[layer]):
                wrong.append(f"{module} imports {target} ({kind})")
    assert not wrong, "imports against toolkit.jobs' layers (model <- storage <- engines <- api):\n" + \
        "\n".join(sorted(set(wrong)))


def test_strategies_has_no_import_cycle_even_through_type_checking_imports():
    """The sharding modules once named each other (``sharding`` <-> ``_sharding_checkpoint``, for a type)."""
    every = {m: {t for t, _ in edges if t.startswith("strategies")} for m, edges in _graph().items()
             if m.startswith("strategies")}
    cycles = _cycles(every)
    assert not cycles, "import cycles in strategies (type-checking imports included):\n" + _report(cycles)
