"""Speed-ups the agent tools report: against the task's reference and the current best.

Where each figure comes from (every result names it in ``reference_source`` /
``best_source``):

* ``paired``: measured in the same sandbox run, interleaved with the candidate (AB, BA,
  ...), on the timed shape. ``bench_kernel`` always runs the reference this way, as a
  trusted second side (``EvalRequest.current_trusted``: not scanned, no kernel-only
  audit); ``accept_candidate`` pairs the candidate with ``best.py``. The speed-up is
  ``median(t_other) / median(t_candidate)`` over the pairs.
* ``cached``: the reference's median from an earlier run on this workspace's task and
  hardware (``WORKSPACE/reference-times.json``, keyed by the task's files, backend,
  device and hardware: bench_kernel's pairs write it); ``separate_run``: measured now, in
  a sandbox run of its own (the trusted reference as the candidate, benchmark stage
  only), then cached. Used by ``accept_candidate``, whose run holds only the candidate and
  best.py (its report is the decision the records keep), against the candidate's
  benchmark median.
* ``recorded``: the current best's benchmark median when it was accepted
  (``WORKSPACE/best-time.json``, valid while best.py has that sha256); used by
  ``bench_kernel``, whose pair is candidate/reference.

A figure that cannot be had is ``null`` with the reason in ``unmeasured``.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from typing import Any

from grader.agent.workspace import Workspace
from grader.evaluate import EvalRequest, Source, evaluate
from grader.experience.search import current_hardware_key
from grader.records import sha256_text
from grader.report.model import Report, ReportError
from grader.scan.policy import Policy
from grader.task import load_task

__all__ = ["BEST_TIME_NAME", "CLOCK_FLOOR_MS", "REFERENCE_TIMES_NAME", "accept_figures",
           "best_figures", "merge", "paired_figures", "paired_medians", "record_best_time",
           "reference_figures", "remember_reference", "without_pair_faults"]

REFERENCE_TIMES_NAME = "reference-times.json"
BEST_TIME_NAME = "best-time.json"
PAIRED_TEXT = ("paired: the task's reference ran as a trusted second side in the same sandbox "
               "run, interleaved with the candidate, on the timed shape")
# The reference is trusted task code and uses library calls a candidate policy denies.
_REFERENCE_POLICY = Policy(name="agent-reference", description="the task's own trusted "
                           "reference, timed for the agent tools; denies nothing",
                           path="<memory>", chain=("agent-reference",), promote_warnings=False,
                           native_sources=(), rules=())


def paired_medians(report: Report) -> tuple[float | None, float | None]:
    """``(median t_other, median t_candidate)`` in ms from the deciding run's valid pairs."""
    acc = report.acceptance
    if acc is None:
        return None, None
    seed = next((r for r in acc.rules if r.rule == "seed"), None)
    if seed is None:
        return None, None
    cur, cand = seed.numbers.get("median_current_ms"), seed.numbers.get("median_candidate_ms")
    if isinstance(cur, float) and isinstance(cand, float) and cur > 0 and cand > 0:
        return cur, cand
    return None, None


# The CPU judge times a call as its round trip less an empty call's, floored at 1e-6 ms
# (sandbox.judge.benchmark): a median at that floor is "too short to tell", not a time.
CLOCK_FLOOR_MS = 1e-6
_AT_FLOOR = ("the {what}'s paired median is at the judge clock's floor ({floor} ms): on the "
             "CPU a call is timed as its round trip less an empty call's, and a call this short "
             "is within that round trip's noise")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _read(path: Any) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Any, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _reference_key(ws: Workspace) -> str:
    h = hashlib.sha256()
    for name in ("task.json", "reference.py"):
        h.update((ws.task_dir / name).read_bytes())
    hw = current_hardware_key(ws.config.backend, ws.config.device) or "unknown-hardware"
    return f"{h.hexdigest()[:16]}/{ws.config.backend}/{ws.config.device}/{hw}"


def remember_reference(ws: Workspace, median_ms: float, method: str, dims: dict[str, int]) -> None:
    """Cache the reference's median for this task and hardware (the latest wins)."""
    path = ws.root / REFERENCE_TIMES_NAME
    data = _read(path)
    data[_reference_key(ws)] = {"median_ms": median_ms, "method": method, "dims": dims,
                                "measured_at": _now()}
    _write(path, data)


def _separate_run(ws: Workspace) -> tuple[float | None, str]:
    spec, reference = load_task(ws.task_dir)
    req = EvalRequest(task=spec, reference=reference,
                      candidate=Source(name="reference.py", text=reference),
                      candidate_trusted=True, policy=_REFERENCE_POLICY,
                      backend=ws.config.backend, device=ws.config.device,
                      stages=("compile", "correctness", "benchmark"), shape_kinds=("tune",),
                      gpu_ids=tuple(ws.config.gpu_ids))
    report = evaluate(req)
    if report.timing is None or report.errors:
        why = report.errors[0].code if report.errors else "no timing"
        return None, f"the reference's separate timing run failed ({why})"
    return report.timing.median_ms, "separate_run"


def reference_figures(ws: Workspace, cand_ms: float | None) -> dict[str, Any]:
    """The reference's time (cached, else a separate run) and the candidate's speed-up
    over it from the candidate's benchmark median (for results without the reference in
    their pair)."""
    key = _reference_key(ws)
    hit = _read(ws.root / REFERENCE_TIMES_NAME).get(key)
    if isinstance(hit, dict) and isinstance(hit.get("median_ms"), float):
        ref_ms: float | None = hit["median_ms"]
        source = (f"cached: the reference's median from a {hit.get('method')} run at "
                  f"{hit.get('measured_at')} on this task and hardware")
    else:
        ref_ms, source = _separate_run(ws)
        if ref_ms is not None and ref_ms <= 2 * CLOCK_FLOOR_MS:
            ref_ms, source = None, _AT_FLOOR.format(what="reference", floor=CLOCK_FLOOR_MS)
        if ref_ms is not None:
            remember_reference(ws, ref_ms, "separate_run", ws.spec.timed_dims())
            source = ("separate_run: the reference timed now in a sandbox run of its own "
                      "(cached for later calls)")
    return _speedup("reference", ref_ms, cand_ms, source)


def _speedup(what: str, other_ms: float | None, cand_ms: float | None, source: str) -> dict[str, Any]:
    out: dict[str, Any] = {f"{what}_ms": other_ms, f"{what}_source": source,
                           f"speedup_vs_{what}": None, "unmeasured": {}}
    if other_ms is None:
        out["unmeasured"][f"{what}_ms"] = source
        out[f"{what}_source"] = None
    if other_ms is not None and cand_ms:
        out[f"speedup_vs_{what}"] = other_ms / cand_ms
    else:
        out["unmeasured"][f"speedup_vs_{what}"] = (
            f"no {what} time" if other_ms is None else "the candidate was not timed")
    return out


def paired_figures(what: str, report: Report) -> dict[str, Any]:
    """The other side's paired median and the paired speed-up (``what``: reference/best)."""
    other, cand = paired_medians(report)
    if other is None:
        reason = ("no valid pairs: " + (report.acceptance.reason if report.acceptance
                                        else "the run stopped before the paired timing"))
        return _speedup(what, None, None, reason)
    for side, v in ((what, other), ("candidate", cand)):
        if v is not None and v <= 2 * CLOCK_FLOOR_MS:
            return {**_speedup(what, None, None, _AT_FLOOR.format(what=side, floor=CLOCK_FLOOR_MS)),
                    "candidate_paired_ms": cand}
    src = PAIRED_TEXT if what == "reference" else (
        "paired: best.py ran as the second side in the same sandbox run, interleaved with "
        "the candidate, on the timed shape")
    return {**_speedup(what, other, cand, src), "candidate_paired_ms": cand}


def without_pair_faults(report: Report) -> tuple[Report, list[ReportError]]:
    """``report`` without the infrastructure errors of its accept stage, and those errors.

    ``bench_kernel``'s pair with the trusted reference only measures: when the host's load
    spoiled it (on a loaded CPU a short reference sits in the round trip's noise at every
    try), the candidate's own stages stand and the speed-up is unmeasured, with the
    reason, rather than the whole bench failing. A candidate-origin error there (a
    violation seen during the paired calls) stays: it fails the bench."""
    lost = [e for e in report.errors if e.stage == "accept" and e.origin == "infrastructure"]
    if not lost:
        return report, []
    return report.model_copy(update={"errors": [e for e in report.errors if e not in lost]}), lost


def record_best_time(ws: Workspace, source: str, report: Report) -> None:
    """Remember the new best's benchmark median (read back by :func:`best_figures`)."""
    path = ws.root / BEST_TIME_NAME
    if report.timing is None:
        path.unlink(missing_ok=True)
        return
    _write(path, {"sha256": sha256_text(source), "median_ms": report.timing.median_ms,
                  "dims": report.timing.dims, "measured_at": _now()})


def best_figures(ws: Workspace, cand_ms: float | None) -> dict[str, Any]:
    """The current best's recorded benchmark median and the candidate's speed-up over it."""
    best = ws.records.best_source()
    if best is None:
        return _speedup("best", None, cand_ms, "no best.py yet")
    rec = _read(ws.root / BEST_TIME_NAME)
    if rec.get("sha256") != sha256_text(best) or not isinstance(rec.get("median_ms"), float):
        return _speedup("best", None, cand_ms, "best.py's time was not recorded when it was "
                                               "accepted (accept_candidate records it)")
    return _speedup("best", rec["median_ms"], cand_ms,
                    f"recorded: best.py's benchmark median when it was accepted "
                    f"({rec.get('measured_at')}), from a different run than this one")


def merge(out: dict[str, Any], *parts: dict[str, Any]) -> None:
    """Merge speed figures into a tool result, their reasons into ``unmeasured``."""
    for part in parts:
        part = dict(part)
        out["unmeasured"].update(part.pop("unmeasured"))
        out.update(part)
    out.setdefault("candidate_paired_ms", None)


def accept_figures(ws: Workspace, out: dict[str, Any], public: Report, *, first: bool) -> None:
    """``accept_candidate``'s speed figures: the reference's time from the cache or a run
    of its own, against the candidate's benchmark median; the best's from the pair
    (``first``: there was no best.py, so no pair)."""
    ref = (reference_figures(ws, out["median_ms"]) if out["median_ms"] is not None
           else _speedup("reference", None, None, "the candidate was not timed"))
    if first:
        merge(out, ref, {"best_ms": None, "best_source": None, "speedup_vs_best": None,
                         "unmeasured": {"best_ms": "no best.py before this candidate"}})
        flag_slower(out)
        return
    merge(out, paired_figures("best", public), ref)
    s = out["speedup_vs_reference"]
    out["slower_than_reference"] = None if s is None else s < 1.0


def flag_slower(out: dict[str, Any]) -> None:
    """A first kernel slower than the reference becomes best.py, never silently: the result
    says so (``slower_than_reference: true``, a warning, and the reason says it too)."""
    s = out["speedup_vs_reference"]
    out["slower_than_reference"] = None if s is None else s < 1.0
    if out["accepted"] and s is not None and s < 1.0:
        how = str(out.get("reference_source") or "measured").split(":")[0]
        msg = (f"best.py is now a kernel {1 / s:.2f}x slower than the task's reference (its "
               f"time: {how}): it is the baseline later candidates must beat, not a speed-up")
        out["warnings"].append(msg)
        out["reason"] = f"{out['reason']}; {msg}"
    elif out["accepted"] and s is None:
        out["warnings"].append("the speed-up over the reference could not be measured: "
                               + str(out["unmeasured"].get("speedup_vs_reference", "unknown")))
