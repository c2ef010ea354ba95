"""Figures from a runner's reply: the runner's word, never believed without a bound."""

from __future__ import annotations

import math
from typing import Any


def number(x: Any) -> float | None:
    """A finite number from a runner's reply, or None (the runner's word is untrusted)."""
    if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def host_ms(reply: dict[str, Any]) -> tuple[float, float]:
    """The runner's host time before and after its timed region (its word: diagnostics)."""
    h = reply.get("host_ms")
    if isinstance(h, list) and len(h) == 2:
        a, b = number(h[0]), number(h[1])
        if a is not None and b is not None:
            return a, b
    return -1.0, -1.0
