"""List torch releases from a package index (PEP 691 JSON simple API) and resolve version specs.

Only versions with a wheel for the probe interpreter (cp311, manylinux, x86_64 by default) count:
a release without one cannot be installed, so it can never be probed.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from conformance.errors import ConformanceUsageError

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json"
_MINOR_RE = re.compile(r"^\d+\.\d+$")

#: Fetches a URL and returns the decoded JSON document (replaced by a fake in tests).
Fetch = Callable[[str], dict[str, Any]]


class IndexError_(ConformanceUsageError):
    """The index cannot be read, or a requested version is not on it (one-line message)."""


def fetch_json(url: str, timeout: float = 60.0) -> dict[str, Any]:
    """GET ``url`` asking for the PEP 691 JSON form of the simple API."""
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            data = json.loads(response.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexError_(f"cannot read the package index at {url}: {exc}") from None
    if not isinstance(data, dict):
        raise IndexError_(f"unexpected answer from {url}: not a JSON object")
    return data


def _wheel_fits(filename: str, python_tag: str, platform: str) -> Version | None:
    """The version of a wheel for ``python_tag`` on a ``platform`` platform tag, else None."""
    if not filename.endswith(".whl"):
        return None
    try:
        _, version, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    for tag in tags:
        if tag.interpreter == python_tag and "manylinux" in tag.platform:
            if tag.platform.endswith(platform):
                return version
    return None


def list_versions(
    index_url: str = DEFAULT_INDEX,
    *,
    pre: bool = False,
    python_tag: str = "cp311",
    platform: str = "x86_64",
    fetch: Fetch = fetch_json,
) -> list[Version]:
    """Sorted torch versions on ``index_url`` with a ``python_tag`` manylinux ``platform`` wheel.

    Local versions (``2.8.0+cpu``) fold into their public version; pre-releases and dev builds are
    kept only with ``pre``.
    """
    url = index_url.rstrip("/") + "/torch/"
    data = fetch(url)
    found: set[Version] = set()
    for entry in data.get("files", []):
        name = entry.get("filename", "") if isinstance(entry, dict) else ""
        if isinstance(entry, dict) and entry.get("yanked"):
            continue
        version = _wheel_fits(name, python_tag, platform)
        if version is None:
            continue
        public = Version(version.public)
        if (public.is_prerelease or public.is_devrelease) and not pre:
            continue
        found.add(public)
    if not found:
        raise IndexError_(f"no torch wheels for {python_tag} manylinux {platform} on {url}")
    return sorted(found)


def resolve_version(spec: str, versions: Iterable[Version]) -> Version:
    """``spec`` as an exact version of ``versions``; a minor (``2.8``) means its latest patch."""
    available = sorted(versions)
    try:
        wanted = Version(spec)
    except InvalidVersion:
        raise IndexError_(f"{spec!r} is not a version (expected e.g. 2.8 or 2.8.0)") from None
    if _MINOR_RE.match(spec.strip()):
        same = [v for v in available if v.release[:2] == wanted.release[:2]]
        finals = [v for v in same if not v.is_prerelease and not v.is_devrelease]
        if finals or same:
            return max(finals or same)
    elif wanted in available:
        return next(v for v in available if v == wanted)
    near = ", ".join(str(v) for v in available[-8:])
    raise IndexError_(f"torch {spec} is not on the index (latest there: {near})")
