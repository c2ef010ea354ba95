"""Summary statistics of timing samples. Standard library only.

Imported inside the sandbox (the judge's timing summaries, the escape check) and on the
host (``grader.measure``); it depends on nothing but the standard library. The acceptance
rules built on these live in :mod:`sandbox.contract.rules`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# --- summary statistics ----------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted values, by linear interpolation.

    This is the "linear" (type 7) definition NumPy uses by default: position
    ``q * (n - 1)`` between the two neighbouring order statistics.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """Mean, median, p95, sample std, min, coefficient of variation and count.

    ``std`` is the sample standard deviation (n - 1 denominator; 0.0 for one sample);
    ``cv`` is ``std / mean`` (0.0 when the mean is 0). Raises ``ValueError`` on no samples
    or a non-finite sample: a summary of a broken measurement would be a guess.
    """
    values = [float(s) for s in samples]
    if not values:
        raise ValueError("summarize() needs at least one sample")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("summarize() got a non-finite sample")
    ordered = sorted(values)
    # fsum, not sum: order-independent rounding, so the summary of a permutation is equal.
    mean = math.fsum(ordered) / len(ordered)
    std = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    return {
        "mean": mean,
        "median": statistics.median(ordered),
        "p95": percentile(ordered, 0.95),
        "std": std,
        "min": ordered[0],
        "cv": std / mean if mean != 0 else 0.0,
        "n": len(ordered),
    }


def median(values: Sequence[float]) -> float:
    """The one median definition both sides use (the mean of the middle two for even n)."""
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))
