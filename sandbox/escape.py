"""Did work escape the timed region? Judged from two clocks the candidate does not control."""

from __future__ import annotations

from typing import Any


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[len(ys) // 2] if ys else 0.0


def escaped_time(ms: list[float], judge_ms: list[float], noop_overhead: list[float],
                 device: str, tails: list[float] | None = None,
                 noop_tails: list[float] | None = None) -> dict[str, Any]:
    """Work the timed region did not see, per call (medians: robust to host load).

    Two clocks, two checks:

    * the judge's own clock: honest calls satisfy ``judge = overhead + ms``, so
      ``median(judge - ms) - median(noop overhead)`` is near zero, plus the host's launch
      cost on GPUs (hidden behind the cold-cache flush), hence a 0.1 ms floor there. It
      catches a tampered clock whatever the device.
    * on CUDA, the device's idle tail: time from the end event to a marker recorded once
      the device is idle; anything left running past the end event lengthens it, with no
      launch cost in it, so its budget can be a few microseconds.
    """
    med_ms = _median(ms)
    floor, rel = (0.5, 0.25) if device == "cpu" else (0.1, 0.25)
    budget = max(floor, rel * med_ms)
    hidden = _median([j - m for j, m in zip(judge_ms, ms, strict=True)]) - _median(noop_overhead)
    out: dict[str, Any] = {"hidden_ms": hidden, "budget_ms": budget, "escaped": hidden > budget,
                           "flagged": sum(1 for j, m in zip(judge_ms, ms, strict=True)
                                          if j - m > 2 * (_median(noop_overhead) + budget))}
    if device != "cpu" and tails and noop_tails:
        tail_budget = max(0.005, 0.2 * med_ms)
        tail_hidden = _median(tails) - _median(noop_tails)
        out.update({"tail_hidden_ms": tail_hidden, "tail_budget_ms": tail_budget})
        if tail_hidden > tail_budget:
            out.update({"escaped": True, "hidden_ms": tail_hidden, "budget_ms": tail_budget})
    return out
