"""Did work escape the timed region? Judged from two clocks the candidate does not control."""

from __future__ import annotations

from typing import Any

from sandbox.stats import median


def _median(xs: list[float]) -> float:
    return median(xs) if xs else 0.0


def escaped_time(ms: list[float], judge_ms: list[float], noop_overhead: list[float],
                 device: str, tails: list[float] | None = None,
                 noop_tails: list[float] | None = None) -> dict[str, Any]:
    """Work the timed region did not see, per call (medians: robust to host load).

    Two clocks, two checks:

    * the judge's own clock: honest calls satisfy ``judge = overhead + ms``, so
      ``median(judge - ms) - median(noop overhead)`` is near zero, plus the host's launch
      cost on GPUs (hidden behind the cold-cache flush), hence a 0.08 ms floor there. It
      catches a tampered clock whatever the device. On the CPU the judge's clock is the
      time itself, so a runner that lies gains nothing; the check stays as evidence of
      tampering and fires only on a gross lie: the runner claims under a tenth of what
      the judge measured (budget 90% of the call, at least 2 ms).
    * on CUDA, the device's idle tail: time from the end event to a marker recorded once
      the device is idle; anything left running past the end event lengthens it, with no
      launch cost in it, so its budget can be a few microseconds.
    """
    med_ms = _median(ms)
    if device == "cpu":
        # On the CPU the judge's clock decides the time itself; this is only a cross-check
        # of the runner's claim. At half the call it fired on honest code under load (a
        # leaderboard run beside the test suite, two cores: 2.79 ms hidden of a <4 ms call,
        # the runner descheduled between its clock and its reply); a tampered clock (the
        # runtime attack slows it 100x) hides 99%.
        budget = max(2.0, 0.9 * (_median(judge_ms) - _median(noop_overhead)))
    else:
        # Empty calls take the real call's path, so honest calls measured -0.022..+0.011 ms
        # here on an H200 (12 evaluations, docs/BENCHMARKS.md; 0.10 ms before empty calls
        # took that path). The floor leaves a wide margin for host jitter; it is also the
        # most a runner lying about its events can shave off a short kernel.
        budget = max(0.08, 0.25 * med_ms)
    hidden = _median([j - m for j, m in zip(judge_ms, ms, strict=True)]) - _median(noop_overhead)
    out: dict[str, Any] = {"hidden_ms": hidden, "budget_ms": budget, "escaped": hidden > budget,
                           "flagged": sum(1 for j, m in zip(judge_ms, ms, strict=True)
                                          if j - m > 2 * (_median(noop_overhead) + budget))}
    if device != "cpu" and tails and noop_tails:
        # Honest tails on an H200 spread -5.4..+8.3 us around the empty call's (the host's
        # latency between the sync returning and the marker being recorded, under the
        # runner's seccomp filter): a 20 us floor.
        tail_budget = max(0.02, 0.2 * med_ms)
        tail_hidden = _median(tails) - _median(noop_tails)
        out.update({"tail_hidden_ms": tail_hidden, "tail_budget_ms": tail_budget})
        if tail_hidden > tail_budget:
            out.update({"escaped": True, "hidden_ms": tail_hidden, "budget_ms": tail_budget})
    return out
