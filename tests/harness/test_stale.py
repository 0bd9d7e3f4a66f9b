"""The stale-entry check under -k builds only the case ids some manifest pattern can name
(harness/stale.py `_NamedBy`): never fewer than the patterns match (an entry would be called
stale wrongly), and fewer than the matrix where the patterns name a few ops."""

from __future__ import annotations

import fnmatch
import itertools

from conformance.harness.stale import _NamedBy

OVERLOADS = ["abs", "abs_", "add.Tensor", "native_batch_norm", "_native_batch_norm_legit", "neg"]
WORDS = ["float32", "float64", "contiguous", "transposed", "native", "fallback", "special", "grad"]
PATTERNS = [
    "abs-float32-*",
    "*native_batch_norm*-float32-*-native-grad",
    "ab?-*",
    "[an]*-float64-*",
    "add*float32*",
    "*-transposed-fallback",
    "nothing-matches-this",
    "neg",
    "[a-m]*-float32-*",  # a class holding a '-'
    "abs*[!-]",  # a class that matches a '-'
    "ab[]s]-*",  # ']' first in a class is a member
    "ab[s-*",  # a '[' no ']' closes is a literal
    "[!a]dd.Tensor-*",
]


def _ids(overload: str) -> list[str]:
    tails = itertools.product(WORDS[:2], WORDS[2:4], WORDS[4:6], ["", "-special", "-grad"])
    return [f"{overload}-{d}-{lo}-{p}{v}" for d, lo, p, v in tails]


def test_every_id_a_pattern_matches_is_built():
    for pattern in PATTERNS:
        named = _NamedBy([pattern])
        for overload in OVERLOADS:
            if any(fnmatch.fnmatchcase(i, pattern) for i in _ids(overload)):
                assert named.may_keep(overload, WORDS), (pattern, overload)


def test_overloads_no_pattern_can_name_are_not_built():
    named = _NamedBy(["abs-float32-*", "*native_batch_norm*-float32-*-native-grad"])
    kept = [o for o in OVERLOADS if named.may_keep(o, WORDS)]
    assert kept == ["abs", "native_batch_norm", "_native_batch_norm_legit"]
    assert _NamedBy(["*-transposed-fallback"]).may_keep("neg", WORDS)  # a star names any
    assert not any(_NamedBy(["nothing-matches-this"]).may_keep(o, WORDS) for o in OVERLOADS)
