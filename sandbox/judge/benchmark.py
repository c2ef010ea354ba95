"""The benchmark stage (judge side): warm-up, then individually timed, checked calls.

Which clock decides: on CUDA the runner's event times, each bounded by the judge's own
round trip and by the escape check (:mod:`sandbox.judge.escape`); on the CPU the judge's own
clock (round trip minus the interleaved empty-call round trip), the runner's figure only
a cross-check that must fit inside it, except for the task's own trusted reference when its
calls are inside the round trip's noise (:meth:`SideClock.samples`).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from sandbox.contract import stats
from sandbox.contract.failure import StageFailure
from sandbox.contract.rules import median_bounds
from sandbox.contract.wire import ErrorStage, TimingRecord
from sandbox.judge.contention import contention
from sandbox.judge.device import open_nvml
from sandbox.judge.escape import NOISE_CAP_MS, escaped_time
from sandbox.judge.evaluation import Evaluation
from sandbox.judge.sides import Side
from sandbox.problem.tensors import Slot

# Fewest timed calls (each with an interleaved empty call) the escape check rests on, GPU.
ESCAPE_MIN_CALLS = 40
# The same on the CPU, where the check is only evidence of a tampered clock: with the 3 calls
# of a 3-pair acceptance, CI's leaderboard test (two workers on two cores) saw the median of
# an honest reference's round trips exceed its empty calls' by 2.16 ms, over the 2 ms budget.
ESCAPE_MIN_CALLS_CPU = 10
# A median wait for a CPU below this is an idle host: a kernel the CPU judge cannot time
# there is shorter than the round trip's noise, not a victim of load (the message says
# which; the verdict is timing_unreliable either way). Idle 2-core host: 0.026 ms; loaded:
# waits of milliseconds.
IDLE_WAIT_MS = 0.5

# Margin on a call's time when the judge asks whether more timed calls still fit in the
# stage's budget, and how many calls of room it keeps (the one it is about to start and one
# more); the same figures the acceptance stage keeps between its looks.
BUDGET_MARGIN = 1.25
ROOM_CALLS = 2
# The pace follows a load that rises mid-run: the mean of the last calls when it is slower
# than the mean of them all.
RECENT_CALLS = 5


class SideClock:
    """One side's timed calls and interleaved empty calls, and the times they support."""

    def __init__(self, ev: Evaluation, side: Side, stage: ErrorStage):
        self.ev, self.side, self.stage = ev, side, stage
        self.ms: list[float] = []
        self.judge_ms: list[float] = []
        self.tails: list[float] = []
        self.noop_judge: list[float] = []
        self.noop_overhead: list[float] = []
        self.noop_tails: list[float] = []
        self.host: list[tuple[float, float]] = []
        self.noop_host: list[tuple[float, float]] = []
        # On the CPU, each round trip's wait for a CPU (sandbox.judge.cpu_wait), real and empty
        self.waits: list[float] = []
        self.noop_waits: list[float] = []
        self.deciding: int | None = None  # calls that decide the time (set by top_up())

    def add(self, r: dict[str, Any]) -> None:
        self.ms.append(r["ms"])
        self.judge_ms.append(r["judge_ms"])
        self.tails.append(r["tail_ms"])
        self.host.append(r.get("host_ms", (-1.0, -1.0)))
        self.waits.append(r.get("wait_ms", 0.0))
        judge, ms, tail, host, wait = self.ev.noop(self.side, self.stage)  # interleaved: load hits both
        self.noop_waits.append(wait)
        self.noop_judge.append(judge)
        self.noop_overhead.append(judge - ms)
        self.noop_tails.append(tail)
        self.noop_host.append(host)

    def empty_ms(self) -> list[float]:
        """The empty calls' round trips less their waits for a CPU (the CPU's base)."""
        return [j - w for j, w in zip(self.noop_judge, self.noop_waits, strict=True)]

    def samples(self, base: float | None = None) -> list[float]:
        """The times that decide: validated events on CUDA, the judge's clock on the CPU
        (round trip less its wait for a CPU, minus ``base``, the empty calls' median of the
        same; paired sides pass one pooled base so that no per-side estimate can favour
        either)."""
        n = len(self.ms) if self.deciding is None else self.deciding
        if self.ev.dev == "cuda":
            return list(self.ms[:n])
        if base is None:
            base = stats.median(self.empty_ms())
        raw = [j - w - base for j, w in zip(self.judge_ms[:n], self.waits[:n], strict=True)]
        lost = sum(1 for x in raw if x <= 0)
        if raw and 2 * lost > len(raw) and self.ev.trusted(self.side.path):
            # The task's own reference (trusted code in a runner of its own): its harness's
            # clock is the kernel's time, each already bounded by the judge's round trip.
            # A torch add of 1000 elements (microseconds) sits inside the ~0.2 ms noise of
            # a 3.5 ms round trip, so its judge-clock times were mostly "no longer than the
            # empty calls" (13-25 of 25, in 6 of 8 leaderboard runs on an idle 2-core
            # host): every candidate timed against it was timing_unreliable, for ever. A
            # candidate's time stays the judge's: whatever it is, a reference inside the
            # noise is faster than a candidate the judge's clock can see at all.
            said = (f"{self.side.path}: {lost} of {len(raw)} timed calls of the trusted reference "
                    "were inside the noise of the judge's round trip on the CPU; its times are "
                    "its runner's own clock")
            if said not in self.ev.warnings:
                self.ev.warnings.append(said)
            return [max(x, 1e-6) for x in self.ms[:n]]
        if raw and 2 * lost > len(raw):
            # Most calls took no longer than the empty calls beside them: the kernel's time
            # is inside the round trip's noise at this load (a 0.2 ms reference measured as
            # the 1e-6 ms clamp under a loaded leaderboard re-run). No time, and no verdict.
            wait = stats.median(self.waits[:n])
            why = ("the host is too loaded to time this kernel on the CPU"
                   if wait >= IDLE_WAIT_MS else
                   f"the host is not loaded (a median wait for a CPU of {wait:.3f} ms): the "
                   "kernel is shorter than the noise of the judge's round trip on the CPU, "
                   "and a run on this host will not time it either")
            raise StageFailure(self.stage, "timing_unreliable",
                               f"{lost} of {len(raw)} timed calls took no longer than the empty "
                               f"calls beside them ({stats.median([x + base for x in raw]):.4f} "
                               f"ms against {base:.4f} ms, each less its wait for a CPU): {why}",
                               origin="infrastructure",
                               detail={"calls": len(raw), "not_longer": lost, "empty_ms": base,
                                       "cpu_wait_ms": wait})
        return [max(x, 1e-6) for x in raw]

    def top_up(self, slots: list[Slot]) -> None:
        """Timed calls for the escape check alone, up to ESCAPE_MIN_CALLS on CUDA and
        ESCAPE_MIN_CALLS_CPU on the CPU: the calls so far keep deciding the time
        (``deciding``). The judge's round trip spreads over ~0.5-0.9 ms on an H200, and the
        median of 10 of them (a task with 5 samples x 2 reps) moved by up to 0.12 ms between
        real and empty calls of honest kernels; on a loaded CPU the median of 3 went 2 ms
        past the empty calls'."""
        self.deciding = len(self.ms)
        least = ESCAPE_MIN_CALLS if self.ev.dev == "cuda" else ESCAPE_MIN_CALLS_CPU
        frac = self.ev.task.correctness.timed_check_fraction
        while len(self.ms) < least:
            check = frac >= 1.0 or self.ev.rng.random() < frac
            self.add(self.ev.timed(self.side, slots, check, self.stage))

    def escape(self) -> dict[str, Any]:
        judge, overhead = self.judge_ms, self.noop_overhead
        if self.ev.dev == "cpu":
            # Each round trip less its wait for a CPU, as for the times: on a 2-core host at
            # load ~15 an honest GPU MODE histogram's round trips were mostly waits (hidden
            # 7.0 ms against a 6.6 ms budget, standard error 1.9 ms: timing_unreliable). A
            # patched runner clock still hides the kernel's run time, which no wait contains.
            judge = [j - w for j, w in zip(self.judge_ms, self.waits, strict=True)]
            overhead = [o - w for o, w in zip(self.noop_overhead, self.noop_waits, strict=True)]
        out = escaped_time(self.ms, judge, overhead, self.ev.dev, self.tails, self.noop_tails)
        # Where the judge-clock difference arises (diagnostics, never decisive): the
        # judge's round trip less the timed region, real and empty calls, and the runner's
        # own host time before / after its timed region in each.
        if self.ms:
            out["judge_minus_ms"] = stats.median([j - m for j, m in
                                                  zip(self.judge_ms, self.ms, strict=True)])
            out["noop_overhead_ms"] = stats.median(self.noop_overhead)
            for name, rows in (("runner", self.host), ("noop_runner", self.noop_host)):
                for i, where in enumerate(("pre", "post")):
                    xs = [h[i] for h in rows if h[i] >= 0]
                    if xs:
                        out[f"{name}_{where}_ms"] = stats.median(xs)
        return out

    def raise_if_escaped(self, who: str = "") -> dict[str, Any]:
        esc = self.escape()
        if esc["escaped"] and self.ev.dev == "cuda":
            # Measured again before the candidate is blamed: another job's kernels on the
            # device lengthen the judge's round trips and the idle tails alike.
            found = contention(self.ev)
            if found is not None:
                raise StageFailure(self.stage, "timing_unreliable",
                                   f"{who}the judge's clock saw {esc['hidden_ms']:.4f} ms per call "
                                   f"outside the timed region (budget {esc['budget_ms']:.4f} ms), "
                                   f"but the device is not this sandbox's alone "
                                   f"({found['contention']}): no verdict on the candidate; run "
                                   "again", origin="infrastructure", detail={**esc, **found})
        if esc["escaped"]:
            raise StageFailure(self.stage, "work_escaped_timing",
                               f"{who}the judge's clock saw {esc['hidden_ms']:.4f} ms per call "
                               f"that the timed region did not (budget {esc['budget_ms']:.4f} ms): "
                               "work escaped the timed stream (side stream, thread, deferred "
                               "work) or the timer was tampered with", detail=esc)
        if esc.get("unreliable"):
            noise = esc.get("noise_ms", 0.0)
            what = (f"the judge's clock saw {esc['hidden_ms']:.4f} ms per call outside the timed "
                    f"region against a budget of {esc['budget_ms']:.4f} ms, standard error "
                    f"{noise:.4f} ms")
            if self.ev.dev != "cpu" and 4.0 * noise > NOISE_CAP_MS:
                what += f" (at most {NOISE_CAP_MS / 4:.4f} ms is usable)"
            if esc.get("tail_hidden_ms", 0.0) > esc.get("tail_budget_ms", float("inf")):
                what += (f"; the device's idle tail {esc['tail_hidden_ms']:.4f} ms past the empty "
                         f"calls' against {esc['tail_budget_ms']:.4f} ms, standard error "
                         f"{esc.get('tail_noise_ms', 0.0):.4f} ms")
            raise StageFailure(self.stage, "timing_unreliable",
                               f"{who}the host's timing was too noisy to tell whether work escaped "
                               f"the timed region ({what}): the host is too loaded to measure on; "
                               "run again on a quieter one", origin="infrastructure", detail=esc)
        return esc


def pace(seconds: list[float], recent: int = RECENT_CALLS) -> float:
    """Seconds one more call (or pair) is expected to take: the slower of the mean of all so
    far and the mean of the last ``recent``."""
    last = seconds[-recent:]
    return max(sum(seconds) / len(seconds), sum(last) / len(last))


def room_for_more(ev: Evaluation, done: int, least: int, call_s: list[float]) -> bool:
    """Whether the benchmark stage takes another timed call after ``done`` of them: always
    below ``least`` (the escape check's minimum: without it there is no time to give, and a
    stage that cannot hold that many is a timeout, blamed by its clock as before); above,
    only while what is left of the stage's ``run_s`` holds :data:`ROOM_CALLS` more at the
    :func:`pace` of a call (timed call, its check and its empty call), with
    :data:`BUDGET_MARGIN`. The stop depends on the clock, never on the times measured, and
    both sides of a comparison are timed by the same rule, so a loaded host gives a time on
    fewer samples (a wider interval) where it gave a timeout blamed on an honest kernel."""
    if done < least or not call_s:
        return True
    return ev.left(ev.run_deadline) >= pace(call_s) * BUDGET_MARGIN * ROOM_CALLS


def quiet_enough(clock: SideClock, rel: float) -> bool:
    """The task's noise-based stopping rule: the median's distribution-free 95% interval
    (:func:`sandbox.contract.rules.median_bounds`) lies within +/- ``rel`` of the median. A
    time the clock cannot give yet (most calls inside the empty calls' noise) is not quiet."""
    try:
        xs = clock.samples()
    except StageFailure:
        return False
    bounds = median_bounds(xs)
    if bounds is None:
        return False
    med = stats.median(xs)
    return med > 0 and (bounds[1] - bounds[0]) / 2 <= rel * med


def warm_up(ev: Evaluation, sides: list[Side], slots: list[Slot], stage: ErrorStage) -> None:
    """Discarded checked calls (interleaved across sides) by count and by time. The sides'
    first calls (the JIT compile of a fresh runner) run at once."""
    b = ev.task.benchmark
    t_start, n = time.monotonic(), 0
    while n < b.warmup or (time.monotonic() - t_start) * 1e3 < b.warmup_ms:
        if n == 0 and len(sides) > 1:
            ev.timed_together(sides, slots, stage)
        else:
            for side in sides:
                ev.timed(side, slots, True, stage)
        n += 1


def benchmark_stage(ev: Evaluation, side: Side) -> TimingRecord:
    ev.stage = "benchmark"
    ev.start_run_clock()
    b, c = ev.task.benchmark, ev.task.correctness
    dims = ev.bench_dims
    slots = ev.slots(dims)
    frac = c.timed_check_fraction
    warm_up(ev, [side], slots, "benchmark")
    clock = SideClock(ev, side, "benchmark")
    nvml, why_not = open_nvml(ev.dev)
    blocks: list[dict[str, Any]] = []
    checked = 0
    want = b.samples * b.reps
    least = min(want, ESCAPE_MIN_CALLS if ev.dev == "cuda" else ESCAPE_MIN_CALLS_CPU)
    call_s: list[float] = []
    stopped_by: Literal["count", "budget", "noise"] = "count"
    for i in range(want):
        if i >= least and b.stop_noise is not None and quiet_enough(clock, b.stop_noise):
            stopped_by = "noise"
            break
        if not room_for_more(ev, i, least, call_s):
            stopped_by = "budget"
            # No measured figure in the text (a candidate's copy keeps warnings): the count
            # is the one figure the cut adds (docs/security-review.md).
            ev.warnings.append(
                f"benchmark: timed {i} of the {want} calls the task asks for: the stage's "
                f"{ev.req.limits.run_s:.0f} s budget would have run out first, so the time rests "
                "on fewer samples (a wider interval); a quieter host takes them all")
            break
        t_call = time.monotonic()
        if nvml is not None and i % b.reps == 0:
            blocks.append({"first_sample": i, **nvml.sample()})
        check = frac >= 1.0 or ev.rng.random() < frac
        r = ev.timed(side, slots, check, "benchmark")
        checked += int(check)
        clock.add(r)
        call_s.append(time.monotonic() - t_call)
    clock.top_up(slots)
    esc = clock.raise_if_escaped()
    samples = clock.samples()
    summary = stats.summarize(samples)
    floor = ev.req.floor_ms
    if floor is not None and floor > 0 and summary["median"] < floor:
        raise StageFailure("benchmark", "below_roofline_floor",
                           f"median {summary['median']:.6f} ms is below the physical floor "
                           f"{floor:.6f} ms: an anomaly, not a record", detail={"floor_ms": floor})
    mode: Literal["events", "cuda_graph", "perf_counter"] = (
        "perf_counter" if ev.dev != "cuda" else ("cuda_graph" if b.cuda_graph else "events"))
    return TimingRecord(
        mean=float(summary["mean"]), median=float(summary["median"]), p95=float(summary["p95"]),
        std=float(summary["std"]), min=float(summary["min"]), max=max(samples),
        cv=float(summary["cv"]), n=int(summary["n"]), samples_ms=tuple(samples),
        judge_ms=tuple(clock.judge_ms), noop_overhead_ms=tuple(clock.noop_overhead),
        wait_ms=tuple(clock.waits) if ev.dev == "cpu" else (),
        noop_wait_ms=tuple(clock.noop_waits) if ev.dev == "cpu" else (),
        flagged_samples=int(esc["flagged"]),
        overhead_budget_ms=float(esc["budget_ms"]), checked_calls=checked,
        check_policy="all" if frac >= 1.0 else f"random {frac:.0%} (judge-chosen)",
        requested_calls=want, stopped_by=stopped_by,
        cache=b.cache, flush_bytes=side.flush_bytes, launch_lead_us=side.lead_us, dims=dict(dims),
        clock="cuda_event" if ev.dev == "cuda" else "perf_counter", mode=mode,
        device_state=tuple(blocks), device_state_unmeasured=why_not or None,
        escape={k: float(v) for k, v in esc.items()
                if k not in ("escaped", "unreliable") and isinstance(v, int | float)})
