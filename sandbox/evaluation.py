"""The stages of one evaluation, run by the judge: compile, correctness, benchmark, accept."""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import random
import time
from typing import Any

import torch

from sandbox import stats
from sandbox.device import device_environment
from sandbox.escape import escaped_time
from sandbox.proc import RunnerFailure, RunnerHandle
from sandbox.tensors import DTYPES, Slot, compare, layout, make_input, poison, total_bytes, view

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class StageError(Exception):
    def __init__(self, stage: str, code: str, message: str, line: int | None = None,
                 detail: dict[str, Any] | None = None):
        super().__init__(message)
        self.error = {"stage": stage, "code": code, "message": message[:4000], "line": line,
                      "detail": detail or {}}


class Side:
    """One untrusted module: its own runner process and its own shared buffer."""

    def __init__(self, path: str, entry: str, device: str, nbytes: int, bench: dict[str, Any],
                 gpu_fraction: float | None, timeout: float):
        self.path = path
        self.device = device
        msg: dict[str, Any] = {"op": "setup", "cache": bench.get("cache", "cold"),
                               "flush_mib": bench.get("flush_mib"),
                               "allow_tf32": bool(bench.get("allow_tf32", False)),
                               "cuda_graph": bool(bench.get("cuda_graph", False))}
        if device == "cpu":
            # A sealed memfd: the runner can write the bytes but cannot shrink the file
            # under the judge's mapping (which would SIGBUS the judge).
            fd = os.memfd_create("kgrader-buffer", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            self._mm = mmap.mmap(fd, nbytes)
            self.base = torch.frombuffer(self._mm, dtype=torch.uint8)
            os.set_inheritable(fd, True)
            self.runner = RunnerHandle(path, entry, device, pass_fds=(fd,))
            os.close(fd)
            self.runner.send({**msg, "memfd": fd, "nbytes": nbytes})
        else:
            self.base = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            self.runner = RunnerHandle(path, entry, device)
            self.runner.send_forking({**msg, "tensor": self.base, "gpu_fraction": gpu_fraction})
        self.bases = [self.base]
        setup = self.runner.receive(timeout, "compile_timeout")
        self.flush_bytes = int(setup.get("flush_bytes", 0))

    def map_other(self, other: Side, timeout: float) -> None:
        """Let this runner also address ``other``'s buffer (CUDA only).

        Paired timing then swaps buffers between the sides every other pair, so where a
        buffer happens to sit in memory cannot favour one side. A runner that writes into
        the other side's buffer only makes that side fail its checks: the acceptance fails
        closed.
        """
        if self.device != "cuda":
            return
        self.runner.send_forking({"op": "map", "tensor": other.base})
        self.runner.receive(timeout, "compile_timeout")
        self.bases.append(other.base)

    def views(self, slots: list[Slot], buf: int = 0) -> dict[str, torch.Tensor]:
        base = self.bases[buf] if buf < len(self.bases) else self.base
        return {s.name: view(base, s) for s in slots}

    def close(self) -> None:
        self.runner.close()


class Evaluation:
    def __init__(self, secret: dict[str, Any]):
        self.s = secret
        self.task: dict[str, Any] = secret["task"]
        self.device: str = secret["device"]
        self.dev = "cuda" if self.device == "cuda" else "cpu"
        self.stages: list[str] = secret.get("stages") or ["compile", "correctness", "benchmark"]
        self.shape_kinds: list[str] = secret.get("shape_kinds") or ["tune", "hidden"]
        self.errors: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.stage: str | None = None
        self.result: dict[str, Any] = {}
        self.sides: list[Side] = []
        self.rng = random.Random(int(secret.get("phase_seed", 0)))
        lim = secret["limits"]
        self.t0 = time.monotonic()
        self.compile_deadline = self.t0 + float(lim["compile_s"])
        self.run_deadline = self.compile_deadline + float(lim["run_s"])
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        ns: dict[str, Any] = {"__name__": "kgrader_reference"}
        exec(compile(secret["reference"], "reference.py", "exec"), ns)  # trusted task code
        self.ref = ns[self.task.get("entrypoint", "launch")]
        tensors = self.task["tensors"]
        self.specs = {t["name"]: t for t in tensors}
        all_dims = self.task["shapes"]["tune"] + self.task["shapes"]["hidden"]
        self.base_threads = -1
        self.nbytes = max(total_bytes(layout(tensors, d)) for d in all_dims)

    def nvml(self) -> tuple[Any, str]:
        """NVML for clocks/power/throttle per block, or the reason it is unavailable."""
        if self.dev != "cuda":
            return None, "no NVML on the CPU"
        from sandbox.nvml import Nvml

        try:
            return Nvml.open(str(getattr(torch.cuda.get_device_properties(0), "uuid", "")))
        except Exception as e:  # a missing symbol in an old driver: report, never fail the run
            return None, f"NVML error: {e}"

    def gpu_fraction(self) -> float | None:
        """Per-runner share of the device for ``limits.gpu_memory_mib`` (torch's allocator cap)."""
        mib = self.s["limits"].get("gpu_memory_mib")
        if self.dev != "cuda" or not mib:
            return None
        total = torch.cuda.get_device_properties(0).total_memory
        return min(1.0, (int(mib) << 20) / total)

    # ---- plumbing -------------------------------------------------------------------
    def left(self, deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def _fail(self, stage: str, e: RunnerFailure) -> StageError:
        if stage == "compile" and e.code == "timeout":
            e.code = "compile_timeout"
        return StageError(stage, e.code, e.message, e.line, e.detail)

    def _gen(self, seed: int) -> torch.Generator:
        g = torch.Generator(device=self.dev)
        g.manual_seed(seed)
        return g

    def _inputs(self, slots: list[Slot], seed: int) -> dict[str, torch.Tensor]:
        g = self._gen(seed)
        return {s.name: make_input(self.specs[s.name], s.shape, self.dev, g)
                for s in slots if s.role == "input"}

    def _reference(self, slots: list[Slot], inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        outs = {s.name: torch.empty(s.shape, dtype=DTYPES[s.dtype], device=self.dev)
                for s in slots if s.role == "output"}
        for o in outs.values():
            poison(o)
        args = [inputs[s.name].clone() if s.role == "input" else outs[s.name] for s in slots]
        self.ref(*args)
        if self.dev == "cuda":
            torch.cuda.synchronize()
        return outs

    def call(self, side: Side, slots: list[Slot], inputs: dict[str, torch.Tensor], *,
             stage: str, deadline: float, expected: dict[str, torch.Tensor] | None,
             where: dict[str, Any], buf: int = 0) -> dict[str, Any]:
        """Copy inputs in, poison outputs, launch, then check what the runner left."""
        buf = buf if buf < len(side.bases) else 0
        views = side.views(slots, buf)
        for s in slots:
            if s.role == "input":
                views[s.name].copy_(inputs[s.name])
            else:
                poison(views[s.name])
        if self.dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            reply = side.runner.request({"op": "call", "args": [s.wire() for s in slots], "buf": buf},
                                        self.left(deadline))
        except RunnerFailure as e:
            raise self._fail(stage, e) from None
        judge_ms = (time.perf_counter() - t0) * 1e3
        if stage in ("benchmark", "accept") and (reply.get("streams") or reply.get("stream_ok") is False):
            raise StageError(stage, "side_stream",
                             f"the candidate created {reply.get('streams')} CUDA stream(s) or left the "
                             "timed stream: its work would escape the timed events")
        if reply.get("flags_ok") is False:
            raise StageError(stage, "precision_flags_changed",
                             "the candidate changed the pinned TF32 / precision flags")
        for s in slots:
            if s.role == "input" and not torch.equal(views[s.name], inputs[s.name]):
                raise StageError(stage, "input_mutated",
                                 f"input {s.name!r} was modified by the candidate", detail=where)
        if expected is not None:
            self._check(views, expected, stage, where)
        ms, wall = reply.get("ms"), reply.get("wall_ms")
        if not isinstance(ms, int | float) or not isinstance(wall, int | float) \
                or not math.isfinite(ms) or ms < 0 or ms > judge_ms * 1.05 + 0.05:
            raise StageError(stage, "timing_inconsistent",
                             f"runner claimed {ms!r} ms but the judge saw {judge_ms:.3f} ms")
        tail = reply.get("tail_ms", 0.0)
        return {"ms": float(ms), "wall_ms": float(wall), "judge_ms": judge_ms,
                "tail_ms": float(tail) if isinstance(tail, int | float) and math.isfinite(tail) else 0.0,
                "threads": int(reply.get("threads", -1))}

    def _check(self, views: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
               stage: str, where: dict[str, Any]) -> None:
        c = self.task["correctness"]
        for name, exp in expected.items():
            cmp = compare(views[name], exp, float(c["atol"]), float(c["rtol"]),
                          float(c.get("max_mismatch_fraction", 0.0)))
            self._track(cmp.max_abs, cmp.max_rel, cmp.mismatch_fraction)
            if not cmp.ok:
                fb = cmp.first_bad or {}
                untouched = fb.get("actual") is None and fb.get("expected") is not None
                what = "left unwritten (still poisoned)" if untouched else "wrong"
                msg = (f"output {name!r} {what} at index {fb.get('index')} "
                       f"for dims {where.get('dims')}: expected {fb.get('expected')}, got "
                       f"{fb.get('actual') if not untouched else 'NaN/poison'}; "
                       f"{cmp.mismatch_fraction:.2%} of elements mismatch")
                bad = {"tensor": name, "index": fb.get("index", []), "expected": fb.get("expected"),
                       "actual": fb.get("actual"), "dims": where.get("dims", {}),
                       "seed": where.get("seed"), "shape_kind": where.get("shape_kind"),
                       "phase": where.get("phase", stage)}
                self.result.setdefault("correctness", {})["first_bad"] = bad
                raise StageError(stage, "wrong_values" if not untouched else "output_untouched",
                                 msg, detail={"first_bad": bad})

    def _track(self, max_abs: float | None, max_rel: float | None, frac: float) -> None:
        c = self.result.setdefault("correctness", {})
        for key, v in (("max_abs_error", max_abs), ("max_rel_error", max_rel),
                       ("mismatch_fraction", frac)):
            if v is not None and math.isfinite(v):
                c[key] = max(float(c.get(key) or 0.0), v)

    # ---- stages ---------------------------------------------------------------------
    def run(self) -> None:
        self.stage = "compile"
        cand = self._open_side(self.s["candidate"], "compile")
        self.sides.append(cand)
        first = self.task["shapes"]["tune"][0]
        slots = layout(self.task["tensors"], first)
        seed0 = int(self.task["correctness"]["seeds"][0])
        inputs = self._inputs(slots, seed0)
        self.call(cand, slots, inputs, stage="compile", deadline=self.compile_deadline,
                  expected=None, where={"dims": first, "phase": "compile"})
        self.result["compile"] = {"s": round(time.monotonic() - self.t0, 3)}
        # run_s bounds the run stage on its own: unused compile time does not carry over.
        self.run_deadline = time.monotonic() + float(self.s["limits"]["run_s"])
        if "correctness" in self.stages:
            self.stage = "correctness"
            if self.s.get("sanitize"):  # under compute-sanitizer, in a runner of its own
                from sandbox.profiling import sanitized_correctness

                sanitized_correctness(self, cand)
            else:
                self.correctness(cand)
        if "benchmark" in self.stages:
            self.stage = "benchmark"
            self.result["timing"] = self.benchmark(cand, "candidate")
        if self.s.get("current"):
            self.stage = "accept"
            from sandbox.acceptance import run_acceptance

            self.result["acceptance"] = run_acceptance(self, cand)

    def _open_side(self, path: str, stage: str) -> Side:
        try:
            side = Side(path, self.task.get("entrypoint", "launch"), self.dev, self.nbytes,
                        self.task.get("benchmark", {}), self.gpu_fraction(),
                        self.left(self.compile_deadline))
        except RunnerFailure as e:
            # Nothing of the candidate has run yet: the harness itself failed to start.
            raise StageError("sandbox", "runner_setup_failed",
                             f"the runner harness failed before loading the candidate: {e.message}",
                             detail=e.detail) from None
        try:
            reply = side.runner.request({"op": "load"}, self.left(self.compile_deadline),
                                        "compile_timeout")
        except RunnerFailure as e:
            raise self._fail(stage, e) from None
        self.base_threads = int(reply.get("threads", -1))
        return side

    def correctness(self, side: Side) -> None:
        c = self.task["correctness"]
        checks, shapes = 0, []
        for kind in self.shape_kinds:
            for i, dims in enumerate(self.task["shapes"][kind]):
                slots = layout(self.task["tensors"], dims)
                for seed in c["seeds"]:
                    mixed = int(seed) * 1_000_003 + i * 7919 + (0 if kind == "tune" else 104_729)
                    inputs = self._inputs(slots, mixed)
                    expected = self._reference(slots, inputs)
                    where = {"dims": dims, "seed": int(seed), "shape_kind": kind, "phase": "correctness"}
                    self.call(side, slots, inputs, stage="correctness", deadline=self.run_deadline,
                              expected=expected, where=where)
                    checks += 1
                shapes.append(dims)
        self.result.setdefault("correctness", {}).update(
            {"passed": True, "checks": checks, "shapes_checked": shapes, "seeds": len(c["seeds"])})

    def timed(self, side: Side, slots: list[Slot], check: bool, stage: str, seed: int | None = None,
              inputs: dict[str, torch.Tensor] | None = None, buf: int = 0) -> dict[str, Any]:
        """One timed call on fresh inputs (from the secret phase seed), optionally checked."""
        if inputs is None:
            inputs = self._inputs(slots, seed if seed is not None else self.rng.getrandbits(62))
        expected = self._reference(slots, inputs) if check else None
        dims = {k: v for k, v in self.task["shapes"]["tune"][0].items()}
        return self.call(side, slots, inputs, stage=stage, deadline=self.run_deadline,
                         expected=expected, where={"dims": dims, "phase": stage}, buf=buf)

    def noop(self, side: Side) -> tuple[float, float]:
        """An empty timed call: (round trip minus its event time, its idle tail)."""
        t0 = time.perf_counter()
        try:
            r = side.runner.request({"op": "call", "noop": True}, self.left(self.run_deadline))
        except RunnerFailure as e:
            raise self._fail("benchmark", e) from None
        return (time.perf_counter() - t0) * 1e3 - float(r.get("ms", 0.0)), float(r.get("tail_ms", 0.0))

    def benchmark(self, side: Side, who: str) -> dict[str, Any]:
        b = self.task.get("benchmark", {})
        c = self.task["correctness"]
        dims = self.task["shapes"]["tune"][0]
        slots = layout(self.task["tensors"], dims)
        frac = float(c.get("timed_check_fraction", 1.0))
        t_start = time.monotonic()
        n = 0
        while n < int(b.get("warmup", 10)) or (time.monotonic() - t_start) * 1e3 < float(b.get("warmup_ms", 0)):
            self.timed(side, slots, True, "benchmark")
            n += 1
        base_threads = side.runner.request({"op": "call", "noop": True}, self.left(self.run_deadline))["threads"]
        samples, walls, noops, tails, noop_tails, checked = [], [], [], [], [], 0
        nvml, why_not = self.nvml()
        blocks: list[dict[str, Any]] = []
        reps = int(b.get("reps", 5))
        for i in range(int(b.get("samples", 25)) * reps):
            if nvml is not None and i % reps == 0:
                blocks.append({"first_sample": i, **nvml.sample()})
            check = frac >= 1.0 or self.rng.random() < frac
            r = self.timed(side, slots, check, "benchmark")
            checked += int(check)
            if r["threads"] > base_threads >= 0:
                raise StageError("benchmark", "background_thread",
                                 f"the candidate left {r['threads'] - base_threads} extra thread(s) "
                                 "running after returning: work may escape the timed region")
            samples.append(r["ms"])
            walls.append(r["judge_ms"])
            tails.append(r["tail_ms"])
            over, tail = self.noop(side)  # interleaved, so load drifts hit both alike
            noops.append(over)
            noop_tails.append(tail)
        out: dict[str, Any] = dict(stats.summarize(samples))
        escape = escaped_time(samples, walls, noops, self.dev, tails, noop_tails)
        out.update({"device_state": blocks, "device_state_unmeasured": why_not or None})
        out.update({"samples_ms": samples, "judge_ms": walls, "flagged_samples": escape["flagged"],
                    "overhead_budget_ms": escape["budget_ms"], "checked_calls": checked,
                    "check_policy": "all" if frac >= 1.0 else f"random {frac:.0%} (judge-chosen)",
                    "cache": b.get("cache", "cold"), "flush_bytes": side.flush_bytes, "dims": dims,
                    "clock": "cuda_event" if self.dev == "cuda" else "perf_counter"})
        if escape["escaped"]:
            raise StageError("benchmark", "work_escaped_timing",
                             f"the judge's clock saw {escape['hidden_ms']:.4f} ms per call that the "
                             f"timed region did not (budget {escape['budget_ms']:.4f} ms): work "
                             "escaped the timed stream (side stream, thread, deferred work) or the "
                             "timer was tampered with", detail=escape)
        floor = self.s.get("floor_ms")
        if isinstance(floor, int | float) and floor > 0 and out["median"] < floor:
            raise StageError("benchmark", "below_roofline_floor",
                             f"median {out['median']:.6f} ms is below the physical floor "
                             f"{floor:.6f} ms: an anomaly, not a record", detail={"floor_ms": floor})
        return out

    # ---- result ---------------------------------------------------------------------
    def environment(self) -> dict[str, Any]:
        return device_environment(self.device)

    def payload(self) -> dict[str, Any]:
        return {"stage": self.stage, "errors": self.errors, "warnings": self.warnings,
                "device": self.device, "environment": self.environment(), **self.result}

    def shutdown(self) -> None:
        for side in self.sides:
            side.close()
