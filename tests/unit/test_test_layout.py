"""The unit tests mirror the package, and share their helpers through one kit.

* Every module of ``format/``, ``io/`` and ``engine/``, and the named top-level, Spark and CLI
  modules, has its unit tests at ``tests/unit/<package>/test_<module>.py`` (or in a folder
  ``tests/unit/<package>/<module>/`` when they are many, as ``message_store/``). A module of a
  sub-package (``engine/recovery/plan.py``) may be tested in ``engine/recovery/test_plan.py``,
  ``engine/test_recovery_plan.py``, or with its sub-package in ``engine/test_recovery.py``.
  :data:`PENDING` names the modules known to lack their file, so the list can only shrink.
* Every file of ``tests/unit`` is named after a module of its folder's package
  (``test_<module>.py`` or ``test_<module>_<aspect>.py``); every folder is a package or module.
* No test module defines the kit's helpers again (``_cfg``, ``msg``, ``load_vector``, ...: they live
  in ``tests/kit.py``), imports helpers ``from conftest`` (whichever folder's conftest.py was
  imported last would answer), or is named to run last (``test_zz_*``: no test may rely on the
  order of the files).

The checkers are first shown to catch each kind of violation in a made-up tree.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "rmqstore"
TESTS = ROOT / "tests"

#: packages whose every module needs a unit test file
MIRRORED_PACKAGES = ("format", "io", "engine")
#: other modules that need one (top-level, and the unit-level parts of spark/ and cli/)
MIRRORED_MODULES = ("errors", "config", "types", "layout", "message_store", "store_reads", "consumer", "export",
                    "rebuild", "spark/columns", "spark/filters", "spark/options", "cli/render", "cli/common")
#: modules written without their own unit test file (a branch that adds a module merged before the
#: branch with its tests); a module leaves the list when its file exists (the test fails until it is
#: removed from here). Empty: every module has its file.
PENDING: frozenset[str] = frozenset()
#: tests/unit files that test the code base as a whole, not one module
WHOLE_PACKAGE_TESTS = {"test_architecture.py", "test_test_layout.py", "test_budgets.py"}
#: helpers that live in tests/kit.py and nowhere else
KIT_HELPERS = {"_cfg", "make_config", "msg", "_msg", "_message", "load_vector", "vectors_root", "tree_hashes",
               "digests", "_free_port", "free_port", "_seg", "_patch", "_api", "message_from_input"}


def modules_to_mirror(src: Path, packages=MIRRORED_PACKAGES, named=MIRRORED_MODULES) -> list[str]:
    """Module paths relative to ``src`` without ``.py`` (``engine/recovery/__init__`` as
    ``engine/recovery``)."""
    out = []
    for pkg in packages:
        for p in sorted((src / pkg).rglob("*.py")):
            rel = p.relative_to(src).with_suffix("")
            if rel.name == "__init__":
                rel = rel.parent
                if rel == Path(pkg):
                    continue
            out.append(rel.as_posix())
    return out + [m for m in named if (src / (m + ".py")).exists() or (src / m).is_dir()]


def mirror_candidates(module: str, unit: Path) -> list[Path]:
    """Where the unit tests of ``module`` (``engine/recovery/plan``) may live."""
    parts = module.split("/")
    folder, name = unit.joinpath(*parts[:-1]), parts[-1]
    out = [folder / f"test_{name}.py", folder / name]
    for k in range(1, len(parts) - 1):  # engine/recovery/plan: tests/unit/engine/test_recovery_plan.py
        out.append(unit.joinpath(*parts[:k]) / ("test_" + "_".join(parts[k:]) + ".py"))
    if len(parts) > 2:  # ... or with its sub-package: tests/unit/engine/test_recovery.py
        out.append(unit.joinpath(*parts[:-2]) / f"test_{parts[-2]}.py")
    return out


def has_mirror(module: str, unit: Path) -> bool:
    return any(c.is_file() or (c.is_dir() and any(c.glob("test_*.py"))) for c in mirror_candidates(module, unit))


def unmirrored(src: Path, unit: Path, pending=frozenset(), **kw) -> list[str]:
    """Modules without a unit test file; and modules of ``pending`` that now have one."""
    missing = []
    for m in modules_to_mirror(src, **kw):
        there = has_mirror(m, unit)
        if not there and m not in pending:
            missing.append(f"src/rmqstore/{m}: no {mirror_candidates(m, unit)[0].relative_to(unit.parent.parent)}")
        elif there and m in pending:
            missing.append(f"src/rmqstore/{m}: has its unit test file now, take it off PENDING")
    return missing


def misplaced(src: Path, unit: Path) -> list[str]:
    """tests/unit files or folders that are named after no module of their folder's package."""
    bad = []
    for f in sorted(unit.rglob("test_*.py")):
        rel = f.relative_to(unit)
        folder = src.joinpath(*rel.parts[:-1])
        if folder.with_suffix(".py").is_file():  # a module's own folder (message_store/): any aspect
            continue
        if not folder.is_dir():
            bad.append(f"tests/unit/{rel}: {folder.relative_to(src.parent)} is no package or module")
            continue
        if len(rel.parts) == 1 and rel.name in WHOLE_PACKAGE_TESTS:
            continue
        stem = f.stem[len("test_"):]
        names = {p.stem if p.is_file() else p.name for p in folder.iterdir()
                 if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()}
        if not any(stem == n or stem.startswith(n + "_") for n in names):
            bad.append(f"tests/unit/{rel}: names no module of {folder.relative_to(src.parent)}")
    return bad


def helper_copies(path: Path, tree: ast.Module) -> list[str]:
    """Kit helpers defined again, helpers imported from a conftest, files named to run last."""
    bad = []
    if path.name.startswith("test_zz"):
        bad.append(f"{path}: named to run last (tests must not depend on file order)")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in KIT_HELPERS:
            bad.append(f"{path}:{node.lineno} defines {node.name} (use tests/kit.py)")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "conftest" and not node.level:
            bad.append(f"{path}:{node.lineno} imports from conftest (use tests/kit.py)")
    return bad


def test_every_module_has_a_unit_test_file():
    assert unmirrored(SRC, TESTS / "unit", PENDING) == []


def test_every_unit_test_file_is_named_after_a_module():
    assert misplaced(SRC, TESTS / "unit") == []


def test_helpers_live_in_the_kit():
    bad = []
    for p in sorted(TESTS.rglob("*.py")):
        if p.name == "kit.py" and p.parent == TESTS or "clients" in p.parts:
            continue
        bad += helper_copies(p.relative_to(ROOT), ast.parse(p.read_text(encoding="utf-8"), str(p)))
    assert bad == []


# ------------------------------------------------------------------------------------------------
# The checkers catch what they are for
# ------------------------------------------------------------------------------------------------

def _tree(root: Path, files: list[str]) -> None:
    for f in files:
        p = root / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")


def test_the_mirror_check_finds_a_module_without_tests(tmp_path):
    src, unit = tmp_path / "src" / "rmqstore", tmp_path / "tests" / "unit"
    _tree(src, ["format/__init__.py", "format/a.py", "format/b.py", "engine/__init__.py", "engine/c.py",
                "engine/rec/__init__.py", "engine/rec/plan.py", "engine/rec/apply.py", "engine/sub/__init__.py",
                "engine/sub/x.py", "config.py", "big.py"])
    _tree(unit, ["format/test_a.py", "engine/test_c.py", "engine/rec/test_plan.py", "engine/test_rec_apply.py",
                 "big/test_one_aspect.py"])
    kw = dict(packages=("format", "engine"), named=("config", "big", "absent"))
    assert unmirrored(src, unit, **kw) == ["src/rmqstore/format/b: no tests/unit/format/test_b.py",
                                           "src/rmqstore/engine/sub: no tests/unit/engine/test_sub.py",
                                           "src/rmqstore/engine/sub/x: no tests/unit/engine/sub/test_x.py",
                                           "src/rmqstore/config: no tests/unit/test_config.py"]
    assert unmirrored(src, unit, frozenset({"format/b", "config"}), **kw) == [
        "src/rmqstore/engine/sub: no tests/unit/engine/test_sub.py",
        "src/rmqstore/engine/sub/x: no tests/unit/engine/sub/test_x.py"]
    _tree(unit, ["format/test_b.py", "engine/test_sub.py", "test_config.py"])  # sub/x: with its sub-package
    assert unmirrored(src, unit, **kw) == []
    assert unmirrored(src, unit, frozenset({"format/b", "gone"}), **kw) == [
        "src/rmqstore/format/b: has its unit test file now, take it off PENDING"]


def test_the_naming_check_finds_a_file_named_after_nothing(tmp_path):
    src, unit = tmp_path / "src" / "rmqstore", tmp_path / "tests" / "unit"
    _tree(src, ["engine/__init__.py", "engine/verify.py", "engine/rec/__init__.py", "store.py", "types.py"])
    _tree(unit, ["engine/test_verify.py", "engine/test_verify_repair.py", "engine/test_rec.py",
                 "store/test_put.py", "test_types.py", "test_architecture.py"])
    assert misplaced(src, unit) == []
    _tree(unit, ["engine/test_verifyx.py", "test_presets.py", "nowhere/test_x.py"])
    assert misplaced(src, unit) == [
        "tests/unit/engine/test_verifyx.py: names no module of rmqstore/engine",
        "tests/unit/nowhere/test_x.py: rmqstore/nowhere is no package or module",
        "tests/unit/test_presets.py: names no module of rmqstore"]


@pytest.mark.parametrize("name, source, expected", [
    ("test_a.py", "def _cfg(**kw):\n    pass", "defines _cfg"),
    ("test_a.py", "def msg(topic='T'):\n    pass", "defines msg"),
    ("test_a.py", "from conftest import load_vector", "imports from conftest"),
    ("test_zz_last.py", "", "named to run last"),
])
def test_the_helper_check_catches_a_copy(name, source, expected):
    got = helper_copies(Path(name), ast.parse(source))
    assert len(got) == 1 and expected in got[0]


def test_the_helper_check_lets_a_module_use_the_kit():
    tree = ast.parse("from tests.kit import cfg, msg\nfrom .conftest import X\n"
                     "def _nth(i):\n    return msg('T', i=i)\n")
    assert helper_copies(Path("test_a.py"), tree) == []
