"""The nightly torch-version report from synthetic runs of three torch versions."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.report.__main__ import main as report_main
from conformance.report.load import load_results
from conformance.report.versions import build_version_grid, compare_previous

CASES = {
    # case id -> status on 2.8.0, 2.9.1, 2.10.0
    "test_matches_cpu[mul.Tensor-float32-contiguous-native]": ("passed", "passed", "failed"),
    "test_matches_cpu[add.Tensor-float32-contiguous-native]": ("failed", "passed", "passed"),
    "test_matches_cpu[abs-float32-contiguous-native]": ("passed", "passed", "passed"),
    "test_matches_cpu[neg-int64-contiguous-native]": ("passed", "crashed", "crashed"),
}


def write_run(root: Path, name: str, torch: str, statuses: dict[str, str]) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(
        json.dumps({"torch": torch, "allocator": "malloc", "finished": "t"})
    )
    lines = []
    for case, status in statuses.items():
        op = case.split("[")[1].split("-")[0]
        name_, _, overload = op.partition(".")
        lines.append(
            json.dumps(
                {
                    "id": case,
                    "op": name_,
                    "overload": overload or "default",
                    "dtype": "float32",
                    "status": status,
                    "torch": torch,
                }
            )
        )
    (d / "cases-main.jsonl").write_text("\n".join(lines) + "\n")


def nightly(root: Path, flip: dict[str, tuple[str, str, str]] | None = None) -> Path:
    cases = {**CASES, **(flip or {})}
    for i, (minor, torch) in enumerate(
        [("2.8", "2.8.0+cu128"), ("2.9", "2.9.1+cu128"), ("2.10", "2.10.0+cpu")]
    ):
        write_run(root, f"conformance-{minor}", torch, {c: s[i] for c, s in cases.items()})
    # a sanitizer cell of 2.10 fails everything: it must not leak into the default grid
    write_run(root, "conformance-2.10-asan", "2.10.0", {c: "failed" for c in cases})
    return root


def test_grid_and_first_changed_version(tmp_path: Path) -> None:
    grid = build_version_grid(load_results([nightly(tmp_path / "now")]))
    assert [str(v) for v in grid.versions] == ["2.8.0", "2.9.1", "2.10.0"]  # ordered as versions
    firsts = {c.case.split("[")[1][:-1]: (c.version, c.kind) for c in grid.first_changes()}
    assert firsts == {
        "mul.Tensor-float32-contiguous-native": ("2.10.0", "regression"),
        "add.Tensor-float32-contiguous-native": ("2.9.1", "fix"),
        "neg-int64-contiguous-native": ("2.9.1", "regression"),
    }
    assert grid.ops["mul.Tensor"] == {
        v: s
        for v, s in zip(
            grid.versions,
            CASES["test_matches_cpu[mul.Tensor-float32-contiguous-native]"],
            strict=True,
        )
    }
    asan = build_version_grid(load_results([tmp_path / "now"]), "-asan")
    assert [str(v) for v in asan.versions] == ["2.10.0"]


def test_compare_with_previous_nightly(tmp_path: Path) -> None:
    prev = nightly(
        tmp_path / "prev",
        {
            "test_matches_cpu[abs-float32-contiguous-native]": ("passed", "failed", "passed"),
        },
    )
    now = nightly(
        tmp_path / "now",
        {
            "test_matches_cpu[abs-float32-contiguous-native]": ("passed", "passed", "failed"),
        },
    )
    comp = compare_previous(
        build_version_grid(load_results([now])), build_version_grid(load_results([prev]))
    )
    abs_id = "test_matches_cpu[abs-float32-contiguous-native]"
    assert comp.new_failures == [(abs_id, "2.10.0", "passed", "failed")]
    assert comp.new_passes == [(abs_id, "2.9.1", "failed", "passed")]


def test_cli_writes_markdown_and_html_with_heatmap(tmp_path: Path) -> None:
    now, prev = nightly(tmp_path / "now"), nightly(tmp_path / "prev")
    md, page = tmp_path / "v.md", tmp_path / "v.html"
    argv = [str(now), "--versions-md", str(md), "--versions-html", str(page)]
    assert report_main([*argv, "--previous", str(prev)]) == 0
    text = md.read_text()
    assert (
        "| `test_matches_cpu[mul.Tensor-float32-contiguous-native]` | **2.10.0** | regression"
        in text
    )
    assert "| `mul.Tensor` | passed | passed | failed |" in text
    assert "New failures since the previous nightly: 0" in text
    html = page.read_text()
    assert "data:image/png;base64,iVBOR" in html  # an embedded PNG
    assert "<b>2.10.0</b>" in html
    assert (
        report_main([str(now), "--versions-md", str(md), "--previous", str(tmp_path / "no")]) == 2
    )


def test_one_regression_over_hundreds_of_cases_is_one_finding(tmp_path: Path) -> None:
    """312 cases broken by one cause in 2.10 are one row: 'first fails in 2.10.0 (312 cases)'."""
    from conformance.report.versions import (
        render_versions_html,
        render_versions_markdown,
        version_findings,
    )

    ops = [f"op{i}" for i in range(104)]
    dtypes = ["float32", "int64", "bfloat16"]
    for minor, torch, broken in (("2.9", "2.9.1", False), ("2.10", "2.10.0", True)):
        d = tmp_path / f"conformance-{minor}"
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"torch": torch, "finished": "t"}))
        lines = []
        for n, (op, dt) in enumerate((o, t) for o in ops for t in dtypes):
            case = f"{op}.Tensor-{dt}-transposed-native"

            lines.append(
                json.dumps(
                    {
                        "id": f"test_matches_cpu[{case}]",
                        "op": op,
                        "overload": "Tensor",
                        "dtype": dt,
                        "layout": "transposed",
                        "path": "native",
                        "status": "failed" if broken else "passed",
                        "check": "strides" if broken else None,
                        "message": f"output: strides ({n % 7 + 1}, 1) on the device, cpu (1, "
                        f"{n % 5 + 2}); {op}.Tensor on torch.{dt}"
                        if broken
                        else None,
                        "repro": f"pytest conformance -k '{case}'",
                    }
                )
            )
        (d / "cases-main.jsonl").write_text("\n".join(lines) + "\n")
    grid = build_version_grid(load_results([tmp_path]))
    (vf,) = version_findings(grid)
    assert vf.kind == "regression" and str(vf.first) == "2.10.0" and vf.count == 312
    assert vf.headline() == "first fails in 2.10.0 (312 cases)"
    md = render_versions_markdown(grid, max_rows=20)
    assert "### Findings across versions: 1" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{vf.finding.id}`"))
    assert "**first fails in 2.10.0 (312 cases)** | 0 | 312 |" in row
    assert "`pytest conformance -k 'op0.Tensor-float32-transposed-native'`" in row  # its repro
    assert f"<details><summary><code>{vf.finding.id}</code>" in md  # cases one click away
    assert "| ... 292 more (all in the HTML report) |" in md
    page = render_versions_html(grid)
    assert f"<a href='#{vf.finding.id}'>" in page and f"<details id='{vf.finding.id}'>" in page
    assert page.count("<tr><td>test_matches_cpu[op") == 312 * 2  # finding cases + changed cases
