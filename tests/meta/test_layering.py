"""The package's rules, checked: the engine never imports pytest, the harness keeps no
module-level mutable state, the docs list what the code declares."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.harness.families import registry

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "conformance"
PYTEST_FREE = [PKG / "engine", PKG / "processes", PKG / "ops", PKG / "record.py", PKG / "errors.py"]


def _files(*roots: Path) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        out += [root] if root.is_file() else sorted(root.rglob("*.py"))
    return out


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", _files(*PYTEST_FREE), ids=lambda p: str(p.relative_to(ROOT)))
def test_engine_module_does_not_import_pytest(path: Path) -> None:
    assert not {"pytest", "_pytest", "xdist"} & _imports(path)


def test_engine_imports_without_pytest_at_run_time() -> None:
    """Importing every engine module (and the op specs) loads no pytest, not even indirectly."""
    modules = [
        "conformance." + ".".join(p.relative_to(PKG).with_suffix("").parts)
        for p in _files(*PYTEST_FREE)
        if p.name != "__init__.py"
    ]
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules)
    code += "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest'))\n"
    code += "assert not bad, bad\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


MUTABLE_CALLS = {"list", "dict", "set", "defaultdict", "Counter", "OrderedDict", "deque"}


def _module_level_mutables(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value = node.value
            mutable = isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                mutable = mutable or value.func.id in MUTABLE_CALLS
            if mutable:
                found.append(f"{path.name}:{node.lineno}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"{path.name}:{node.lineno} global {', '.join(node.names)}")
    return found


@pytest.mark.parametrize(
    "path",
    _files(PKG / "harness", PKG / "plugin.py", PKG / "record.py"),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_harness_keeps_no_module_level_mutable_state(path: Path) -> None:
    assert _module_level_mutables(path) == []


def test_the_mutable_state_check_can_fire(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("_CONFIG = []\nX: dict = {}\ndef f():\n    global _CONFIG\n")
    assert len(_module_level_mutables(bad)) == 3


def test_protocol_doc_table_is_generated_from_the_code() -> None:
    from conformance.engine.protocol import DOC_BEGIN, DOC_END, markdown_table

    doc = (ROOT / "docs" / "BACKEND_PROTOCOL.md").read_text()
    table = doc[doc.index(DOC_BEGIN) : doc.index(DOC_END) + len(DOC_END)]
    assert table == markdown_table(), "run: python -m conformance.engine.protocol"


def test_results_doc_names_every_check_and_status() -> None:
    from conformance.engine.checks import CHECKS
    from conformance.engine.gradients import GRAD_CHECKS
    from conformance.engine.sample_run import checks_left_out  # noqa: F401 - registers them all
    from conformance.harness.families import registry
    from conformance.record import HARNESS_CHECKS, Status

    doc = (ROOT / "docs" / "RESULTS.md").read_text()
    names = [c.name for c in CHECKS] + list(HARNESS_CHECKS) + list(GRAD_CHECKS)
    names += [f.check for f in registry().members if f.check is not None]
    names += ["memory", "leak"]
    missing = [n for n in names if not re.search(rf"`{re.escape(n)}`", doc)]
    missing += [s.value for s in Status if f"`{s.value}`" not in doc]
    assert missing == [], f"docs/RESULTS.md does not describe {missing}"


def test_every_package_is_shipped_by_pyproject() -> None:
    """Packages are found by setuptools' discovery: every one must match its include globs."""
    import fnmatch

    import tomllib

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    include = find["packages"]["find"]["include"]
    packages = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in PKG.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert {p for p in packages if not any(fnmatch.fnmatch(p, g) for g in include)} == set()


# ---- import circles and the rooms' directions -------------------------------------------------
#: each room of the package (a folder, or a module of its own) and the rooms it may import,
#: from the top down; docs/ARCHITECTURE.md draws the same order. A new room needs a line here.
ROOM_MAY_IMPORT: dict[str, set[str]] = {
    # entry points: pytest's plugin and test module, the capability query, old noxfiles' import
    "plugin": {"harness", "engine", "record", "errors"},
    "conftest": {"plugin"},
    "test_conformance": {"harness", "engine", "record"},
    "profile": {"engine", "errors"},
    "tools": {"ci"},
    # the rooms that work across runs: bisection, the CI matrix, measuring the suite
    "bisect": {"processes", "ci", "report", "engine", "record", "errors", "sharding"},
    "measure": {
        *("harness", "processes", "history", "report", "samples", "ops"),
        *("engine", "findings", "record", "errors"),
    },
    "bugs": {"processes", "history", "report", "engine", "findings", "record", "errors"},
    "ci": {"processes", "engine", "sharding", "errors"},
    "upstream": {"harness", "report", "samples", "engine", "findings", "record", "errors"},
    # the run: the families' test folders (below), the pytest plumbing, the reports it writes
    "harness": {
        "processes",
        "history",
        "report",
        "samples",
        "ops",
        "engine",
        "findings",
        "sharding",
        "record",
        "errors",
    },
    "history": {"report", "findings", "sharding", "record", "errors"},
    "report": {"processes", "findings", "sharding", "record", "errors"},
    # one case: its samples, the op specs, the engine that judges it
    "samples": {"processes", "ops", "engine", "record", "errors"},
    "ops": {"engine", "record", "errors"},
    "engine": {"processes", "record", "errors"},
    # the processes of a run: their table, the launcher, forks, zygotes, children's interpreter
    "processes": set(),
    # the shared vocabulary
    "findings": {"finding_keys", "record"},
    "finding_keys": {"record"},
    "sharding": {"errors"},
    "record": set(),
    "errors": set(),
    "": {"engine", "processes"},  # the package's face
}
#: a family's test folder (scenarios, contract, collectives, ...: harness/families) is a room of
#: its own above the harness, found by the registry
FAMILY_ROOM = frozenset({"harness", "engine", "record", "errors"})
ROOM_MAY_IMPORT.update(
    {f.folder: set(FAMILY_ROOM) for f in registry().members if f.folder is not None}
)


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's modules `path` imports (at module level, in a function, or for type hints
    only under `if TYPE_CHECKING:`: a circle of type hints is a circle a reader walks too), a
    submodule named in `from pkg import sub` counted as itself."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            subs = {f"{module}.{a.name}" for a in node.names} & set(known)
            out |= subs or ({module} & set(known))
    return out - {name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph(root: Path) -> dict[str, set[str]]:
    known = _modules(root)
    return {name: _imports_of(path, name, known) for name, path in known.items()}


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere in the package, type-only imports included (a collaborator is
    passed in, or described by a Protocol of the module that uses it)."""
    assert _circles(_graph(PKG)) == []


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _against_direction(graph: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    """The imports of a room that its line of `allowed` does not list."""
    bad = []
    for name, deps in sorted(graph.items()):
        room = _room(name)
        for dep in sorted(deps):
            other = _room(dep)
            if other != room and other not in allowed.get(room, set()):
                bad.append(f"{name} -> {dep}")
    return bad


def test_each_room_imports_only_downwards() -> None:
    assert _against_direction(_graph(PKG), ROOM_MAY_IMPORT) == []


def test_every_room_has_its_place() -> None:
    """A new folder or top-level module of the package is placed in ROOM_MAY_IMPORT (and in
    docs/ARCHITECTURE.md): its direction is a decision, never a default."""
    rooms = {_room(name) for name in _graph(PKG)}
    assert rooms - set(ROOM_MAY_IMPORT) == set()


def test_the_allowed_directions_go_down_only() -> None:
    """The table itself has no circle: no two rooms may import each other, directly or not."""
    assert _circles(ROOM_MAY_IMPORT) == []


def test_the_direction_check_can_fire() -> None:
    """An engine module importing the harness, or the harness importing the measuring room,
    is reported; the same imports the other way round are not."""
    graph = {
        "conformance.engine.runner": {"conformance.harness.session"},
        "conformance.harness.session": {"conformance.measure.power", "conformance.engine.runner"},
        "conformance.measure.power": {"conformance.harness.casework"},
    }
    assert _against_direction(graph, ROOM_MAY_IMPORT) == [
        "conformance.engine.runner -> conformance.harness.session",
        "conformance.harness.session -> conformance.measure.power",
    ]


def test_the_circle_check_can_fire(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from pkg.a import f\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.d\n"
    )
    (pkg / "d.py").write_text("import pkg.c\n")  # a circle of type hints counts too
    assert _circles(_graph(pkg)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


#: no module of the package over this many lines (a longer one is two concerns)
MAX_MODULE_LINES = 450


def _long_modules(root: Path, limit: int) -> list[str]:
    out = []
    for path in sorted(root.rglob("*")):
        if path.suffix != ".py" or "__pycache__" in path.parts:
            continue
        n = len(path.read_text().splitlines())
        if n > limit:
            out.append(f"{path.relative_to(root.parent)}: {n} lines")
    return out


def test_no_module_is_over_500_lines() -> None:
    assert _long_modules(PKG, MAX_MODULE_LINES) == []


def test_the_module_length_check_can_fire(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    found = _long_modules(tmp_path / "pkg", MAX_MODULE_LINES)
    assert found == [f"pkg/long.py: {MAX_MODULE_LINES + 1} lines"]
