"""engine/kept.py: a kept value reads back as it was written (a lambda too), and the folder is
named by the code that drew it, so code that draws differently never reads an older draw."""

from __future__ import annotations

import torch

from conformance.engine import kept


def test_a_value_with_a_lambda_reads_back(tmp_path):
    path = kept.path_of(str(tmp_path), "things", "one")
    assert kept.load(path) is kept.MISSING
    kept.keep(path, (lambda x: x * 2, torch.arange(3)))
    double, values = kept.load(path)
    assert torch.equal(double(values), torch.tensor([0, 2, 4]))
    kept.keep(path, None)  # "nothing found" is a value too
    assert kept.load(path) is None
    assert kept.path_of(None, "things", "one") is None


def test_changed_code_draws_again(tmp_path):
    source = tmp_path / "drawing.py"
    source.write_text("SAMPLES = 1\n")
    first = kept.path_of(str(tmp_path), "things", "one", (str(source),))
    kept._digest.cache_clear()
    assert kept.path_of(str(tmp_path), "things", "one", (str(source),)) == first
    source.write_text("SAMPLES = 2\n")
    kept._digest.cache_clear()
    assert kept.path_of(str(tmp_path), "things", "one", (str(source),)) != first
