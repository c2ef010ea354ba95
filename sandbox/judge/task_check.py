"""``check`` mode: is a task sound before anyone is graded on it? (judge side)

No candidate runs. For every shape of the task the judge lays the tensors out (a field
problem's generator runs here), draws inputs, and runs the trusted reference twice on
inputs drawn twice from one seed (the reference and its generator must be deterministic),
once more on the same inputs without reseeding (an output that changes depends on torch's
random state: live Dropout), then in float64: the task's tolerances must hold between the
reference in its own dtypes and that float64 evaluation (rounded to a half-precision
output's own dtype first, so that dtype's rounding is not counted), or honest kernels fail
at random. It also measures what the host reports as quirks: constant or zero outputs, a
tolerance an all-zero output meets, plain values among the inputs.

Memory: the sandbox's limit (``limits.memory_mib``) is known here. A shape whose tensors,
held about :data:`HELD_COPIES` times, would exceed it fails with the figures instead of
running into the limit; a float64 evaluation that would not fit is skipped and said so.
Outputs are compared in chunks, so a comparison's float64 temporaries stay small. One line
per step goes to stderr (``kgrader-check: ...``): if a limit kills the sandbox, the host
names the limit and the step it was in.

The host decides from these figures (``grader.tasks.check``). The problem's code runs in
the sandbox, in its own process (:mod:`sandbox.problem.host`): the host never imports
torch, and the judge never executes it.
"""

from __future__ import annotations

import errno
import math
import random
import resource
import sys
import time
import traceback
from typing import Any

import torch

from sandbox.contract import device_memory
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import WIRE_VERSION, ErrorWire, JudgeRequest, Record
from sandbox.judge.device import device_environment, memory_figures
from sandbox.problem.base import Problem
from sandbox.problem.host import make_problem
from sandbox.problem.tensors import (
    DTYPES,
    Comparison,
    Slot,
    compare,
    dtype_code,
    total_bytes,
)

# Copies of a shape's tensors the check holds at once (the shared buffer, the judge's
# inputs and two reference outputs, the problem process's working copy); the host's rule
# for destination-passing tasks is the same (grader.tasks.check.HELD_COPIES).
HELD_COPIES = 3
CHUNK = 1 << 22  # elements per comparison chunk: a few float64 temporaries of 32 MiB
LOW_PRECISION = ("float16", "bfloat16")
MIB = 1 << 20


def run_check(req: JudgeRequest) -> Record:
    assert req.task is not None
    task, dev = req.task, "cuda" if req.device == "cuda" else "cpu"
    rng = random.Random(req.phase_seed)
    env = device_environment(req.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    limit, label = _memory_limit(req, dev)
    _log(f"problem setup on {dev}" + (f" ({label} {limit // MIB} MiB)" if limit else ""))
    try:
        problem = make_problem(task, req.reference, dev, rng)
    except Exception as e:
        return Record(wire_version=WIRE_VERSION, stage="sandbox", errors=(_error(e),),
                      warnings=(), device=req.device, environment=env)
    shapes = [("tune", d) for d in task.tune] + [("hidden", d) for d in task.hidden]
    try:
        results = [_check_shape(problem, kind, dims, rng.getrandbits(62), task.correctness,
                                limit, label) for kind, dims in shapes]
    finally:
        problem.close()
    return Record(wire_version=WIRE_VERSION, stage=None, errors=(), warnings=(), device=req.device,
                  environment=env, check={"shapes": results, "memory_limit_mib": limit // MIB})


def _memory_limit(req: JudgeRequest, dev: str) -> tuple[int, str]:
    """Where the check's tensors live, and how much room they have there: on the CPU the
    sandbox's memory limit; on CUDA the GPU memory limit, else the device's memory (the
    host's limit does not bound tensors on the device)."""
    if dev != "cuda":
        return (req.limits.memory_mib or 0) * MIB, "memory limit"
    if req.limits.gpu_memory_mib:
        return req.limits.gpu_memory_mib * MIB, "GPU memory limit"
    try:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    except Exception:  # no figure: no refusal, the device's own OOM says it
        return 0, "GPU memory"
    return int(total), "GPU memory"


def _log(msg: str) -> None:
    """One progress line for the host, read only if a limit kills the sandbox."""
    print(f"kgrader-check: {msg}", file=sys.stderr, flush=True)


def _error(e: BaseException) -> ErrorWire:
    if isinstance(e, StageFailure):
        return e.error
    if device_memory.is_device_oom(e):  # the device is full, not the task's fault
        return device_memory.failure("sandbox", "the task check's set-up", e,
                                     memory_figures("cuda")).error
    return ErrorWire(stage="sandbox", code="reference_failed", origin="infrastructure",
                     message="".join(traceback.format_exception(e))[-3000:])


def _check_shape(problem: Problem, kind: str, dims: dict[str, int], seed: int,
                 c: Any, limit: int, label: str) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "dims": dict(dims)}
    where = f"{kind} {dims}"
    try:
        _log(f"{where}: layout (the generator and the reference run once)")
        slots = problem.layout(dims)
        nbytes = total_bytes(slots)
        out["bytes"] = nbytes
        out["tensors"] = [{"name": s.name, "role": s.role, "dtype": s.dtype, "shape": list(s.shape)}
                          for s in slots]
        out["non_tensor_inputs"] = _plain_values(problem.call_data(slots))
        if limit and nbytes * HELD_COPIES > limit:
            out["error"] = (f"{label} {limit // MIB} MiB: this shape's tensors take "
                            f"{nbytes / MIB:.1f} MiB and the check holds about {HELD_COPIES} "
                            f"copies (~{nbytes * HELD_COPIES / MIB:.0f} MiB)")
            out["memory_needed_mib"] = math.ceil(nbytes * HELD_COPIES / MIB)
            out["memory_kind"] = "gpu" if label.startswith("GPU") else "host"
            return out
        _log(f"{where}: reference ({nbytes / MIB:.1f} MiB of tensors)")
        t0 = time.perf_counter()
        first = problem.reference(slots, problem.inputs(slots, seed))
        out["reference_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        _log(f"{where}: reference again (determinism)")
        inputs = problem.inputs(slots, seed)
        second = problem.reference(slots, inputs)
        out["deterministic"] = all(_same(first[k], second[k]) for k in first)
        del second
        _log(f"{where}: reference on the same inputs, not reseeded (random state)")
        third = problem.reference(slots, inputs)
        out["rng_dependent"] = out["deterministic"] and \
            not all(_same(first[k], third[k]) for k in first)
        del third
        out["outputs"] = [_output_figures(name, t, c) for name, t in first.items()]
    except Exception as e:
        out["error"] = _message(e)
        if isinstance(e, StageFailure):  # needs_cuda is the device's fault, not the task's
            out["error_code"] = e.error.code
        return out
    if out["rng_dependent"]:
        out["float64_skipped"] = ("the reference's output depends on torch's random state, so "
                                  "a float64 run draws other values")
        return out
    wide_bytes = _wide_bytes(slots)
    if limit and (nbytes * HELD_COPIES + 2 * wide_bytes) > limit:
        out["float64_skipped"] = (f"a float64 evaluation needs ~{wide_bytes / MIB:.0f} MiB more "
                                  f"twice over, beyond the {label} {limit // MIB} MiB")
        return out
    try:
        _log(f"{where}: float64 reference ({wide_bytes / MIB:.1f} MiB widened)")
        wide = problem.reference(slots, inputs, float64=True)
    except Exception as e:
        out["float64_error"] = _message(e)
        return out
    del inputs
    _log(f"{where}: comparing against float64")
    out["float64"] = _against_float64(first, wide, c)
    return out


def _against_float64(first: dict[str, torch.Tensor], wide: dict[str, torch.Tensor],
                     c: Any) -> dict[str, Any]:
    """The tolerances between the reference and its float64 evaluation, worst over outputs.

    A half-precision output is compared with the float64 values rounded to its own dtype:
    the dtype's rounding of the true value is not the task's error; ``max_abs``/``max_rel``
    are taken against the unrounded values and ``rounded`` names the dtypes rounded."""
    worst: dict[str, Any] = {"ok": True, "max_abs": 0.0, "max_rel": 0.0, "mismatch_fraction": 0.0}
    rounded: list[str] = []
    for name, got in first.items():
        code = dtype_code(got.dtype)
        atol, rtol = c.tolerance(code)
        ref = wide[name]
        low = code in LOW_PRECISION and ref.dtype.is_floating_point
        if low:
            rounded.append(code)
        raw = _chunked(got, ref, atol, rtol, c.max_mismatch_fraction, None)
        cmp = _chunked(got, ref, atol, rtol, c.max_mismatch_fraction, got.dtype) if low else raw
        worst["ok"] = worst["ok"] and cmp["ok"]
        finer = _finer_than_dtype(got, atol, rtol) if low else 0.0
        if finer > c.max_mismatch_fraction and "finer_than_dtype" not in worst:
            worst["ok"] = False
            worst["finer_than_dtype"] = {"tensor": name, "dtype": code, "fraction": finer}
        for key, v in (("max_abs", raw["max_abs"]), ("max_rel", raw["max_rel"]),
                       ("mismatch_fraction", cmp["mismatch_fraction"])):
            if v is not None and v == v:
                worst[key] = max(worst[key], float(v))
        if not cmp["ok"] and "first_bad" not in worst:
            worst["first_bad"] = {"tensor": name, **(cmp["first_bad"] or {})}
    if rounded:
        worst["rounded"] = sorted(set(rounded))
    return worst


def _finer_than_dtype(y: torch.Tensor, atol: float, rtol: float) -> float:
    """The share of ``y``'s elements whose tolerance ``atol + rtol * |y|`` is smaller than
    one rounding step of ``y``'s own (half-precision) dtype there: an honest kernel that
    rounds once differently fails on them, whatever float64 says."""
    eps = torch.finfo(y.dtype).eps
    tiny = torch.finfo(y.dtype).smallest_normal * eps  # the subnormals' step
    flat, bad = y.detach().reshape(-1), 0
    for at in range(0, flat.numel(), CHUNK):
        x = flat[at:at + CHUNK].to(torch.float32).abs_()
        _, exp = torch.frexp(x)  # |x| = m * 2**exp, m in [0.5, 1): one step is eps * 2**(exp-1)
        step = torch.ldexp(torch.full_like(x, eps), exp - 1).clamp_min_(tiny)
        bad += int((step > x * rtol + atol).sum())
    return bad / max(1, flat.numel())


def _chunked(got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
             max_frac: float, round_to: torch.dtype | None) -> dict[str, Any]:
    """:func:`sandbox.problem.tensors.compare` over flat chunks of :data:`CHUNK` elements
    (one comparison of the whole tensor makes several float64 copies of it)."""
    if tuple(got.shape) != tuple(ref.shape):
        return {"ok": False, "max_abs": None, "max_rel": None, "mismatch_fraction": 1.0,
                "first_bad": {"why": f"shape {tuple(got.shape)} against {tuple(ref.shape)}"}}
    a, e = got.detach().reshape(-1), ref.detach().reshape(-1)
    n = a.numel()
    bad, max_abs, max_rel, first = 0, None, None, None
    for at in range(0, max(n, 1), CHUNK):
        ea = e[at:at + CHUNK]
        if round_to is not None:
            ea = ea.to(round_to)
        cmp = _compare(a[at:at + CHUNK].to(torch.float64), ea.to(torch.float64), atol, rtol)
        bad += round(cmp.mismatch_fraction * max(1, min(CHUNK, n - at)))
        if cmp.max_abs is not None:
            max_abs = cmp.max_abs if max_abs is None else max(max_abs, cmp.max_abs)
        if cmp.max_rel is not None:
            max_rel = cmp.max_rel if max_rel is None else max(max_rel, cmp.max_rel)
        if first is None and cmp.first_bad is not None and cmp.first_bad.get("index"):
            flat = at + int(cmp.first_bad["index"][0])
            first = {**cmp.first_bad, "index": _unravel(flat, tuple(got.shape))}
    frac = bad / max(1, n)
    return {"ok": frac <= max_frac, "max_abs": max_abs, "max_rel": max_rel,
            "mismatch_fraction": frac, "first_bad": first}


def _compare(a: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> Comparison:
    """:func:`sandbox.problem.tensors.compare`'s verdict on one float64 chunk, the common
    case (every element within tolerance, so none is NaN or infinite) in a few passes;
    any other chunk goes through ``compare`` itself."""
    diff = (a - e).abs_()
    mag = e.abs()
    if bool((diff <= mag * rtol + atol).all()):
        rel = diff / mag.clamp_min_(1e-12)
        return Comparison(True, float(diff.max()) if diff.numel() else None,
                          float(rel.max()) if rel.numel() else None, 0.0, None)
    return compare(a, e, atol, rtol, 1.0)


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat //= max(dim, 1)
    return idx[::-1]


def _output_figures(name: str, t: torch.Tensor, c: Any) -> dict[str, Any]:
    """What the host's quirk report needs of one reference output: constant? within the
    tolerance of zero everywhere (an all-zero output would pass)?

    An all-zero output fails an element iff ``|y| > atol + rtol * |y|``, that is
    ``|y| > atol / (1 - rtol)`` (``rtol < 1``), or ``y`` is NaN: one pass per chunk."""
    code = dtype_code(t.dtype)
    fig: dict[str, Any] = {"name": name, "dtype": code}
    if t.numel() == 0:
        return fig
    atol, rtol = c.tolerance(code)
    bound = atol / (1.0 - rtol) if rtol < 1.0 else math.inf
    flat = t.detach().reshape(-1)
    lo, hi, max_abs, bad = math.inf, -math.inf, 0.0, 0
    for at in range(0, flat.numel(), CHUNK):
        x = flat[at:at + CHUNK]
        if not x.dtype.is_floating_point:
            x = x.to(torch.float64)
        mn, mx = (float(v) for v in torch.aminmax(x))
        mag = x.abs()
        if math.isnan(mn) or math.isnan(mx):  # NaN: never near zero, no extreme
            nan = mag.isnan()
            bad += int(nan.sum())
            mag = mag.masked_fill(nan, 0.0)
            mn = mx = math.nan
        lo, hi = min(lo, mn), max(hi, mx)
        max_abs = max(max_abs, float(mag.max()))
        bad += int((mag > bound).sum())
    fig["max_abs"] = max_abs
    fig["constant"] = flat.numel() > 1 and lo == hi and math.isfinite(lo)  # not a scalar
    if fig["constant"]:
        fig["value"] = lo
    fig["zeros_pass"] = bad / flat.numel() <= c.max_mismatch_fraction
    return fig


def _plain_values(call_data: Any) -> int:
    """How many plain (non-tensor) values the call's argument template holds."""
    template = call_data.get("template") if isinstance(call_data, dict) else None
    count, stack = 0, [template]
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and len(node) == 1:
            (kind, v), = node.items()
            if kind in ("value", "float", "dtype"):
                count += 1
            elif kind in ("tuple", "list"):
                stack.extend(v if isinstance(v, list) else [])
            elif kind == "dict":
                stack.extend(x[1] for x in v if isinstance(x, list) and len(x) == 2)
    return count


def _wide_bytes(slots: list[Slot]) -> int:
    """Bytes of this layout's tensors widened to float64 (what a float64 run adds)."""
    total = 0
    for s in slots:
        dt = DTYPES[s.dtype]
        n = math.prod(s.shape)
        total += n * 8 if dt.is_floating_point else s.nbytes
    return total


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return bool(torch.equal(a.nan_to_num(0.125, 1.5, -1.5), b.nan_to_num(0.125, 1.5, -1.5))
                    and torch.equal(a.isnan(), b.isnan()))
    return bool(torch.equal(a, b))


def _message(e: BaseException) -> str:
    if isinstance(e, StageFailure):
        return e.error.message[:1000]
    if isinstance(e, OSError) and e.errno == errno.EFBIG:  # the memfd buffer's ftruncate
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        return ("the judge's shared buffer for this shape exceeds the sandbox's largest-file "
                f"limit (RLIMIT_FSIZE {soft >> 20} MiB, set from limits.tmpfs_mib): raise "
                "limits.tmpfs_mib")
    return f"{type(e).__name__}: {e}"[:1000]
