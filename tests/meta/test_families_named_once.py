"""Families of cases as plug-ins (harness/families): the harness asks the registry, it does not
name a family. A module of conformance/harness outside the families package that names one (a
family's id or folder as a string, `scenario:`-style manifest prefixes, or an import of a family's
module) is a new place to edit for the next family.

`STILL_NAMING` is what is left of that (issue 58): each entry must still name a family (so the
list only shrinks), and no other module may start."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.harness.families import registry

HARNESS = Path(__file__).resolve().parents[2] / "conformance" / "harness"
# the manifest's keys and the stale-entry check still spell the families' manifest prefixes;
# the session picks the collectives-only run by name; the Suite holds the collectives plan
STILL_NAMING = {
    "expectations.py",
    "session.py",
    "stale.py",
    "suite.py",
}


def _naming(text: str) -> bool:
    names = {f.name for f in registry().members if f.folder is not None}
    names |= {f.folder for f in registry().members if f.folder is not None}
    names |= {n.rstrip("s") for n in names}  # record paths and manifest prefixes: "scenario"
    modules = [f.__class__.__module__.rsplit(".", 1)[-1] for f in registry().members]
    words = "|".join(sorted(map(re.escape, names)))
    literal = re.search(rf"[\"']({words})(:[^\"']*)?[\"']", text)
    imported = re.search(
        rf"conformance\.harness\.families\.({'|'.join(modules)}|collectives_plan)\b", text
    )
    return bool(literal or imported)


def test_no_harness_module_outside_the_families_names_a_family():
    naming = {
        str(p.relative_to(HARNESS))
        for p in HARNESS.rglob("*.py")
        if "families" not in p.parts and _naming(p.read_text())
    }
    assert naming - STILL_NAMING == set(), "a family is named outside harness/families"
    assert STILL_NAMING - naming == set(), "no longer naming a family: drop it from STILL_NAMING"
