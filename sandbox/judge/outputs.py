"""Returned outputs, judge side: fetch them into the shared buffer, and the problem's checker.

For the returned-output contracts (:mod:`sandbox.problem.field`) the candidate's call returns its
outputs; after the timed call the judge asks the runner to copy them into the output
slots (``collect``), which the judge poisoned before the call and checks afterwards like
any task's. The copy lies outside the timed region, so work deferred into it would escape
the timing: in the timed stages the copy's round trip is bounded by the judge's own copy
of the same bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch

from sandbox.contract.conventions import convention
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import ErrorStage
from sandbox.judge import cpu_wait, idle
from sandbox.judge.contention import contention
from sandbox.judge.hub import Hub
from sandbox.judge.sides import Side
from sandbox.launcher.proc import RunnerFailure
from sandbox.problem.host import CheckerFailed
from sandbox.problem.tensors import Slot, compare, dtype_code, poison

# The copy's round trip may exceed FLOOR_MS + FACTOR x the judge's own copy of the bytes.
FLOOR_MS = {"cpu": 25.0, "cuda": 5.0}
FACTOR = 8.0
# ... plus this many empty round trips measured right then, before a verdict of cheating.
NOISE_FACTOR = 4.0
# On a GPU, before that verdict: empty round trips and judge's copies measured again.
REMEASURE = 5


def collect_outputs(ev: Hub, side: Side, slots: list[Slot], buf: int, stage: ErrorStage,
                    deadline: float, call_ms: float) -> None:
    """Have the runner copy the call's returned tensors into the output slots."""
    outs = [s for s in slots if s.role == "output"]
    timed = stage in ("benchmark", "accept")
    pid = side.runner.proc.pid
    cpu0 = runner_cpu_ms(pid) if timed and ev.dev == "cpu" else None
    mark0 = cpu_wait.mark(pid) if timed and ev.dev == "cuda" else None
    t0 = time.perf_counter()
    try:
        side.runner.request({"op": "collect", "outs": [s.wire() for s in outs], "buf": buf},
                            ev.left(deadline))
    except RunnerFailure as e:
        raise ev.failure(stage, e) from None
    collect_ms = (time.perf_counter() - t0) * 1e3
    idle.replied(side)  # the call's last answer: the runner is idle from here
    cpu1 = runner_cpu_ms(pid) if cpu0 is not None else None
    wait_ms = cpu_wait.waited_ms(mark0, cpu_wait.mark(pid), collect_ms) if mark0 is not None else 0.0
    if not timed:
        return
    views = side.views(outs, buf)
    own_ms = own_copy_ms(ev.dev, views, outs)
    floor = FLOOR_MS.get(ev.dev, FLOOR_MS["cpu"])
    bound = floor + FACTOR * own_ms
    if collect_ms <= bound:
        return
    # On the CPU the kernel's account of the runner's CPU time (all its threads, the exited
    # ones too) tells waiting from working: work deferred into the copy is computation in
    # the runner, the only process candidate code runs in. A copy that charged the runner
    # less than half the floor (clock ticks: +-2 ticks of rounding) deferred no more work
    # than the floor allows, however long a loaded host kept it from a core (a loaded 2-core
    # host: an honest 256-int copy took 64.6 ms wall against a 25.4 ms bound).
    if cpu0 is not None and cpu1 is not None and cpu1 - cpu0 < floor / 2:
        return
    # Over the bound: measure the machine now (an empty round trip to the same runner)
    # before any verdict. On a loaded 2-core host honest copies took 28-200 ms against
    # ~25 ms. Since the returned value is reduced to plain tensors inside the timed call and
    # no candidate hook, finalizer or mode may run in the copy (sandbox.runner.returned), a slow
    # copy is evidence of load first.
    rt = ev.noop(side, stage)[0]
    detail = {"collect_ms": collect_ms, "bound_ms": bound, "call_ms": call_ms,
              "empty_round_trip_ms": rt,
              "runner_cpu_ms": None if cpu0 is None or cpu1 is None else cpu1 - cpu0}
    if collect_ms <= bound + NOISE_FACTOR * rt:
        return
    if ev.dev == "cuda":
        detail["collect_cpu_wait_ms"] = wait_ms
        _remeasure_gpu(ev, side, stage, detail, lambda: own_copy_ms(ev.dev, views, outs))
    if rt > floor / 2:
        raise StageFailure(stage, "timing_unreliable",
                           f"copying the returned outputs took {collect_ms:.3f} ms against a bound "
                           f"of {bound:.3f} ms, and an empty round trip to the same runner took "
                           f"{rt:.3f} ms: the host is too loaded to bound the copy; run again",
                           origin="infrastructure", detail=detail)
    raise StageFailure(stage, "work_deferred_to_copy",
                       f"copying the returned outputs took {collect_ms:.3f} ms (the call "
                       f"{call_ms:.3f} ms; bound {bound:.3f} ms; an empty round trip {rt:.3f} ms): "
                       "work was deferred past the timed call into the untimed copy",
                       detail=detail)


def own_copy_ms(dev: str, views: dict[str, torch.Tensor], outs: list[Slot]) -> float:
    """The judge's own copy of the outputs' bytes, ms (the bound's yardstick)."""
    t1 = time.perf_counter()
    for s in outs:
        views[s.name].clone()
    if dev == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t1) * 1e3


def _remeasure_gpu(ev: Hub, side: Side, stage: ErrorStage, detail: dict[str, Any],
                   copy: Callable[[], float]) -> None:
    """Before a GPU copy's overrun is laid on the candidate: measure the machine again
    (REMEASURE empty round trips and judge's own copies of the same bytes, the device's
    contention: :mod:`sandbox.judge.contention`). ``timing_unreliable`` (infrastructure) when
    another job shares the device, or when the noise measured now, or the round trip's wait
    for a CPU, explains the overrun; else it returns and the verdict stands."""
    collect_ms, bound, rt = detail["collect_ms"], detail["bound_ms"], detail["empty_round_trip_ms"]
    rts = [rt, *(ev.noop(side, stage)[0] for _ in range(REMEASURE - 1))]
    copies = [copy() for _ in range(REMEASURE)]
    floor = FLOOR_MS["cuda"]
    noisy_bound = floor + FACTOR * max(copies) + NOISE_FACTOR * max(rts)
    detail.update(remeasured_round_trips_ms=rts, remeasured_copies_ms=copies,
                  remeasured_bound_ms=noisy_bound)
    found = contention(ev)
    why = None
    if found is not None:
        detail.update(found)
        why = f"the device is not this sandbox's alone ({found['contention']})"
    elif collect_ms - detail["collect_cpu_wait_ms"] <= bound:
        why = (f"{detail['collect_cpu_wait_ms']:.3f} ms of the copy's round trip was a wait for a "
               "CPU (the host's load)")
    elif collect_ms <= noisy_bound:
        why = (f"measured again, the judge's own copy took up to {max(copies):.3f} ms and an "
               f"empty round trip up to {max(rts):.3f} ms: a bound of {noisy_bound:.3f} ms")
    if why is not None:
        raise StageFailure(stage, "timing_unreliable",
                           f"copying the returned outputs took {collect_ms:.3f} ms against a bound "
                           f"of {bound:.3f} ms, but {why}: the machine is too busy to bound the "
                           "copy; run again", origin="infrastructure", detail=detail)


def runner_cpu_ms(pid: int) -> float | None:
    """CPU time the kernel charged to process ``pid`` so far (user + system, every thread,
    exited threads included), ms; ``None`` when unreadable. Clock-tick resolution."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def verify_outputs(ev: Hub, slots: list[Slot], inputs: dict[str, torch.Tensor],
                   views: dict[str, torch.Tensor], stage: ErrorStage, where: dict[str, Any],
                   expected: dict[str, torch.Tensor] | None = None) -> None:
    """The problem's own checker (GPU MODE's ``check_implementation``), after kgrader's.

    Where the checker decides (``problem.checker_decides``: a GPU MODE task with a checker,
    not ``strict``), kgrader's element-wise compare did not run: only :func:`sanity_bound`
    does, which catches what no honest kernel returns and no checker should be asked about.
    It runs in the problem process on these outputs: when it fails on them (raises,
    crashes, hangs) the outputs provoked it, and the side that made them fails."""
    decides = bool(getattr(ev.problem, "checker_decides", False))
    if decides and expected is not None:
        sanity_bound(ev, views, expected, stage, where)
    outputs = {s.name: views[s.name] for s in slots if s.role == "output"}
    try:
        why = ev.problem.verify(slots, inputs, outputs)
    except CheckerFailed as e:
        raise StageFailure(stage, "check_failed", f"{e} (dims {where.get('dims')})",
                           detail=dict(where)) from None
    if why is not None:
        raise StageFailure(stage, "wrong_values",
                           f"the problem's check_implementation rejected the outputs for dims "
                           f"{where.get('dims')}: {why}", detail={**where, "checker": why[:500]})


CHECKER_DECIDES = ("gpumode: check_implementation decides values and dtypes; kgrader checks "
                   "only for untouched outputs and NaN where the reference has none (set "
                   "problem.strict for kgrader's element-wise compare and dtype check too)")
STRICT = ("gpumode strict: kgrader's element-wise compare and dtype check apply on top of "
          "check_implementation")


def labels(ev: Hub) -> list[str]:
    """For the record's warnings: which rule judged a GPU MODE task's values, and how its
    generated tensors were classified (:mod:`sandbox.problem.buffers`); none for other tasks."""
    problem = getattr(ev, "problem", None)
    if not convention(ev.task.contract).checker_decides or problem is None:
        return []
    notes = [str(n) for n in getattr(problem, "notes", [])]
    if getattr(problem, "checker_decides", False):
        notes.append(CHECKER_DECIDES)
    elif ev.task.problem is not None and ev.task.problem.strict:
        notes.append(STRICT)
    return [n for n in notes if n not in ev.warnings]


def sanity_bound(ev: Hub, views: dict[str, torch.Tensor],
                 expected: dict[str, torch.Tensor], stage: ErrorStage, where: dict[str, Any]) -> None:
    """What only a cheat or a kernel that did not run returns: an output still poisoned
    (never written), or NaN where the reference has none. The checker judges the rest."""
    c = ev.task.correctness
    for name, exp in expected.items():
        got = views[name]
        if tuple(got.shape) != tuple(exp.shape) or got.numel() == 0:
            continue
        cmp = compare(got, exp, *c.tolerance(dtype_code(got.dtype)), c.max_mismatch_fraction)
        ev._track(cmp.max_abs, cmp.max_rel, cmp.mismatch_fraction)  # reported, not judged
        marker = got.clone()
        poison(marker)
        if torch.equal(_bits(got), _bits(marker)) and not torch.equal(_bits(exp), _bits(marker)):
            raise StageFailure(stage, "output_untouched",
                               f"output {name!r} left unwritten (still poisoned) for dims "
                               f"{where.get('dims')}", detail=dict(where))
        if got.dtype.is_floating_point:
            nan = got.isnan() & ~exp.isnan()
            if bool(nan.any()):
                at = [int(v) for v in torch.nonzero(nan)[0]]
                raise StageFailure(stage, "wrong_values",
                                   f"output {name!r} is NaN at index {at} for dims "
                                   f"{where.get('dims')} where the reference is not "
                                   f"({int(nan.sum())} such elements)", detail=dict(where))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)
