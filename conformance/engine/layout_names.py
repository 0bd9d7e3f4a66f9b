"""Layout names and help texts (no torch import: the plugin's --help needs them)."""

from __future__ import annotations

from conformance.errors import ConformanceUsageError

LAYOUT_HELP = {
    "contiguous": "plain row-major",
    "noncontiguous": "last dim doubled, view [..., 1::2] (as OpInfo's make_tensor)",
    "transposed": "last two dims swapped in memory",
    "sliced": "dim 0 sliced with step 2",
    "offset": "non-zero storage_offset",
    "expanded": "stride 0 in one dim (read-only inputs only)",
    "channels_last": "NHWC / NDHWC memory format (4-D and 5-D inputs)",
    "zero_size": "dim 0 of the largest inputs narrowed to 0",
    "zero_dim": "each input reduced to a 0-dim tensor",
}


def parse_layouts(text: str | None) -> list[str]:
    """Comma-separated layout names (None or 'all': every layout)."""
    if not text or text == "all":
        return list(LAYOUT_HELP)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LAYOUT_HELP]
    if unknown:
        raise ConformanceUsageError(
            f"unknown layout(s) {', '.join(unknown)}; valid: {', '.join(LAYOUT_HELP)}"
        )
    return names
