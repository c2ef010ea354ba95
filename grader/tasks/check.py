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
  float64 evaluation of it (rounded to a half-precision output's dtype first);
* the problem's quirks (:mod:`grader.formats.quirks`), read from its source and measured in
  the sandbox, each with what kgrader does about it.

A limit that stops the sandbox is named with its figure (:mod:`grader.tasks.checkrun`);
a problem that needs CUDA on a CPU says so, with the ``--device cuda`` hint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grader.errors import InfrastructureError, TaskError
from grader.formats import quirks, registry
from grader.formats.common import ImportedTask
from grader.formats.quirks import Quirk
from grader.judgecall import mode_request
from grader.limits import Limits
from grader.shapes import DrawnShapes, bound_shape, named, resolve_shapes
from grader.task import DTYPE_BYTES, TaskSpec
from grader.tasks.checkrun import (
    NEEDS_CUDA_HINT,
    CheckLimitError,
    NeedsDeviceError,
    run_check_mode,
)
from sandbox.contract.conventions import convention
from sandbox.contract.wire import DTYPE_CODES

# Copies of a shape's tensors the judge holds at once (buffer, inputs, expected outputs).
HELD_COPIES = 3
# What the judge's and the problem process's interpreters take beside the tensors (torch).
INTERPRETERS_MIB = 1024


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
    quirks: list[Quirk] = field(default_factory=list)

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
    report = CheckReport(spec.name, quirks=static_quirks(spec, reference))
    resolved, report.drawn = resolve_shapes(spec, seed)
    shapes = resolved.shapes.tune + resolved.shapes.hidden + [resolved.timed_dims()]
    report.add(True, "task loads", f"contract {spec.contract}, {len(resolved.shapes.tune)} tune / "
               f"{len(resolved.shapes.hidden)} hidden shapes"
               + (" (drawn)" if report.drawn is not None else ""))
    _cost_model(report, resolved, shapes)
    request = mode_request("check", device, task=resolved.to_wire(), reference=reference)
    dev = request.device
    limit = limit_bytes(spec, dev)
    if not convention(spec.contract).takes_problem:  # the task declares its tensors
        gen = spec.shapes.generate
        worst = [*shapes, bound_shape(gen)] if gen is not None else shapes
        need = max(dps_bytes(spec, d) for d in worst) * HELD_COPIES
        report.add(need <= limit, "every shape fits the memory limit",
                   f"largest needs ~{need / 2**20:.1f} MiB of {limit >> 20} MiB"
                   + (" (the largest shape any draw can give)" if gen is not None else ""))
        if need > limit:  # running it would only meet the sandbox's memory limit
            report.add(False, "the reference runs", "not run: the shapes exceed the memory limit")
            return report
    record = run_check_mode(request, check_limits(spec.limits), backend)
    if record.errors:
        e = record.errors[0]
        if e.code == "needs_cuda":
            raise NeedsDeviceError(f"task check could not run on {dev}: {e.message[:500]}",
                                   hint=NEEDS_CUDA_HINT)
        if e.origin == "infrastructure" and e.code not in ("reference_failed", "unsupported_dtype",
                                                             "judge_setup_failed"):
            raise InfrastructureError(f"task check could not run: {e.code}: {e.message[:500]}")
        report.add(False, "the reference loads", f"{e.code}: {e.message[:800]}")
        return report
    report.shapes = list((record.check or {}).get("shapes", []))
    cuda = [s for s in report.shapes if s.get("error_code") == "needs_cuda"]
    if cuda:
        raise NeedsDeviceError(f"task check could not run on {dev}: {cuda[0]['kind']} "
                               f"{cuda[0]['dims']}: {str(cuda[0].get('error'))[:500]}",
                               hint=NEEDS_CUDA_HINT)
    _judge_findings(report, resolved, limit)
    c = spec.correctness
    report.quirks = quirks.merge_quirks(report.quirks, quirks.measured(
        report.shapes, c.atol, c.rtol, dict(c.by_dtype)))
    return report


def check_limits(limits: Limits) -> Limits:
    """The check's sandbox limits: the task's, with the largest-file limit (``RLIMIT_FSIZE``,
    sized by ``tmpfs_mib``) raised to the memory limit. On the CPU the judge's shared buffer
    is a memory file, which that limit bounds too (a 288 MiB problem failed ``File too
    large`` under the default 256); memory bounds it anyway, and the check is there to
    measure what the task needs (:func:`buffer_mib`), which an import then records."""
    return limits.override(tmpfs_mib=max(limits.tmpfs_mib, limits.memory_mib))


def buffer_mib(shapes: list[dict[str, Any]]) -> int:
    """The ``tmpfs_mib`` a CPU run of these shapes needs for its shared buffers: twice the
    largest shape's tensors (a buffer grows by doubling), in MiB."""
    most = max((int(s.get("bytes", 0)) for s in shapes), default=0)
    return math.ceil(2 * most / 2**20)


def static_quirks(spec: TaskSpec, reference: str) -> list[Quirk]:
    """The quirks the problem's source shows, as its format reads them (KernelBench's;
    GPU MODE's are all measured)."""
    if spec.problem is None:
        return []
    return registry.for_contract(spec.contract).static_quirks(spec, reference)


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
    skipped = 0
    for s in report.shapes:
        where = f"{s['kind']} {named(s['dims'], dvars)}"
        if "memory_needed_mib" in s:  # refused by the judge before it met the limit
            runs = mem = False
            report.add(False, "every shape fits the memory limit", f"{where}: {s.get('error')}")
            continue
        if "error" in s:
            runs = False
            report.add(False, "the reference runs", f"{where}: {s['error']}")
            continue
        skipped += "float64_skipped" in s
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
            report.add(False, "tolerances hold against float64",
                       f"{where}: {float64_detail(spec, s, f64)}")
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
        rounded = sorted({d for s in report.shapes if isinstance(s.get("float64"), dict)
                          for d in s["float64"].get("rounded", [])})
        report.add(True, "tolerances hold against float64", f"worst relative error {worst:.3g}"
                   + (f" ({', '.join(rounded)} outputs against the float64 values rounded to "
                      "their dtype)" if rounded else "")
                   + (f"; not evaluated on {skipped} shape(s), see the quirks" if skipped else ""))
    if mem and convention(spec.contract).takes_problem:
        report.add(True, "every shape fits the memory limit", f"judged on all {n} shapes")


def float64_detail(spec: TaskSpec, s: dict[str, Any], f64: dict[str, Any]) -> str:
    """A float64 mismatch in the terms of the output's own dtype and tolerance."""
    fine = f64.get("finer_than_dtype")
    if isinstance(fine, dict) and not f64.get("first_bad"):
        dt = str(fine.get("dtype"))
        a, r = spec.correctness.by_dtype.get(dt, (spec.correctness.atol, spec.correctness.rtol))
        return (f"atol={a:g} rtol={r:g} is finer than one {dt} rounding step on "
                f"{float(fine.get('fraction', 0)):.2%} of the elements of {fine.get('tensor')}: "
                "an honest kernel that rounds once differently fails there")
    bad = f64.get("first_bad") or {}
    outs = {o.get("name"): o for o in s.get("outputs", []) if isinstance(o, dict)}
    dtype = str(outs.get(bad.get("tensor"), {}).get("dtype", ""))
    c = spec.correctness
    atol, rtol = c.by_dtype.get(dtype, (c.atol, c.rtol))
    rounded = dtype in f64.get("rounded", [])
    return (f"max |err| {f64.get('max_abs', 0):.3g}, max rel {f64.get('max_rel', 0):.3g}; "
            f"{f64.get('mismatch_fraction', 0):.2%} of the elements of "
            f"{bad.get('tensor', 'an output')}{f' ({dtype})' if dtype else ''} beyond "
            f"atol={atol:g} rtol={rtol:g}"
            + (f", against the float64 values rounded to {dtype}" if rounded else "")
            + (f", first at {bad.get('index')}: {bad.get('actual')} against "
               f"{bad.get('expected')}" if bad.get("index") is not None else ""))


def verify_import(task: ImportedTask, *, backend: str = "auto", device: str = "auto") -> ImportedTask:
    """Run an imported task's reference on every shape in the sandbox: a tune shape it
    cannot run fails the import; hidden variants it cannot run are dropped."""
    rep = check_task(task.spec, task.reference, backend=backend, device=device)
    loads = [f for f in rep.findings if f.what == "the reference loads" and not f.ok]
    bad_tune = [s for s in rep.shapes if s["kind"] == "tune" and "error" in s]
    big = [s for s in bad_tune if "memory_needed_mib" in s]
    if big and not loads:  # the judge's own refusal, with its figures
        need = int(big[0]["memory_needed_mib"])
        hint = (f"--memory-mib {need + INTERPRETERS_MIB} or more (the copies, plus ~"
                f"{INTERPRETERS_MIB} MiB for the judge's and the problem's Python and torch)"
                if big[0].get("memory_kind") != "gpu" else
                f"a device with more than {need} MiB free, or limits.gpu_memory_mib above it")
        raise CheckLimitError(f"{task.source}: {big[0]['dims']}: {big[0]['error']}", hint=hint)
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
    found = quirks.merge_quirks(task.quirks, rep.quirks)
    need = buffer_mib(rep.shapes)
    if need > spec.limits.tmpfs_mib:
        spec = spec.model_copy(update={"limits": spec.limits.override(tmpfs_mib=need)})
        found.append(Quirk("big_buffer", f"the largest shape holds {need // 2} MiB of tensors",
                           f"limits.tmpfs_mib set to {need} in task.json: on the CPU the judge's "
                           "shared buffer is a memory file, bounded by the sandbox's "
                           "largest-file limit (it also sizes /tmp and /dev/shm)", "measured"))
    return ImportedTask(spec, task.reference, task.source, notes, found)
