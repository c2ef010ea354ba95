"""A judge record's diagnostics turned into the report's :class:`Diagnostics`.

The judge's parsed account of what Nsight Compute and compute-sanitizer said
(:class:`sandbox.contract.wire.DiagnosticsRecord`) becomes counters per kernel, a launch-level
roofline where the task has a cost model and peaks are known, advice from the rule table,
and the sanitizer's findings (a record whose diagnostics break their caps was refused
before, by :func:`grader.report.diagnostics_model.record_problem`). Used by the report
(every evaluation's record) and by the ``profile`` mode (:mod:`grader.diagnostics.run`). Counters are advice, never a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grader.diagnostics.advice import AdviceTable, advise, load_table
from grader.diagnostics.ncu import counters, group_launches
from grader.measure.profile import counters_roofline
from grader.report.diagnostics_model import Diagnostics, KernelDiagnostics, sanitizer_result
from grader.task import TaskSpec
from sandbox.contract import wire

NOT_RUN = "not measured: the profile did not run"


def _launch_roofline(spec: TaskSpec | None, prof: wire.ProfileRecord, kernels: list[KernelDiagnostics],
                     peaks: Mapping[str, Any] | None) -> tuple[float | None, str | None, str | None]:
    """(fraction, bound, why-not) of one call: cost model over the summed kernel times."""
    if spec is None or spec.cost_model is None:
        return None, None, "the task has no cost model"
    per_call = [k.counters.duration_ms for k in kernels]
    if not per_call or any(d is None for d in per_call):
        return None, None, "no kernel duration was measured"
    point, why = counters_roofline(spec, prof.dims or spec.shapes.tune[0],
                                   sum(d for d in per_call if d is not None), peaks)
    if point is None:
        return None, None, why
    return point.roofline_fraction, point.bound, None


def build_diagnostics(raw: wire.DiagnosticsRecord | None, *, spec: TaskSpec | None = None,
                      peaks: Mapping[str, Any] | None = None, roofline_fraction: float | None = None,
                      bound: str | None = None, table: AdviceTable | None = None) -> Diagnostics:
    """Counters per kernel, advice, overheads and the sanitizer result from a judge record.

    ``roofline_fraction``/``bound`` from a verified benchmark win over the profile's own
    (ncu-timed) roofline; without either, a kernel's bound is read from its counters.
    """
    d = Diagnostics()
    raw = raw or wire.DiagnosticsRecord()
    if raw.sanitizer is not None:
        d.sanitizer = sanitizer_result(raw.sanitizer)
    prof = raw.profile
    if prof is None:
        d.unmeasured["kernels"] = NOT_RUN
        return d
    d.tool = " ".join(x for x in ("ncu", prof.version) if x)
    d.dims, d.profiled_calls = dict(prof.dims), prof.calls
    if prof.truncated:
        d.notes.append("ncu's log exceeded its size cap; later kernels are missing")
    if prof.dropped:
        d.notes.append(f"{prof.dropped} counter value(s) were not numbers and were dropped")
    if prof.unmeasured or not prof.kernels:
        d.unmeasured["kernels"] = prof.unmeasured or "not measured: ncu reported no kernel"
        return d
    d.kernels = [KernelDiagnostics(name=name, launches=len(rows), block=rows[0].block,
                                   grid=rows[0].grid, counters=counters(rows))
                 for name, rows in group_launches(prof.kernels, prof.calls)]
    if roofline_fraction is None:
        roofline_fraction, bound, why = _launch_roofline(spec, prof, d.kernels, peaks)
        if why:
            d.unmeasured["roofline_fraction"] = f"not measured: {why}"
    d.roofline_fraction = roofline_fraction
    d.bound = bound if bound in ("memory", "compute") else None  # type: ignore[assignment]
    if d.bound is None:
        d.notes.append("bound read per kernel from its counters (DRAM vs SM throughput): "
                       "no roofline for this launch")
    tab = table or load_table()
    for k in d.kernels:
        c = k.counters
        kb = d.bound or _counter_bound(c.dram_throughput_pct, c.sm_throughput_pct)
        k.advice = advise(c, tab, roofline_fraction=d.roofline_fraction if d.bound else None, bound=kb)
        d.advice += [f"{k.name}: {s}" for s in k.advice]
    return d


def _counter_bound(dram: float | None, sm: float | None) -> str | None:
    if dram is None or sm is None:
        return None
    return "memory" if dram >= sm else "compute"
