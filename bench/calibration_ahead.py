"""Acceptance decisions with sandboxes prepared ahead: ``bench/calibration.py --prepare-ahead K``.

Each decision runs in a calibrate-mode sandbox of its own (so its runners are fresh by
construction), or ``--decisions-per-sandbox D`` of them, each with a fresh pair of runners
whose torch imports the judge started with the sandbox (:func:`sandbox.judge.prestart.
calibrate_pairs`): a decision then costs its runners' CUDA contexts, compile, warm-up and
pairs, not a sandbox's and a judge's start. The sandbox holds the device's :class:`grader.backends.gate.MeasureGate` for its whole
measurement, exactly as the leaderboard's ``--prepare-ahead`` does: every sandbox is staged
``gated`` and launched through :func:`grader.judgecall.launch`; its judge reads its request,
starts its problem process and imports torch (CPU work; in calibrate mode the judge starts
no runner before its gate, :mod:`sandbox.judge.prestart`), then blocks on the gate's FIFO.
``K + 1`` worker threads keep one sandbox measuring and up to ``K`` waiting at the gate. The
backend's supervisor gives the gate back only after the sandbox's whole tree is dead, so no
GPU work of one sandbox overlaps another's measurement.

Each sandbox that got the gate leaves a ``{"grant", "end"}`` interval (monotonic seconds
from the run's origin): ``grant`` the moment the grant byte was written (the judge touches
the device only after reading it), ``end`` taken just before the gate's lock is released, which
is after the sandbox was dead. :func:`calibration_analysis.check_gate` proves from them
that no two turns overlapped.

The workload's budget bounds the run: no sandbox is started, and none waiting at the gate
is granted, once the budget is less than one measurement away (the median turn so far); a
sandbox already granted finishes, so the run overruns by at most one turn. A sandbox that
fails loses only its own decision (recorded in ``errors``); :data:`MAX_FAILURES_IN_ROW`
failures in a row stop the workload, since the cause is then not one sandbox (a failure is
known only once its sandbox gave the gate back, so the next one prepared may still run).

The host's CPUs are cut into ``K + 1`` slices, and each sandbox runs on a slice no live
sandbox holds (its launching thread's affinity, which every process of a bwrap sandbox
inherits; there are ``K + 1`` workers), so a sandbox importing torch for up to 15 runner
pairs never shares a core with the one measuring. Without it, that burst (12-30 imports on
16 cores) ran beside the first decision of each turn and lost 12 of 78 sandboxes to
``timing_unreliable`` (2026-12-02). (Slices by sandbox number instead failed at the start:
the first two sandboxes race to the gate, and the second's turn came first.) No split where a slice would have fewer than
:data:`sandbox.judge.prestart.MIN_CPUS_AHEAD` CPUs (the judge then starts no pairs ahead),
and none on docker, whose containers do not inherit it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.backends.base import SandboxBackend
from grader.backends.gate import POLL_S, MeasureGate, Turn, open_if_read
from grader.errors import InfrastructureError
from grader.judgecall import discard, launch, mode_request, read_record, stage
from grader.limits import Limits
from grader.report.record import ResultProblem
from sandbox.contract import wire
from sandbox.judge.prestart import MIN_CPUS_AHEAD

MAX_FAILURES_IN_ROW = 3
RUN_S = 150.0  # one decision's run limit from the grant (a hang's net; a decision takes seconds)


class DecisionTurn(Turn):
    """A turn at the gate that contends for it only once its judge waits at the FIFO (so the
    device goes to a prepared sandbox, not one still importing torch), records when it gave
    the gate back, and is refused its grant once ``stop()`` names a reason (the budget is
    near, its scenario has its decisions)."""

    def __init__(self, gate: MeasureGate, fifo: Path, stop: Callable[[], str]) -> None:
        super().__init__(gate, fifo)
        self.stop = stop
        self.why = ""
        self.ready_at: float | None = None
        self.released_at: float | None = None
        self._probe: int | None = None

    def _go_on(self, alive: Callable[[], bool]) -> bool:
        if not self.why:
            self.why = self.stop()
        return alive() and not self.why

    def _ready(self) -> bool:
        """Whether the judge has the FIFO open for reading (a non-blocking open for writing
        succeeds only then). The descriptor stays open until :meth:`release`: closing it
        would end the judge's read with nothing, as :mod:`grader.pool.turn` explains."""
        self._probe = open_if_read(self.fifo)
        return self._probe is not None

    def wait(self, alive: Callable[[], bool], limit_s: float) -> float | None:
        deadline = time.monotonic() + limit_s
        while not self._ready():
            if not self._go_on(alive) or time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)
        self.ready_at = time.monotonic()
        if not self._go_on(alive):
            return None
        return super().wait(lambda: self._go_on(alive), max(0.0, deadline - time.monotonic()))

    def refused(self) -> str:
        return self.why if self.granted_at is None else ""

    def release(self) -> None:
        if self._held and self.released_at is None:
            self.released_at = time.monotonic()  # before the lock goes: after the sandbox died
        if self._probe is not None:
            with contextlib.suppress(OSError):
                os.close(self._probe)
            self._probe = None
        super().release()


@dataclasses.dataclass
class Result:
    """One workload's decisions, as :func:`calibration.decide` returns them, plus the turns."""

    cal: dict[str, Any]
    errors: list[dict[str, Any]]
    sandboxes: int
    intervals: list[dict[str, Any]]
    refused: int


class AheadRun:
    """The decisions of one workload's scenarios, one per sandbox, ``ahead`` sandboxes
    prepared while one measures. ``origin``: the run's monotonic origin (shared by all its
    workloads, so that their intervals compare)."""

    def __init__(self, scenarios: list[dict[str, Any]], files: dict[str, str], spec: Any, ref: str,
                 *, device: str, backend: SandboxBackend, ahead: int, budget_s: float,
                 gate: MeasureGate, origin: float, run_s: float = RUN_S, per_sandbox: int = 1,
                 progress: Callable[[Result], None] | None = None) -> None:
        self.sc, self.files, self.spec, self.ref = scenarios, files, spec, ref
        self.device, self.backend, self.ahead, self.gate = device, backend, ahead, gate
        self.origin, self.run_s, self.progress = origin, run_s, progress
        self.per_sandbox = max(1, per_sandbox)
        self.deadline = time.monotonic() + budget_s
        self.lock = threading.Lock()
        self.res = Result({s["name"]: {"decisions": [], "seconds": 0.0} for s in scenarios},
                          [], 0, [], 0)
        self.in_flight = {s["name"]: 0 for s in scenarios}  # decisions asked of live sandboxes
        self.failures_in_row = 0
        self.slices = cpu_slices(sorted(os.sched_getaffinity(0)), ahead + 1) \
            if getattr(backend, "name", "") == "bwrap" else []
        self.held: set[int] = set()  # slices of live sandboxes

    def run(self) -> Result:
        workers = [threading.Thread(target=self._worker, name=f"cal-ahead-{i}", daemon=True)
                   for i in range(self.ahead + 1)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        self.res.intervals.sort(key=lambda iv: iv["grant"])
        return self.res

    # ---- what to do next (under self.lock) ---------------------------------------------
    def _near_end(self) -> bool:
        held = [iv["end"] - iv["grant"] for iv in self.res.intervals]
        return time.monotonic() > self.deadline - (statistics.median(held) if held else 0.0)

    def _next(self) -> dict[str, Any] | None:
        if self._near_end() or self.failures_in_row >= MAX_FAILURES_IN_ROW:
            return None
        open_ = [s for s in self.sc if len(self.res.cal[s["name"]]["decisions"])
                 + self.in_flight[s["name"]] < s["decisions"]]
        if not open_:
            return None
        return min(open_, key=lambda s: (len(self.res.cal[s["name"]]["decisions"])
                                         + self.in_flight[s["name"]]) / s.get("weight", 1.0))

    def _refuse(self, name: str, wanted: int) -> str:
        with self.lock:
            if self._near_end():
                return "the workload's budget is near"
            if self.failures_in_row >= MAX_FAILURES_IN_ROW:
                return f"{self.failures_in_row} sandboxes failed in a row"
            if len(self.res.cal[name]["decisions"]) >= wanted:
                return f"scenario {name} has its decisions"
        return ""

    def _worker(self) -> None:
        while True:
            with self.lock:
                s = self._next()
                if s is None:
                    return
                want = min(self.per_sandbox, int(s["decisions"]) - self.in_flight[s["name"]]
                           - len(self.res.cal[s["name"]]["decisions"]))
                self.in_flight[s["name"]] += want
                self.res.sandboxes += 1
                idx = self.res.sandboxes
            try:
                self._one(s, idx, want)
            except Exception as e:  # staging failed, or this script's bug: recorded, never lost
                with self.lock:
                    self.res.errors.append({"code": "bench_error", "sandbox": idx, "scenario": s["name"],
                                            "message": "".join(traceback.format_exception(e))[-2000:]})
                    self.failures_in_row += 1
            finally:
                with self.lock:
                    self.in_flight[s["name"]] -= want

    # ---- one sandbox, ``want`` decisions, each with a fresh runner pair ------------------
    def _one(self, s: dict[str, Any], idx: int, want: int) -> None:
        mine = os.sched_getaffinity(0)
        with self.lock:  # K + 1 workers, K + 1 slices: one is always free
            sl = next((i for i in range(len(self.slices)) if i not in self.held), None)
            if sl is not None:
                self.held.add(sl)
        cpus = self.slices[sl] if sl is not None else mine
        os.sched_setaffinity(0, cpus)  # this thread's: the sandbox it launches inherits it
        try:
            self._sandbox(s, idx, want, f"{min(cpus)}-{max(cpus)}")
        finally:
            os.sched_setaffinity(0, mine)
            with self.lock:
                self.held.discard(-1 if sl is None else sl)

    def _sandbox(self, s: dict[str, Any], idx: int, want: int, cpus: str) -> None:
        name = s["name"]
        scen = {k: v for k, v in s.items() if k not in ("budget_s", "weight")}
        scen.update(decisions=want, fresh_runners=True, budget_s=self.run_s)
        req = mode_request("calibrate", self.device, task=self.spec.to_wire(), reference=self.ref,
                           candidate=s["candidate"],
                           calibrate=wire.CalibrateWire(scenarios=(scen,), decisions=want,
                                                        pairs=int(s["pairs"])))
        lim = Limits(compile_s=120, run_s=self.run_s, memory_mib=65536)
        started = time.monotonic()
        staged = stage(req, self.files, lim, prefix="kgrader-cal-", gated=True)
        turn = DecisionTurn(self.gate, staged.out_dir / wire.GATE_NAME,
                            lambda: self._refuse(name, int(s["decisions"])))
        got: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        try:
            run = launch(staged, self.backend, lim, req.device, gate=turn)
            if turn.granted_at is not None:
                try:
                    rec = read_record(staged, lim)
                except ResultProblem as p:
                    errors.append({"code": p.code, "message": f"{p}; stderr: "
                                   + run.outcome.stderr[-800:].decode("utf-8", "replace")})
                else:
                    errors += [dataclasses.asdict(e) for e in rec.errors]
                    mine = (rec.calibration or {}).get(name, {})
                    got = [{**d, "phases": dict(rec.phases)} for d in mine.get("decisions", [])]
                    # decisions the judge dropped as timing_unreliable, the sandbox going on
                    errors += [{**e, "dropped": True} for e in mine.get("dropped", [])]
                    if not got and not errors:
                        errors.append({"code": "no_decision", "message": str(
                            (rec.calibration or {}).get(name, {}).get("stopped", "none made"))})
            elif not turn.why:
                errors.append({"code": "ended_before_grant", "message": "stderr: " + run.outcome
                               .stderr[-800:].decode("utf-8", "replace")})
        except InfrastructureError as e:
            errors.append({"code": "infrastructure", "message": str(e)[:2000]})
        finally:
            turn.release()  # a no-op once the supervisor gave it back
            discard(staged)
        self._record(name, idx, started, turn, got, errors, cpus)

    def _record(self, name: str, idx: int, started: float, turn: DecisionTurn,
                got: list[dict[str, Any]], errors: list[dict[str, Any]], cpus: str = "") -> None:
        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - self.origin, 6)

        gate = {"grant": rel(turn.granted_at), "end": rel(turn.released_at)}
        with self.lock:
            if turn.granted_at is not None:
                self.res.intervals.append({**gate, "scenario": name, "sandbox": idx,
                                           "started": rel(started), "ready": rel(turn.ready_at),
                                           "decided": bool(got), "cpus": cpus})
            elif turn.why and not errors:
                self.res.refused += 1
            for d in got:
                self.res.cal[name]["decisions"].append({**d, "gate": gate, "sandbox": idx,
                                                        "started": rel(started),
                                                        "ready": rel(turn.ready_at)})
            if got:
                held = (turn.released_at or 0.0) - (turn.granted_at or 0.0)
                self.res.cal[name]["seconds"] = round(self.res.cal[name]["seconds"] + held, 2)
            self.res.errors += [{**e, "sandbox": idx, "scenario": name} for e in errors]
            if turn.granted_at is not None or errors:
                self.failures_in_row = 0 if got else self.failures_in_row + 1
            if self.progress is not None:
                self.progress(self.res)


def cpu_slices(cpus: list[int], n: int) -> list[set[int]]:
    """``cpus`` cut into ``n`` contiguous slices of equal size (the remainder to none); no
    slices (``[]``) when ``n`` is 1 or a slice would hold fewer than MIN_CPUS_AHEAD."""
    size = len(cpus) // n if n > 1 else 0
    if size < MIN_CPUS_AHEAD:
        return []
    return [set(cpus[i * size:(i + 1) * size]) for i in range(n)]
