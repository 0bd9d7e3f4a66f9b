"""Listing torch releases from a (fake) PEP 691 index response, and resolving minors."""

from __future__ import annotations

import io
import json

import pytest
from packaging.version import Version

from conformance.bisect import index
from conformance.bisect.index import IndexError_, list_versions, resolve_version

FILES = [
    "torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.7.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl",  # wrong platform
    "torch-2.7.1-cp311-none-macosx_11_0_arm64.whl",
    "torch-2.8.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # no cp311 wheel for 2.8.0
    "torch-2.9.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.9.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.9.1-cp311-cp311-win_amd64.whl",
    "torch-2.10.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.10.0.tar.gz",
    "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl",
]


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_lists_cp311_manylinux_x86_64_over_fake_http(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def urlopen(request, timeout):
        seen["url"], seen["accept"] = request.full_url, request.get_header("Accept")
        body = {"name": "torch", "files": [{"filename": f} for f in FILES]}
        return FakeResponse(json.dumps(body).encode())

    monkeypatch.setattr(index.urllib.request, "urlopen", urlopen)
    versions = list_versions("https://example.test/simple/")
    assert seen["url"] == "https://example.test/simple/torch/"
    assert seen["accept"] == "application/vnd.pypi.simple.v1+json"
    assert [str(v) for v in versions] == ["2.7.0", "2.7.1", "2.9.0", "2.10.0", "2.11.0"]
    with_pre = list_versions("https://example.test/simple", pre=True)
    assert Version("2.10.0rc1") in with_pre


def test_unreachable_index_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def urlopen(request, timeout):
        raise OSError("no route")

    monkeypatch.setattr(index.urllib.request, "urlopen", urlopen)
    with pytest.raises(IndexError_, match="cannot read the package index"):
        list_versions("https://example.test/simple")


def test_resolve_minor_to_latest_patch_and_exact() -> None:
    versions = [Version(v) for v in ["2.7.0", "2.7.1", "2.9.0", "2.10.0"]]
    assert resolve_version("2.7", versions) == Version("2.7.1")
    assert resolve_version("2.7.0", versions) == Version("2.7.0")
    for bad in ("2.8", "2.7.5", "x"):
        with pytest.raises(IndexError_):
            resolve_version(bad, versions)
