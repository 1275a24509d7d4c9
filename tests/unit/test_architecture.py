"""The package's layers hold (see ARCHITECTURE.md): no module imports a layer above its own, no
module touches another module's ``_private`` names, and the engine uses of a store only what the
engine contract (:class:`rmqstore.engine.contract.StoreParts`) names. Walks the AST of every module
of ``src/``; the checkers are first shown to catch each kind of violation in a made-up module."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rmqstore.engine.contract import CONTRACT_NAMES

SRC = Path(__file__).resolve().parents[2] / "src"

#: layer of each top-level part of rmqstore, lowest first; a module may import its own layer and below
LAYERS = {
    "errors": 0,
    "format": 1, "io": 1,
    "config": 2, "types": 2, "spark_python": 2,
    "layout": 3,
    "engine": 4,
    "message_store": 5, "store_reads": 5, "rebuild": 5, "consumer": 5,
    "export": 6, "spark": 6, "broker": 6, "demo": 6,
    "cli": 7, "__main__": 7, "testing": 7,
}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "rmqstore":
        return None
    if len(parts) < 2 or parts[1] not in LAYERS:  # the package itself (re-exports the facade)
        return LAYERS["message_store"]
    return LAYERS[parts[1]]


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of rmqstore in ``tree`` (also inside functions)."""
    package = module if is_package else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target + "." + a.name for a in node.names] if node.module is None else [target]
            out += [(node.lineno, t) for t in names if t.startswith("rmqstore")]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("rmqstore")]
    return out


def upward_imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    mine = layer_of(module)
    bad = []
    for line, target in imported_modules(tree, module, is_package):
        theirs = layer_of(target)
        if mine is not None and theirs is not None and theirs > mine:
            bad.append(f"{module}:{line} imports {target} (a layer above)")
    return bad


def _own_private_names(tree: ast.Module) -> set[str]:
    """Private names this module defines: functions, classes, attributes it assigns, names it binds."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            own.add(node.value)  # __slots__ entries
    return {n for n in own if n.startswith("_")}


def foreign_private_uses(tree: ast.Module, module: str) -> list[str]:
    own = _own_private_names(tree)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if name.startswith("_") and not name.startswith("__") and name not in own:
                bad.append(f"{module}:{node.lineno} uses {ast.unparse(node)} (another module's private name)")
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    bad.append(f"{module}:{node.lineno} imports {a.name} (another module's private name)")
    return bad


def outside_contract(tree: ast.Module, module: str) -> list[str]:
    """In the engine: ``store.X`` / ``self.store.X`` with X not in the engine contract."""
    if not module.startswith("rmqstore.engine.") or module == "rmqstore.engine.contract":
        return []
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        is_store = (isinstance(v, ast.Name) and v.id == "store") or \
            (isinstance(v, ast.Attribute) and v.attr == "store" and isinstance(v.value, ast.Name) and v.value.id == "self")
        if is_store and node.attr not in CONTRACT_NAMES:
            bad.append(f"{module}:{node.lineno} uses store.{node.attr}, which the engine contract does not name")
    return bad


#: the store's file and directory names: spelled only in rmqstore/io/paths.py
STORE_NAMES = {"commitlog", "consumequeue", "index", "checkpoint", "abort", "lock", "config", "broker.conf",
               "consumerOffset.json", "topics.json", "subscriptionGroup.json", "delayOffset.json", "timerState.json"}


def store_names_spelled(tree: ast.Module, module: str) -> list[str]:
    """A store file name given as a literal to ``os.path.join`` outside ``io/paths.py``."""
    if module == "rmqstore.io.paths":
        return []
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.path.join", "join"):
            for a in node.args:
                if isinstance(a, ast.Constant) and a.value in STORE_NAMES:
                    bad.append(f"{module}:{node.lineno} spells {a.value!r} (use rmqstore.io.paths)")
    return bad


def modules():
    for path in sorted((SRC / "rmqstore").rglob("*.py")):
        if "messaging/proto" in str(path):
            continue
        yield module_name(path), path.name == "__init__.py", ast.parse(path.read_text(), str(path))


def test_no_upward_imports():
    bad = [b for m, pkg, tree in modules() for b in upward_imports(tree, m, pkg)]
    assert bad == []


def test_no_module_touches_another_modules_private_names():
    bad = [b for m, _, tree in modules() for b in foreign_private_uses(tree, m)]
    assert bad == []


def test_the_engine_uses_of_a_store_only_the_contract():
    bad = [b for m, _, tree in modules() for b in outside_contract(tree, m)]
    assert bad == []


def test_one_module_names_the_store_files():
    bad = [b for m, _, tree in modules() for b in store_names_spelled(tree, m)]
    assert bad == []


#: no module over this many lines (tests/unit/test_budgets.py holds the function budgets)
MAX_MODULE_LINES = 500


def long_modules(root: Path = SRC) -> list[str]:
    """Modules under ``root`` over :data:`MAX_MODULE_LINES` lines (no exceptions)."""
    return [f"{p.relative_to(root)}: {n} lines" for p in sorted(root.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """module -> the modules of the package it imports (every explicit import, also inside
    functions; a package is its ``__init__``; ``from pkg import name`` of a name that is not a
    module is an import of ``pkg``). Generated protobuf code (``messaging/proto/``) aside."""
    trees = {}
    for path in sorted((root / "rmqstore").rglob("*.py")):
        if "proto" in path.relative_to(root).parts:
            continue
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        trees[".".join(parts)] = (path.name == "__init__.py", ast.parse(path.read_text(), str(path)))
    graph: dict[str, set[str]] = {m: set() for m in trees}
    for m, (is_package, tree) in trees.items():
        for _, target in imported_modules(tree, m, is_package):
            while target not in trees and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in trees and target != m:
                graph[m].add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

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
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_module_is_over_500_lines():
    assert long_modules() == []


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert "rmqstore.engine.recovery" in graph["rmqstore.engine.verify.derived"]  # verify uses recovery ...
    assert import_cycles(graph) == []  # ... and nothing of recovery imports verify back


def test_the_cycle_and_size_checkers_catch_a_violation(tmp_path):
    pkg = tmp_path / "rmqstore"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from .x import f\n")
    (pkg / "a" / "x.py").write_text("def f():\n    from ..b import g\n" + "#\n" * MAX_MODULE_LINES)
    (pkg / "b.py").write_text("from rmqstore.a import f\ng = 1\n")
    (pkg / "c.py").write_text("from rmqstore import b\n")
    assert import_cycles(import_graph(tmp_path)) == [["rmqstore.a", "rmqstore.a.x", "rmqstore.b"]]
    assert long_modules(tmp_path) == [f"rmqstore/a/x.py: {MAX_MODULE_LINES + 2} lines"]


def test_every_top_level_part_has_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in (SRC / "rmqstore").iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())) and p.name != "__init__.py"}
    assert tops - set(LAYERS) == set()


@pytest.mark.parametrize("source,module,checker,expected", [
    ("from ..message_store import MessageStore", "rmqstore.engine.x", upward_imports, "a layer above"),
    ("from rmqstore.cli import main", "rmqstore.spark.x", upward_imports, "a layer above"),
    ("def f(store):\n    store._retire(1)", "rmqstore.engine.x", foreign_private_uses, "private name"),
    ("from .tasks import _spec", "rmqstore.spark.x", foreign_private_uses, "private name"),
    ("def f(store):\n    store.open_write()", "rmqstore.engine.x", outside_contract, "does not name"),
    ("import os\np = os.path.join(d, 'consumequeue', t)", "rmqstore.spark.x", store_names_spelled, "use rmqstore.io.paths"),
    ("class A:\n    def f(self):\n        self.store.put_message(1)", "rmqstore.engine.x", outside_contract,
     "does not name"),
])
def test_the_checkers_catch_a_violation(source, module, checker, expected):
    tree = ast.parse(source)
    got = checker(tree, module, False) if checker is upward_imports else checker(tree, module)
    assert len(got) == 1 and expected in got[0]


def test_the_checkers_let_a_module_use_its_own_private_names():
    tree = ast.parse("class A:\n    __slots__ = ('_x',)\n    def f(self, other):\n        return other._x\n"
                     "def _h():\n    pass\nclass B:\n    g = staticmethod(_h)")
    assert foreign_private_uses(tree, "rmqstore.engine.x") == []
