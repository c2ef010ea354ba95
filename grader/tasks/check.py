"""``kgrader task check``: prove a task sound before anyone is graded on it.

What must hold, each reported as one line:

* the task loads and its shapes draw (a generated task's, from ``--seed`` or a secret);
* the cost model evaluates on every shape (and the timed one);
* every shape fits the memory limit: the judge holds a task's tensors about three times
  (shared buffer, inputs, expected outputs); for a generated task the largest shape any
  draw can give is checked, so every draw fits;
* in the sandbox (judge mode ``check``; the host never imports torch): the reference and
  its generator run on every shape, are deterministic (two runs from one seed agree bit
  for bit), and the task's tolerances hold between the reference in its own dtypes and a
  float64 evaluation of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grader.errors import InfrastructureError, TaskError
from grader.judgecall import mode_request, run_judge_mode
from grader.shapes import DrawnShapes, bound_shape, named, resolve_shapes
from grader.task import DTYPE_BYTES, TaskSpec
from grader.tasks.common import ImportedTask
from sandbox.contract.wire import DTYPE_CODES

# Copies of a shape's tensors the judge holds at once (buffer, inputs, expected outputs).
HELD_COPIES = 3


@dataclass
class Finding:
    ok: bool
    what: str
    detail: str = ""


@dataclass
class CheckReport:
    task: str
    findings: list[Finding] = field(default_factory=list)
    shapes: list[dict[str, Any]] = field(default_factory=list)
    drawn: DrawnShapes | None = None

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def add(self, ok: bool, what: str, detail: str = "") -> None:
        self.findings.append(Finding(ok, what, detail))

    def failing_hidden(self) -> list[dict[str, int]]:
        """Hidden shapes on which the reference itself fails (an importer drops them)."""
        return [s["dims"] for s in self.shapes if s["kind"] == "hidden" and "error" in s]


def limit_bytes(spec: TaskSpec, device: str) -> int:
    lim = spec.limits
    mib = lim.gpu_memory_mib if device == "cuda" and lim.gpu_memory_mib else lim.memory_mib
    return mib << 20


def dps_bytes(spec: TaskSpec, dims: dict[str, int]) -> int:
    total = 0
    for t in spec.tensors:
        dtype = t.dtype if t.dtype in DTYPE_BYTES else DTYPE_CODES[dims[t.dtype]]
        total += math.prod(d if isinstance(d, int) else dims[d] for d in t.shape) * DTYPE_BYTES[dtype]
    return total


def check_task(spec: TaskSpec, reference: str, *, backend: str = "auto", device: str = "auto",
               seed: int | None = None) -> CheckReport:
    """Every check; raises only :class:`InfrastructureError` (no sandbox) or ``UsageError``."""
    report = CheckReport(spec.name)
    resolved, report.drawn = resolve_shapes(spec, seed)
    shapes = resolved.shapes.tune + resolved.shapes.hidden + [resolved.timed_dims()]
    report.add(True, "task loads", f"contract {spec.contract}, {len(resolved.shapes.tune)} tune / "
               f"{len(resolved.shapes.hidden)} hidden shapes"
               + (" (drawn)" if report.drawn is not None else ""))
    _cost_model(report, resolved, shapes)
    request = mode_request("check", device, task=resolved.to_wire(), reference=reference)
    dev = request.device
    limit = limit_bytes(spec, dev)
    if spec.contract == "dps":
        gen = spec.shapes.generate
        worst = [*shapes, bound_shape(gen)] if gen is not None else shapes
        need = max(dps_bytes(spec, d) for d in worst) * HELD_COPIES
        report.add(need <= limit, "every shape fits the memory limit",
                   f"largest needs ~{need / 2**20:.1f} MiB of {limit >> 20} MiB"
                   + (" (the largest shape any draw can give)" if gen is not None else ""))
        if need > limit:  # running it would only meet the sandbox's memory limit
            report.add(False, "the reference runs", "not run: the shapes exceed the memory limit")
            return report
    record = run_judge_mode(request, {}, backend=backend, limits=spec.limits)
    if record.errors:
        e = record.errors[0]
        if e.origin == "infrastructure" and e.code not in ("reference_failed", "unsupported_dtype",
                                                             "judge_setup_failed"):
            raise InfrastructureError(f"task check could not run: {e.code}: {e.message[:500]}")
        report.add(False, "the reference loads", f"{e.code}: {e.message[:800]}")
        return report
    report.shapes = list((record.check or {}).get("shapes", []))
    _judge_findings(report, resolved, limit)
    return report


def _cost_model(report: CheckReport, spec: TaskSpec, shapes: list[dict[str, int]]) -> None:
    if spec.cost_model is None:
        report.add(True, "cost model", "none (bandwidth, throughput and the roofline floor "
                   "stay unmeasured)")
        return
    for dims in shapes:
        try:
            nbytes, flops = spec.cost_model.evaluate(dims)
            if not (math.isfinite(nbytes) and math.isfinite(flops)) or nbytes < 0 or flops < 0:
                raise ValueError(f"bytes={nbytes} flops={flops}")
        except (ValueError, ArithmeticError, TypeError) as e:
            report.add(False, "cost model evaluates", f"on {dims}: {e}")
            return
    report.add(True, "cost model evaluates", f"on all {len(shapes)} shapes")


def _judge_findings(report: CheckReport, spec: TaskSpec, limit: int) -> None:
    dvars = set(spec.shapes.generate.dtypes) if spec.shapes.generate else set()
    runs, det, tol, mem = True, True, True, True
    for s in report.shapes:
        where = f"{s['kind']} {named(s['dims'], dvars)}"
        if "error" in s:
            runs = False
            report.add(False, "the reference runs", f"{where}: {s['error']}")
            continue
        if not s.get("deterministic", False):
            det = False
            report.add(False, "the reference is deterministic",
                       f"{where}: two runs from one seed differ")
        f64 = s.get("float64")
        if "float64_error" in s:
            tol = False
            report.add(False, "tolerances hold against float64",
                       f"{where}: the reference cannot run in float64: {s['float64_error']}")
        elif isinstance(f64, dict) and not f64.get("ok"):
            tol = False
            c = spec.correctness
            report.add(False, "tolerances hold against float64",
                       f"{where}: max |err| {f64.get('max_abs', 0):.3g}, max rel "
                       f"{f64.get('max_rel', 0):.3g}, {f64.get('mismatch_fraction', 0):.2%} of "
                       f"elements beyond atol={c.atol:g} rtol={c.rtol:g}")
        if int(s.get("bytes", 0)) * HELD_COPIES > limit:
            mem = False
            report.add(False, "every shape fits the memory limit",
                       f"{where}: ~{int(s['bytes']) * HELD_COPIES / 2**20:.1f} MiB of "
                       f"{limit >> 20} MiB")
    n = len(report.shapes)
    if runs:
        report.add(True, "the reference runs", f"on all {n} shapes")
    if det:
        report.add(True, "the reference is deterministic", "two runs from one seed agree bit for bit")
    if tol:
        worst = max((s.get("float64", {}).get("max_rel", 0.0) for s in report.shapes
                     if isinstance(s.get("float64"), dict)), default=0.0)
        report.add(True, "tolerances hold against float64", f"worst relative error {worst:.3g}")
    if mem and spec.contract != "dps":
        report.add(True, "every shape fits the memory limit", f"judged on all {n} shapes")


def verify_import(task: ImportedTask, *, backend: str = "auto", device: str = "auto") -> ImportedTask:
    """Run an imported task's reference on every shape in the sandbox: a tune shape it
    cannot run fails the import; hidden variants it cannot run are dropped."""
    rep = check_task(task.spec, task.reference, backend=backend, device=device)
    loads = [f for f in rep.findings if f.what == "the reference loads" and not f.ok]
    bad_tune = [s for s in rep.shapes if s["kind"] == "tune" and "error" in s]
    if loads or bad_tune:
        why = loads[0].detail if loads else f"{bad_tune[0]['dims']}: {bad_tune[0]['error']}"
        raise TaskError(f"{task.source}: the problem's reference fails on its own sizes: {why}")
    drop = rep.failing_hidden()
    spec = task.spec
    if drop:
        keep = [h for h in spec.shapes.hidden if dict(h) not in drop]
        spec = spec.model_copy(update={"shapes": spec.shapes.model_copy(update={"hidden": keep})})
    notes = [*task.notes]
    if drop:
        notes.append(f"dropped {len(drop)} hidden variant(s) the reference cannot run: {drop}")
    notes += [f"check: {f.what}: {f.detail}" for f in rep.findings
              if not f.ok and f.what != "the reference runs"]
    return ImportedTask(spec, task.reference, task.source, notes)
