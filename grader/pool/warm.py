"""One warm sandbox: started before its candidate exists, used for one evaluation, destroyed.

At start (:class:`WarmSandbox`), on a thread of its own, everything of an evaluation that
does not depend on the candidate is done as :func:`grader.evaluate.evaluate` does it: the
task's limits, a generated task's shape draw, the device and backend, the roofline floor,
and a staged folder whose secret request (fresh HMAC key, fresh phase seed) the judge
reads and deletes first thing, exactly as in a cold run. The request is ``warm`` and
``gated``: ``/kg/in`` is empty, and the judge starts its runners without their modules,
imports torch and its stage modules, waits until everything is quiet and then blocks at
its gate (:class:`grader.pool.turn.WarmTurn`).

:meth:`WarmSandbox.evaluate` scans the candidate, writes the sources into ``/kg/in``
(0400, the judge's uid, as :func:`grader.judgecall.seal_inputs` seals them), opens the
gate and reads the record as a cold evaluation does. Nothing of a sandbox is reused: one
evaluation, then the whole tree is killed and its folder removed; a second call is refused.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

from grader import builds as build_cache
from grader.backends.base import SandboxBackend
from grader.backends.cancel import watch
from grader.backends.gate import MeasureGate
from grader.backends.progress import JudgeProgress
from grader.backends.select import select_backend
from grader.errors import InfrastructureError, UsageError
from grader.evaluate import EvalRequest, collect, frame_phases, judge_request, screen, sources
from grader.judgecall import JudgeRun, discard, launch, resolve_device, seal_inputs, stage
from grader.logs import get_logger, relay
from grader.measure.floors import floor_ms
from grader.pool.turn import WarmTurn
from grader.report.model import Report
from grader.shapes import draw_shapes
from sandbox.contract import wire

log = get_logger("kgrader.pool")

# What a request must share with the pool's template: everything the judge's request (read
# at the sandbox's start) or the sandbox itself was made from. The candidate, the current
# best's text, the scan's policy and whether to keep the folder may differ per request.
TEMPLATE_FIELDS = frozenset({
    "task", "reference", "current_trusted", "candidate_trusted", "limits", "backend",
    "device", "gpu_ids", "stages", "shape_kinds", "peaks", "sanitize", "shape_seed",
    "build_cache"})


def template_key(req: EvalRequest) -> str:
    """Requests with equal keys can be graded by one pool's sandboxes."""
    fields = req.model_dump(mode="json", include=set(TEMPLATE_FIELDS))
    fields["has_current"] = req.current is not None
    return repr(sorted(fields.items()))


class WarmSandbox:
    """See the module docstring. ``start_s``: how long it may take to become ready;
    ``idle_s``: how long it may then wait unused before it is discarded."""

    def __init__(self, template: EvalRequest, *, gate: MeasureGate | None = None,
                 start_s: float | None = None, idle_s: float = 300.0,
                 backend: SandboxBackend | None = None) -> None:
        self.key = template_key(template)
        limits = template.effective_limits()
        spec = template.task.model_copy(update={"limits": limits})
        self.spec, self.shapes = draw_shapes(spec, template.shape_seed)
        self.limits, self.gpu_ids = limits, template.gpu_ids
        self.device = resolve_device(template.device)
        self.backend = backend or select_backend(template.backend, self.device)
        floor = self.spec.roofline_floor_ms if self.spec.roofline_floor_ms is not None else \
            floor_ms(self.spec, self.device, template.peaks)
        request = dataclasses.replace(
            judge_request(template.model_copy(update={"task": self.spec}), self.device, floor),
            warm=True)
        self._cancel = threading.Event()  # set by the request's own (a cancelled job)
        self.builds = request.builds  # each source's kept builds (grader.builds)
        self._build_keys: dict[str, str] = {}
        self.staged = stage(request, {}, limits, work_dir=template.work_dir,
                            prefix="kgrader-warm-", gated=True)
        self.turn = WarmTurn(self.staged.out_dir / wire.GATE_NAME, gate,
                             start_s=start_s if start_s is not None else limits.compile_s + 60,
                             idle_s=idle_s)
        # The judge's live steps, read from its start; they reach the evaluating thread's
        # step listeners once an evaluation takes this sandbox (grader.backends.progress).
        self.progress = JudgeProgress.open(self.staged.out_dir, self.staged.key)
        self.run: JudgeRun | None = None
        self.error: BaseException | None = None
        self.ended = threading.Event()
        self.created = time.monotonic()
        self._used = False
        self._use_lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, daemon=True,
                                        name=f"kgrader-warm-{self.staged.root.name}")
        self._thread.start()

    # ---- life -----------------------------------------------------------------------
    def _supervise(self) -> None:
        try:
            self.run = launch(self.staged, self.backend, self.limits, self.device,
                              gpu_ids=self.gpu_ids, gate=self.turn, progress=self.progress,
                              cancel=self._cancel)
        except BaseException as e:  # reported by evaluate(), or logged by the pool
            self.error = e
        finally:
            if self.progress is not None:
                self.progress.close()  # the sandbox is gone: what it told is read
            if self.turn.state != "taken":  # never granted: nothing to read, nothing kept
                discard(self.staged)
                log.info("warm_discarded", folder=self.staged.root.name, why=self.turn.why,
                         error=repr(self.error) if self.error else None)
            self.ended.set()

    @property
    def ready(self) -> bool:
        return self.turn.state == "ready" and not self.ended.is_set()

    def claim(self) -> bool:
        """Reserve this sandbox for one evaluation (the pool's take); False if it cannot be."""
        return self.turn.claim()

    def discard(self, why: str = "discarded by its pool") -> None:
        """Kill it without an evaluation (its folder goes with it)."""
        self.turn.discard(why)

    def wait_ended(self, timeout: float | None = None) -> bool:
        return self.ended.wait(timeout)

    def stderr_tail(self) -> str:
        if self.run is None:
            return repr(self.error) if self.error else ""
        return self.run.outcome.stderr[-800:].decode("utf-8", "replace")

    # ---- the one evaluation -----------------------------------------------------------
    def evaluate(self, req: EvalRequest) -> Report:
        """Grade ``req`` in this sandbox, once. Raises :class:`UsageError` when the sandbox
        was used already or ``req`` does not match its template, and
        :class:`InfrastructureError` when it is not warm (still starting, expired, dead)."""
        with self._use_lock:
            if self._used:
                raise UsageError("this warm sandbox has been used: each one grades one "
                                 "evaluation and is destroyed")
            self._used = True
        if template_key(req) != self.key:
            self.discard("given a request of another template")
            raise UsageError("the request does not match the pool's template (task, limits, "
                             "device, stages and the other fields of TEMPLATE_FIELDS)")
        if self.turn.state != "taken" and not self.claim():
            self.discard("not ready when used")
            raise InfrastructureError(f"the warm sandbox is not ready ({self.turn.state}"
                                      f"{': ' + self.turn.why if self.turn.why else ''})")
        try:
            report, scan_s = screen(req, self.spec)
        except BaseException:
            self.discard("its request was refused")
            raise
        report.shapes = self.shapes
        if report.errors:  # denied by the scan: no candidate code reaches the sandbox
            self.discard("its candidate was denied by the scan")
            return report
        report.stage, report.device = "sandbox", self.device
        launched = time.time()
        try:
            self._stage_sources(req)
        except BaseException:
            self.discard("its sources could not be staged")
            raise
        if self.progress is not None:  # its steps from the grant on are this caller's
            self.progress.sink = relay()
        self.turn.staged()
        end_watch = watch(req.cancel, self._cancel.set)  # a cancelled job kills this sandbox
        try:
            self._thread.join()
        finally:
            end_watch()
        try:
            if self.run is None:
                raise InfrastructureError(f"the warm sandbox did not run: {self.error!r}")
            report = collect(report, self.spec, self.backend, self.run.outcome, self.staged,
                             self.limits)
            if report.sandbox is not None:
                report.sandbox.phases = frame_phases(report.sandbox.phases, launched,
                                                     time.time(), scan_s)
                report.sandbox.phases["warm_idle"] = round(self._idle_s(), 4)
            build_cache.keep(self.staged.out_dir, self._build_keys, build_cache.cache_root())
            return report
        finally:
            discard(self.staged, keep=req.keep)

    def _idle_s(self) -> float:
        ready = self.turn.ready_at
        granted = self.turn.granted_at
        return max(0.0, granted - ready) if ready is not None and granted is not None else 0.0

    def _stage_sources(self, req: EvalRequest) -> None:
        """The sources into ``in/``: created exclusively, never through a link, then sealed
        for the judge's uid alone (as a cold evaluation stages them)."""
        in_dir: Path = self.staged.in_dir
        files = sources(req)
        if self.builds:
            self._build_keys = build_cache.plan(
                files, build_cache.environment(self.backend.name, self.device))
            build_cache.stage(in_dir, self._build_keys, build_cache.cache_root())
        for name, text in files.items():
            fd = os.open(in_dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         0o400)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        seal_inputs(in_dir)

    def describe(self) -> dict[str, Any]:
        return {"folder": self.staged.root.name, "state": self.turn.state,
                "age_s": round(time.monotonic() - self.created, 1), "ended": self.ended.is_set()}
