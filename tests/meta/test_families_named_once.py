"""Families of cases as plug-ins (harness/families): the harness asks the registry, it does not
name a family. A module of conformance/harness outside the families package that names one in its
code (a family's name, folder or manifest prefix as a string, `scenario:`-style keys, or an
import of a family's module) is a new place to edit for the next family. Docstrings and comments
may name them (they document the families that exist)."""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

from conformance.harness import families
from conformance.harness.families import registry

HARNESS = Path(__file__).resolve().parents[2] / "conformance" / "harness"


def _words() -> re.Pattern[str]:
    members = registry().members
    names = {f.name for f in members if f.folder is not None}
    names |= {f.folder for f in members if f.folder is not None}
    names |= {f.manifest_prefix for f in members if f.manifest_prefix is not None}
    return re.compile(rf"^({'|'.join(sorted(map(re.escape, names)))})(:.*)?$")


def _family_modules() -> re.Pattern[str]:
    """Every module of the families package but `base` (a family's module, a family's helper
    such as collectives_plan, the expectations they share): the harness asks the registry."""
    names = {m.name for m in pkgutil.iter_modules(families.__path__)} - {"base"}
    modules = {f"{families.__name__}.{name}" for name in names}
    return re.compile(rf"^({'|'.join(sorted(map(re.escape, modules)))})$")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def naming(text: str) -> list[str]:
    """The family names and family-module imports in a module's code (docstrings aside)."""
    tree = ast.parse(text)
    docs, words, modules = _docstrings(tree), _words(), _family_modules()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and words.match(node.value):
                found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module and modules.match(node.module):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}" for a in node.names if modules.match(a.name)
            ]
    return found


def test_no_harness_module_outside_the_families_names_a_family():
    named = {
        str(p.relative_to(HARNESS)): naming(p.read_text())
        for p in HARNESS.rglob("*.py")
        if "families" not in p.parts
    }
    assert {k: v for k, v in named.items() if v} == {}, "a family is named outside harness/families"


def test_the_guard_sees_a_planted_name():
    """The check itself fires: a key, a folder name and a family import are each caught, a
    docstring naming a family is not."""
    assert naming('"""Scenarios and contract items."""\nx = 1\n') == []
    assert naming('KEY = "scenario:test_cnn"\n')
    assert naming('if family == "collectives":\n    pass\n')
    assert naming("from conformance.harness.families.collectives_plan import CollectivesPlan\n")
    assert naming("import conformance.harness.families.contract\n")
