"""The package's rules, checked: the engine never imports pytest, the harness keeps no
module-level mutable state, the docs list what the code declares."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "conformance"
PYTEST_FREE = [PKG / "engine", PKG / "ops", PKG / "record.py", PKG / "errors.py"]


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
    from conformance.record import HARNESS_CHECKS, Status

    doc = (ROOT / "docs" / "RESULTS.md").read_text()
    names = [c.name for c in CHECKS] + list(HARNESS_CHECKS) + list(GRAD_CHECKS)
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
#: what each room may import besides itself (record.py, errors.py, findings.py and sharding.py
#: are the shared vocabulary); the engine judges one case and never reaches up
ROOM_MAY_IMPORT = {
    "engine": {"record", "errors"},
    "ops": {"engine", "record", "errors"},
    "samples": {"engine", "ops", "record", "errors"},
}


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's modules `path` imports at run time (at module level or in a function; not
    under `if TYPE_CHECKING:`), a submodule named in `from pkg import sub` counted as itself."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
    return {name: _runtime_imports(path, name, known) for name, path in known.items()}


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere in the package (a collaborator is passed in, or imported for
    type hints only under TYPE_CHECKING)."""
    assert _circles(_graph(PKG)) == []


def test_each_room_imports_only_downwards() -> None:
    bad = []
    for name, deps in _graph(PKG).items():
        room = name.split(".")[1] if "." in name else ""
        allowed = ROOM_MAY_IMPORT.get(room)
        if allowed is None:
            continue
        for dep in deps:
            other = dep.split(".")[1] if "." in dep else ""
            if other != room and other not in allowed:
                bad.append(f"{name} -> {dep}")
    assert bad == []


def test_the_circle_check_can_fire(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from pkg.a import f\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    assert _circles(_graph(pkg)) == [["pkg.a", "pkg.b"]]
