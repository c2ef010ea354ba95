"""A pool of warm sandboxes for one template: kept full in the background, each used once.

``Pool(template, size)`` keeps ``size`` sandboxes of ``template`` (an :class:`EvalRequest`
whose candidate is ignored) starting or ready; :meth:`Pool.take` hands out a ready one
(claimed: no other caller gets it) and the refill starts at once; :meth:`Pool.evaluate`
scans first, so a candidate the scan denies costs no sandbox, then grades in one taken
sandbox. At most ``starters`` sandboxes start at a time (each start imports torch in three
processes); with ``refill_while_busy=False`` none starts while an evaluation of this pool
runs (on a host with few cores, a start beside a measurement slows it).

Per GPU, pass the device's :class:`MeasureGate`: a warm sandbox touches no device before
its grant, and its grant waits for the gate, so no two sandboxes of that gate measure at
once. Without one, a pool on a GPU makes its own, shared by its sandboxes (pools on one
GPU should share the device's: :class:`grader.pool.pools.Pools` does); on the CPU none. A
sandbox that fails to start is logged and replaced after a back-off; when none can start,
:meth:`take` says why. Only the bwrap backend splits a sandbox's start from its run
(the docker backend takes the gate before it creates the container), so a pool needs it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from grader.backends.gate import MeasureGate
from grader.backends.registry import backend_classes
from grader.backends.select import select_backend
from grader.errors import InfrastructureError, UsageError
from grader.evaluate import EvalRequest, evaluate, screen
from grader.judgecall import resolve_device
from grader.logs import get_logger
from grader.pool.warm import WarmSandbox, template_key
from grader.report.model import Report

log = get_logger("kgrader.pool")
BACKOFF_S = (1.0, 5.0, 30.0)  # after 1, 2, 3+ starts in a row that never became ready
POLL_S = 0.05


@dataclass
class PoolStats:
    """What the pool did so far (for logs, benches and the service's status)."""

    started: int = 0
    taken: int = 0
    expired: int = 0
    failed: int = 0


class Pool:
    """See the module docstring. Use as a context manager, or call :meth:`close`."""

    def __init__(self, template: EvalRequest, size: int = 1, *, gate: MeasureGate | None = None,
                 idle_s: float = 300.0, start_s: float | None = None, starters: int = 1,
                 refill_while_busy: bool = True) -> None:
        if size < 1 or starters < 1:
            raise UsageError(f"a pool needs size >= 1 and starters >= 1, not {size}/{starters}")
        device = resolve_device(template.device)
        self.backend = select_backend(template.backend, device)
        if not self.backend.capabilities.warm_start:
            warm = " or ".join(c.name for c in backend_classes() if c.capabilities.warm_start)
            raise UsageError(f"a warm pool needs the {warm} backend, not {self.backend.name}: "
                             f"only {warm} starts a sandbox apart from its turn at the device")
        self.template, self.key = template, template_key(template)
        if gate is None and device != "cpu":  # one evaluation of this pool at the device
            gate = MeasureGate(f"pool-{device}")
        self.size, self.starters, self.gate = size, starters, gate
        self.idle_s, self.start_s = idle_s, start_s
        self.refill_while_busy = refill_while_busy
        self.stats = PoolStats()
        self.last_failure = ""
        self._live: list[WarmSandbox] = []  # starting or ready, not taken
        self._made: list[WarmSandbox] = []  # every one not taken, until close() saw it end
        self._busy = 0
        self._fails = 0
        self._closed = False
        self._cond = threading.Condition()
        self._filler = threading.Thread(target=self._fill, daemon=True, name="kgrader-pool")
        self._filler.start()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- background refill ----------------------------------------------------------
    def _fill(self) -> None:
        while True:
            with self._cond:
                self._reap()
                if self._closed:
                    return
                starting = sum(1 for s in self._live if s.turn.state == "starting")
                want = (len(self._live) < self.size and starting < self.starters
                        and (self.refill_while_busy or self._busy == 0))
                if not want:
                    self._cond.wait(POLL_S)
                    continue
                if self._fails:  # starts keep failing: wait, but wake for close()
                    self._cond.wait(BACKOFF_S[min(self._fails, len(BACKOFF_S)) - 1])
                    if self._closed:
                        return
            self._start_one()

    def _start_one(self) -> None:
        try:
            sb = WarmSandbox(self.template, gate=self.gate, start_s=self.start_s,
                             idle_s=self.idle_s, backend=self.backend)
        except Exception as e:  # staging failed (disk, a stop signal): counted, backed off
            with self._cond:
                self.stats.failed += 1
                self._fails += 1
                self.last_failure = repr(e)
            log.warning("warm_start_failed", error=repr(e))
            return
        with self._cond:
            self._made = [s for s in self._made if not s.ended.is_set()] + [sb]
            if self._closed:
                sb.discard("the pool closed")
                return
            self.stats.started += 1
            self._live.append(sb)
            self._cond.notify_all()

    def _reap(self) -> None:
        """Drop sandboxes that ended unused (expired, died, discarded); count why."""
        for sb in [s for s in self._live if s.ended.is_set() or s.turn.state == "discarded"]:
            self._live.remove(sb)
            if sb.turn.ready_at is None:
                self.stats.failed += 1
                self._fails += 1
                self.last_failure = sb.turn.why or sb.stderr_tail()
                log.warning("warm_never_ready", why=sb.turn.why, stderr=sb.stderr_tail()[-400:])
            else:
                self.stats.expired += 1
        if any(s.turn.state == "ready" for s in self._live):
            self._fails = 0

    # ---- use ------------------------------------------------------------------------
    def take(self, timeout: float | None = None) -> WarmSandbox:
        """A ready sandbox, claimed for the caller (who must :meth:`WarmSandbox.evaluate`
        it once, or discard it). Raises :class:`InfrastructureError` when none is ready
        within ``timeout`` seconds (None: the start limit of one sandbox)."""
        limit = timeout if timeout is not None else \
            (self.start_s or self.template.effective_limits().compile_s + 60) * 2
        end = time.monotonic() + limit
        with self._cond:
            while True:
                if self._closed:
                    raise InfrastructureError("the warm pool is closed")
                for sb in self._live:
                    if sb.ready and sb.claim():
                        self._live.remove(sb)
                        self._made.remove(sb)
                        self.stats.taken += 1
                        self._cond.notify_all()
                        return sb
                left = end - time.monotonic()
                if left <= 0:
                    why = f": {self.last_failure[-600:]}" if self.last_failure else ""
                    raise InfrastructureError(f"no warm sandbox became ready within {limit:.0f} s"
                                              f"{why}")
                self._cond.wait(min(POLL_S, left))

    def evaluate(self, req: EvalRequest, timeout: float | None = None) -> Report:
        """Grade ``req`` in a warm sandbox. A candidate the scan denies gets its report
        without one (the cold path returns it, as it would). Raises :class:`UsageError`
        for a request of another template."""
        if template_key(req) != self.key:
            raise UsageError("the request does not match the pool's template (task, limits, "
                             "device, stages and the other fields of TEMPLATE_FIELDS)")
        report, _ = screen(req, req.task)
        if report.errors:
            return evaluate(req)  # the denied report, exactly as a cold run writes it
        with self._evaluating():
            return self.take(timeout).evaluate(req)

    @contextlib.contextmanager
    def _evaluating(self) -> Iterator[None]:
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def ready_count(self) -> int:
        with self._cond:
            return sum(1 for s in self._live if s.ready)

    def wait_ready(self, count: int | None = None, timeout: float = 300.0) -> bool:
        """Block until ``count`` (default: ``size``) sandboxes are ready; False on timeout."""
        want = self.size if count is None else count
        end = time.monotonic() + timeout
        while self.ready_count() < want:
            if time.monotonic() > end or self._closed:
                return False
            time.sleep(POLL_S)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Discard every sandbox not taken (one being started too), and wait until each is
        gone with its folder: the process may exit right after."""
        with self._cond:
            self._closed = True
            self._live = []
            self._cond.notify_all()
        self._filler.join(timeout)  # a start in progress ends discarded (see _start_one)
        with self._cond:
            made, self._made = list(self._made), []
        for sb in made:
            sb.discard("the pool closed")
        for sb in made:
            sb.wait_ended(timeout)
