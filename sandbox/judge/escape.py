"""Did work escape the timed region? Judged from two clocks the candidate does not control."""

from __future__ import annotations

import math
from typing import Any

from sandbox.contract.stats import median

# The judge-clock budget on a GPU, ms per call: at least GPU_FLOOR_MS (honest paired
# calls on an H200 showed a systematic +0.09..+0.13 ms over their empty calls, the real
# call's flush following the judge's writes of fresh inputs), growing with the measured
# noise up to NOISE_CAP_MS.
GPU_FLOOR_MS = 0.2
NOISE_CAP_MS = 0.4


def _median(xs: list[float]) -> float:
    return median(xs) if xs else 0.0


def escaped_time(ms: list[float], judge_ms: list[float], noop_overhead: list[float],
                 device: str, tails: list[float] | None = None,
                 noop_tails: list[float] | None = None) -> dict[str, Any]:
    """Work the timed region did not see, per call (medians: robust to host load).

    Two clocks, two checks:

    * the judge's own clock: honest calls satisfy ``judge = overhead + ms``, so
      ``median(judge - ms) - median(noop overhead)`` is near zero up to the noise of the
      round trip; on GPUs the budget is GPU_FLOOR_MS, a quarter of the call, or four
      standard errors of that estimate, whichever is largest (``noise_ms`` in the result). It catches a tampered clock
      whatever the device. On the CPU the judge's clock is the
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
        noise = _noise(judge_ms, ms, noop_overhead)
    else:
        # The judge's round trip on a GPU (two pipe wake-ups across uids, three device
        # syncs, the flush) took 0.5-0.9 ms per call on an H200; with 10 calls its median
        # moved by up to 0.12 ms between the real and the empty calls of honest kernels,
        # and paired timing showed a systematic +0.09..+0.13 ms (docs/security-review.md):
        # a fixed 0.08 ms budget disqualified honest kernels. The budget is the floor, or
        # four standard errors of the measured difference (from the spread of the paired
        # differences: MAD, robust to the outliers a loaded host makes) when larger.
        noise = _noise(judge_ms, ms, noop_overhead)
        budget = max(GPU_FLOOR_MS, 0.25 * med_ms, min(4.0 * noise, NOISE_CAP_MS))
    hidden = _median([j - m for j, m in zip(judge_ms, ms, strict=True)]) - _median(noop_overhead)
    out: dict[str, Any] = {"hidden_ms": hidden, "budget_ms": budget, "escaped": hidden > budget,
                           "flagged": sum(1 for j, m in zip(judge_ms, ms, strict=True)
                                          if j - m > 2 * (_median(noop_overhead) + budget))}
    if device == "cpu":
        # Over the budget by less than four standard errors of the estimate: a loaded host's
        # round trips can make that (a 2-core host at load 37: 10.91 ms hidden against
        # 10.10 ms, of a call the runner timed at 0.3 ms, in 20 calls), so it is no evidence
        # against the candidate -- nor a pass: timing_unreliable, retried. What passed
        # before passes now; what is further over the budget than the noise explains is
        # still work_escaped_timing.
        out["noise_ms"] = noise
        out["unreliable"] = hidden > budget and hidden <= budget + 4.0 * noise
        out["escaped"] = hidden > budget + 4.0 * noise
    elif noise:
        out["noise_ms"] = noise
        # A round trip too noisy to bound the runner's events by even NOISE_CAP_MS: not
        # evidence against the candidate (a loaded host makes it), but no pass either; a
        # runner could widen the budget by making its replies noisy. Nor is a difference
        # within four standard errors of the budget. And a noisy round trip is no evidence
        # however far over the budget its median lies: on an H200 host whose CPUs ran 24
        # torch imports, honest 1 ms calls (A/A, the same source on both sides) came back
        # 3.1-3.3 ms later than the empty calls beside them (standard error 0.27-0.67 ms):
        # a call that waits on the device is descheduled and waits again for a CPU, an empty
        # call is not. That was `work_escaped_timing`, blamed on the candidate (2026-12-02).
        # A noisy round trip whose median is within the budget (then NOISE_CAP_MS) passes,
        # as it did before: blaming no one, it bounds what the runner hid by the cap, and
        # honest runs make it (standard errors 0.17-0.36 ms, medians -3.4..-0.04 ms, in 4
        # of 31 H200 runs; as timing_unreliable an honest paired vector_add failed on an
        # idle H200).
        noisy = 4.0 * noise > NOISE_CAP_MS
        out["unreliable"] = hidden > budget and (noisy or hidden <= budget + 4.0 * noise)
        out["escaped"] = hidden > budget and not out["unreliable"]
    if device != "cpu" and tails and noop_tails:
        # Honest tails on an H200 spread -5.4..+8.3 us around the empty call's (the host's
        # latency between the sync returning and the marker being recorded, under the
        # runner's seccomp filter): a 20 us floor. The device's own evidence: it decides
        # even when the judge's round trip was too noisy to, unless the tails themselves
        # are over their budget by less than four standard errors (the same host latency).
        tail_budget = max(0.02, 0.2 * med_ms)
        tail_hidden = _median(tails) - _median(noop_tails)
        tail_noise = _noise(tails, [0.0] * len(tails), noop_tails)
        out.update({"tail_hidden_ms": tail_hidden, "tail_budget_ms": tail_budget,
                    "tail_noise_ms": tail_noise})
        if tail_hidden > tail_budget + 4.0 * tail_noise:
            out.update({"escaped": True, "hidden_ms": tail_hidden, "budget_ms": tail_budget})
        elif tail_hidden > tail_budget and not out["escaped"]:
            out["unreliable"] = True
    return out


def claim_problem(ms: float | None, wall: float | None, judge_ms: float, device: str) -> str | None:
    """Why one reply's times cannot be true (None when they can).

    Every device: the event (or CPU) time is finite, non-negative and inside the judge's
    own round trip of that call. On CUDA also: the runner's host clock runs from before it
    records the start event to after the end event has completed, so it cannot see less
    time than the events (slack: 2% and 2 us, far above the events' ~0.5 us resolution). A
    runner whose clock saw less was patched to slow down (the CPU's timer-patch attack,
    which on a GPU changes no figure but is still tampering)."""
    if ms is None or wall is None or not ms >= 0:
        return "a time that is not a non-negative number"
    if ms > judge_ms * 1.05 + 0.05:
        return f"{ms:.4f} ms, longer than the judge's own round trip of {judge_ms:.3f} ms"
    if device == "cuda" and wall < ms * 0.98 - 0.002:
        return (f"{ms:.4f} ms of events inside {wall:.4f} ms of its own host clock: the "
                "runner's clock was tampered with")
    return None


def _noise(judge_ms: list[float], ms: list[float], noop_overhead: list[float]) -> float:
    """Standard error of the hidden-time estimate: the spread (1.4826 x MAD) of the paired
    differences (real call's round trip less its events, less the empty call's overhead),
    times 1.2533 / sqrt(n) for a median."""
    d = [(j - m) - o for j, m, o in zip(judge_ms, ms, noop_overhead, strict=False)]
    if len(d) < 5:
        return 0.0
    mid = median(d)
    mad = median([abs(x - mid) for x in d])
    return 1.2533 * 1.4826 * mad / math.sqrt(len(d))
