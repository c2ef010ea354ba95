"""Diagnostics inside the sandbox: hardware counters (Nsight Compute) and the memory checker
(compute-sanitizer), each wrapping one runner of its own.

Neither ever shares a runner with timing: the ``profile`` judge mode is a separate sandbox
run, and the sanitized correctness stage uses a second runner while the benchmark stage
keeps the ordinary one (opened at compile, never wrapped). Both tools run as the runner, so
what they write under ``/tmp`` is untrusted: read without following links, size-capped,
parsed strictly (:mod:`sandbox.tools.counters`). Counters are advice, never part of a verdict; a
sanitizer finding is a correctness failure, and a sanitizer that could not run leaves the
ordinary correctness stage to decide, with the reason in ``unmeasured``.

The record's ``diagnostics`` (:class:`sandbox.contract.wire.DiagnosticsRecord`) carries a
``profile`` (:class:`~sandbox.contract.wire.ProfileRecord`) or a ``sanitizer``
(:class:`~sandbox.contract.wire.SanitizerRecord`), read on the host by :mod:`grader.diagnostics`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import secrets
import shutil
import stat
import subprocess
import sys
import time
from typing import Any

from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.wire import (
    DiagnosticsRecord,
    ErrorStage,
    FindingRecord,
    KernelRecord,
    ProfileRecord,
    SanitizerRecord,
)
from sandbox.judge.correctness import correctness_stage
from sandbox.judge.device import gpu_fraction
from sandbox.judge.evaluation import Evaluation
from sandbox.judge.sides import Side
from sandbox.launcher import identity, protocol
from sandbox.launcher.proc import RunnerFailure
from sandbox.tools.counters import ncu_refusal, parse_ncu_log, parse_sanitizer_log

MAX_LOG_BYTES = 4 << 20
TOOL_EXIT_WAIT_S = 120.0
_KNOWN_DIRS = {
    "ncu": ["/usr/local/cuda/bin", "/usr/local/cuda-*/bin", "/opt/nvidia/nsight-compute/*"],
    "compute-sanitizer": ["/usr/local/cuda/bin", "/usr/local/cuda-*/bin",
                          "/usr/local/cuda/compute-sanitizer", "/opt/nvidia/compute-sanitizer"],
}
NO_CPU_COUNTERS = ("not measured: the device is the CPU; hardware counters come from Nsight "
                   "Compute on an NVIDIA GPU")
NO_CPU_SANITIZER = ("not run: compute-sanitizer checks CUDA kernels and the device is the CPU; "
                    "the correctness stage ran without it")


def find_tool(name: str, hint: object = None) -> tuple[str | None, str | None]:
    """``(path, None)`` for an executable ``name`` in the sandbox, else ``(None, reason)``.

    ``hint`` is where the host found it (bound read-only at the same path); then PATH,
    ``$CUDA_HOME/bin`` and the usual install folders, newest version first.
    """
    dirs = [os.path.dirname(hint)] if isinstance(hint, str) and os.path.isabs(hint) else []
    dirs += os.environ.get("PATH", "").split(":")
    if os.environ.get("CUDA_HOME"):
        dirs.append(os.path.join(os.environ["CUDA_HOME"], "bin"))
    for pattern in _KNOWN_DIRS.get(name, []):
        dirs += sorted(glob.glob(pattern), reverse=True)
    for d in dirs:
        path = os.path.join(d, name) if d else ""
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK):
            return path, None
    looked = ", ".join(dict.fromkeys(d for d in dirs if d))[:600]
    return None, f"not measured: {name} is not installed in the sandbox (looked in {looked})"


def tool_version(path: str) -> str | None:
    """The tool's one-line version (``Version 2025.3.1.0 ...``), or ``None``."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             env={"PATH": os.environ.get("PATH", ""), "HOME": "/tmp"}).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("Version")]
    return lines[0][:100] if lines else None


def read_capped(path: str, cap: int = MAX_LOG_BYTES) -> tuple[str, bool]:
    """(text, truncated) of a file a runner could have planted: no links, regular files only.

    The tool ran under the runner's uid, so its log is the runner's (mode 0600): it is
    opened and removed with that runner's file system identity (``identity.as_file_owner``).
    """
    try:
        with identity.as_file_owner(path):
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with contextlib.suppress(OSError):
                os.unlink(path)
    except (OSError, identity.IsolationUnavailable):
        return "", False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "", False
        data = os.read(fd, cap + 1)
    finally:
        os.close(fd)
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


def tool_runner(*flags: str) -> tuple[str, ...]:
    """The tail of a prefix: the tool starts :mod:`sandbox.tools.tool_runner`, which reads the
    ordinary runner command line that :class:`RunnerHandle` appends after ``--``."""
    return (sys.executable, "-m", "sandbox.tools.tool_runner", *flags, "--")


def ncu_prefix(ncu: str, metrics: list[str], log: str, skip: int, count: int,
               max_kernels: int) -> tuple[str, ...]:
    return (ncu, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
            "--profile-from-start", "off", "--launch-count", str(max_kernels),
            "--metrics", ",".join(metrics), "--log-file", log,
            *tool_runner("--profile-calls", f"{skip}:{count}"))


def sanitizer_prefix(sanitizer: str, tool: str, log: str) -> tuple[str, ...]:
    env = shutil.which("env") or "/usr/bin/env"
    # The allocator's cache off: each private copy is its own exactly sized cudaMalloc.
    return (env, "PYTORCH_NO_CUDA_MEMORY_CACHING=1", sanitizer, "--tool", tool,
            "--log-file", log, "--print-limit", "20", "--show-backtrace", "no",
            *tool_runner("--private-args"))


def open_wrapped(ev: Evaluation, prefix: tuple[str, ...], stage: ErrorStage) -> Side:
    """Start and load a tool-wrapped runner for the candidate (CUDA, hot cache, no graphs).

    A runner that does not start under the tool is an infrastructure failure (nothing of
    the candidate has run); one that fails to load the candidate is the candidate's.
    """
    assert ev.req.candidate is not None
    bench = dataclasses.replace(ev.task.benchmark, cache="hot", flush_mib=None, cuda_graph=False)
    try:
        side = Side(ev.req.candidate, ev.task.entrypoint, "cuda", ev.nbytes, bench,
                    gpu_fraction(ev.dev, ev.req.limits.gpu_memory_mib), ev.left(ev.run_deadline), audit_ops=ev.task.audit_ops,
                    prefix=prefix)
    except RunnerFailure as e:
        raise infrastructure("runner_setup_failed", "the runner did not start under the tool: "
                             f"{e.message}", e.detail) from None
    ev.sides.append(side)
    try:
        side.runner.request({"op": "load"}, ev.left(ev.run_deadline), "compile_timeout")
    except RunnerFailure as e:
        ev.close_side(side)
        raise ev.failure(stage, e) from None
    return side


def finish(ev: Evaluation, side: Side) -> None:
    """Let the runner exit and the tool write its log, then close (kills what is left)."""
    with contextlib.suppress(protocol.ChannelClosed, OSError):
        protocol.send_json(side.runner.wfd, {"op": "exit"})
    with contextlib.suppress(subprocess.TimeoutExpired):
        side.runner.proc.wait(timeout=max(1.0, min(ev.left(ev.run_deadline), TOOL_EXIT_WAIT_S)))
    ev.close_side(side)


# --- profile mode ---------------------------------------------------------------------


def run_profile(ev: Evaluation) -> None:
    """Judge mode ``profile``: counters of the candidate's launches at the first tune shape.

    The record's ``diagnostics.profile`` is written whatever happens, failures included.
    """
    cfg = ev.req.profile
    if cfg is None:
        raise infrastructure("bad_request", "profile mode without a profile request")
    prof: dict[str, Any] = {"tool": "ncu", "version": None, "path": None, "kernels": [],
                            "calls": cfg.profiled_calls, "skip": cfg.warmup_calls,
                            "dims": dict(ev.task.tune[0]), "wall_s": None, "unmeasured": None,
                            "messages": [], "dropped": 0, "truncated": False}
    try:
        _profile(ev, prof, cfg.ncu, list(cfg.metrics), cfg.max_kernels)
    finally:
        ev.diagnostics = DiagnosticsRecord(profile=ProfileRecord(**{
            **prof, "kernels": tuple(KernelRecord(**k) for k in prof["kernels"]),
            "messages": tuple(prof["messages"])}))


def _profile(ev: Evaluation, prof: dict[str, Any], hint: str | None, metrics: list[str],
             max_kernels: int) -> None:
    ev.stage = "compile"
    ncu, why = (None, NO_CPU_COUNTERS) if ev.dev != "cuda" else find_tool("ncu", hint)
    if ncu is None:
        prof["unmeasured"] = why
        _compile_only(ev)  # still say whether the candidate builds and runs
        return
    prof["path"], prof["version"] = ncu, tool_version(ncu)
    log = f"/tmp/kg-ncu-{secrets.token_hex(8)}.csv"
    skip, count = int(prof["skip"]), int(prof["calls"])
    t0 = time.monotonic()
    try:
        side = open_wrapped(ev, ncu_prefix(ncu, metrics, log, skip, count, max_kernels), "compile")
    except StageFailure as e:
        text, _ = read_capped(log)
        refusal = ncu_refusal(text)
        if e.error.origin == "candidate" and refusal is None:
            prof["unmeasured"] = (f"not measured: the candidate failed under the profiler "
                                  f"({e.error.stage}: {e.error.code})")
            raise
        prof["unmeasured"] = refusal or f"not measured: the runner did not start under ncu ({e})"
        prof["wall_s"] = round(time.monotonic() - t0, 3)
        _compile_only(ev)
        return
    slots = ev.slots(ev.task.tune[0])
    try:
        for i in range(skip + count):
            ev.stage = "compile" if i == 0 else "correctness"
            ev.timed(side, slots, True, ev.stage)
    finally:
        finish(ev, side)
        text, prof["truncated"] = read_capped(log)
        parsed = parse_ncu_log(text, metrics)
        prof.update(kernels=parsed["kernels"], messages=parsed["messages"], dropped=parsed["dropped"],
                    wall_s=round(time.monotonic() - t0, 3))
        if not parsed["kernels"]:
            prof["unmeasured"] = ncu_refusal(text) or (
                "not measured: ncu profiled no kernel in the profiled calls (the candidate "
                "launched none on the GPU, or ncu wrote no report)")


def _compile_only(ev: Evaluation) -> None:
    """Open the ordinary runner and launch once: the profile still reports a broken build."""
    assert ev.req.candidate is not None
    side = ev.open_side(ev.req.candidate, "compile")
    ev.timed(side, ev.slots(ev.task.tune[0]), True, "compile")


# --- sanitized correctness ------------------------------------------------------------


def sanitized_correctness(ev: Evaluation, plain: Side) -> None:
    """The correctness stage under compute-sanitizer (``memcheck`` or ``racecheck``).

    Findings are a correctness failure (``out_of_bounds_access`` / ``shared_memory_race``,
    the candidate's) whatever the values were. Where the tool cannot run (CPU, not
    installed, refused by the runtime), the ordinary correctness stage runs on ``plain``,
    with a warning and the reason recorded: never an error.

    memcheck checks every shape and seed (a tail is where an access goes out of bounds).
    racecheck tracks every shared-memory access of every block on the host, which on a
    large shape outgrows the sandbox's memory (seen on an H200: a 4096x4096 transpose was
    killed at 8 GiB after 120 s): it checks one call, on the smallest shape of the task
    (races are per block, and that shape has partial tiles too), then the ordinary
    correctness stage decides the values on ``plain``.
    """
    req = ev.req.sanitize
    assert req is not None
    rec: dict[str, Any] = {"tool": req.tool, "path": None, "ran": False, "wall_s": None,
                           "findings": [], "error_count": None, "more": 0, "tool_errors": [],
                           "unmeasured": None}
    try:
        _sanitize(ev, plain, req.tool, req.path, rec)
    finally:
        ev.diagnostics = DiagnosticsRecord(sanitizer=SanitizerRecord(**{
            **rec, "findings": tuple(_finding(f) for f in rec["findings"]),
            "tool_errors": tuple(rec["tool_errors"])}))


def _sanitize(ev: Evaluation, plain: Side, tool: str, hint: str | None, rec: dict[str, Any]) -> None:

    ev.stage = "correctness"
    path, why = (None, NO_CPU_SANITIZER) if ev.dev != "cuda" else find_tool("compute-sanitizer", hint)
    if path is None:
        return _fallback(ev, plain, rec, why or "not run")
    rec["path"] = path
    log = f"/tmp/kg-sanitizer-{secrets.token_hex(8)}.txt"
    t0 = time.monotonic()
    err: StageFailure | None = None
    side: Side | None = None
    try:
        side = open_wrapped(ev, sanitizer_prefix(path, tool, log), "correctness")
    except StageFailure as e:
        err = e
    if side is not None:
        try:
            if tool == "racecheck":
                _one_small_call(ev, side)
            else:
                correctness_stage(ev, side)
        except StageFailure as e:
            err = e
        finally:
            finish(ev, side)
    text, _ = read_capped(log)
    parsed = parse_sanitizer_log(text)
    rec.update(ran=parsed["completed"], wall_s=round(time.monotonic() - t0, 3),
               findings=parsed["findings"], error_count=parsed["error_count"], more=parsed["more"],
               tool_errors=parsed["tool_errors"])
    if parsed["findings"]:
        raise _finding_error(tool, parsed, err)
    if side is None or parsed["tool_errors"]:
        # The candidate loaded in the ordinary runner: a failure only under the tool is the
        # tool's (or the runtime's); the ordinary stage decides instead.
        reason = "; ".join(parsed["tool_errors"]) or (err.error.message[:300] if err else "")
        return _fallback(ev, plain, rec, f"not run: compute-sanitizer could not check the "
                                         f"candidate here ({reason})")
    if err is not None:
        raise err
    if not parsed["completed"]:
        rec["unmeasured"] = "compute-sanitizer wrote no summary: the check may be incomplete"
        ev.warnings.append(f"sanitize: {rec['unmeasured']}")
    if tool == "racecheck":
        ev.correctness.clear()
        correctness_stage(ev, plain)
    return None


def _one_small_call(ev: Evaluation, side: Side) -> None:
    """One checked call on the task's smallest shape (by bytes), first seed."""
    shapes = [*ev.task.tune, *ev.task.hidden]
    dims = min(shapes, key=lambda d: sum(s.nbytes for s in ev.slots(d)))
    slots = ev.slots(dims)
    inputs = ev.inputs(slots, ev.task.correctness.seeds[0])
    ev.call(side, slots, inputs, stage="correctness", deadline=ev.run_deadline,
            expected=ev.reference(slots, inputs),
            where={"dims": dict(dims), "phase": "racecheck"})


def _fallback(ev: Evaluation, plain: Side, rec: dict[str, Any], why: str) -> None:

    rec["unmeasured"] = why
    ev.warnings.append(f"sanitize ({rec['tool']}): {why}")
    ev.correctness.clear()  # nothing measured under the tool counts: the ordinary stage decides
    correctness_stage(ev, plain)


def _finding(f: dict[str, Any]) -> FindingRecord:
    def tup(v: Any) -> tuple[int, ...] | None:
        return tuple(v) if v is not None else None

    return FindingRecord(**{**f, "thread": tup(f.get("thread")), "block": tup(f.get("block"))})


def _finding_error(tool: str, parsed: dict[str, Any], err: StageFailure | None) -> StageFailure:
    f = parsed["findings"][0]
    total = max(int(parsed["error_count"] or 0), len(parsed["findings"]) + int(parsed["more"]))
    where = f"kernel {f['kernel'] or '?'}" + (f" ({f['location']})" if f["location"] else "")
    if f["kind"] == "race":
        code = "shared_memory_race"
        what = f"a shared-memory race ({f['access']}) in {where}"
    else:
        code = "out_of_bounds_access"
        access = f"{f['access'] or 'access'} of {f['size']} bytes" if f["size"] else f["text"]
        what = f"an invalid {f['space'] or ''} {access} in {where}".replace("  ", " ")
        if f["thread"] and f["block"]:
            what += f" by thread {tuple(f['thread'])} in block {tuple(f['block'])}"
        near = f.get("nearest")
        if f["address"] and near:
            what += (f": address {f['address']} is {near['distance_bytes']} bytes {near['side']} "
                     f"an allocation of {near['allocation_bytes']} bytes")
        elif f["address"]:
            what += f": address {f['address']} is {'misaligned' if f['kind'] == 'misaligned' else 'out of bounds'}"
    message = f"compute-sanitizer ({tool}) found {total} error(s); first: {what}"
    detail = {"tool": tool, "findings": parsed["findings"][:5], "error_count": parsed["error_count"],
              "other_error": dataclasses.asdict(err.error) if err is not None else None}
    return StageFailure("correctness", code, message, origin="candidate", detail=detail)
