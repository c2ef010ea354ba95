"""Text a terminal shows literally, without rich: what the progress lines and the scan's
output need before (or instead of) a rendered report."""

from __future__ import annotations

from sandbox.contract.text import clean

SHOWN = 100_000  # a report's own caps bound its text; this only bounds the terminal


def plain(value: object) -> str:
    """``value`` as text a terminal shows literally: control characters escaped, no
    surrogates. Build :class:`rich.text.Text` from it (never a markup string)."""
    return clean(value, SHOWN)
