"""Pools by template: the one call a service worker grades through.

``Pools(size, gate=...)`` keeps one :class:`grader.pool.Pool` per template
(:func:`grader.pool.warm.template_key`: task, limits, device, stages, ...). :meth:`Pools.grade`
sends a request to its template's pool; the first request of a template is graded cold
while its pool starts, and so is any request its pool cannot serve in time (no sandbox
ready: the cold path gives the same verdict, only slower). ``templates`` caps how many
pools live at once (each holds ``size`` sandboxes with torch imported, ~1 GB each); the
least recently used one is closed to make room. Without a ``gate``, each GPU set a request
names (``gpu_ids``) gets a :class:`MeasureGate` of its own, shared by every template's pool
on it, so no two of its sandboxes measure at once; CPU requests get none.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from grader.backends.gate import MeasureGate
from grader.errors import InfrastructureError
from grader.evaluate import EvalRequest, evaluate
from grader.judgecall import resolve_device
from grader.logs import get_logger
from grader.pool.pool import Pool
from grader.pool.warm import template_key
from grader.report.model import Report

log = get_logger("kgrader.pool")


class Pools:
    """See the module docstring. ``wait_s``: how long :meth:`grade` waits for a warm
    sandbox before it grades cold."""

    def __init__(self, size: int = 1, *, gate: MeasureGate | None = None, templates: int = 4,
                 wait_s: float = 30.0, idle_s: float = 300.0,
                 refill_while_busy: bool = True) -> None:
        self.size, self.gate, self.templates = size, gate, templates
        self.wait_s, self.idle_s, self.refill_while_busy = wait_s, idle_s, refill_while_busy
        self.cold = 0  # requests graded cold (a new template, or no sandbox in time)
        self._pools: OrderedDict[str, Pool | None] = OrderedDict()  # None: cannot pool
        self._gates: dict[tuple[str, ...], MeasureGate] = {}
        self._lock = threading.Lock()

    def grade(self, req: EvalRequest) -> Report:
        key = template_key(req)
        with self._lock:
            known = key in self._pools
            pool = self._pools.get(key)
            if known:
                self._pools.move_to_end(key)
            else:
                self._open(key, req)
        if pool is not None:
            try:
                return pool.evaluate(req, timeout=self.wait_s)
            except InfrastructureError as e:  # no warm sandbox in time: grade it cold
                log.warning("pool_fallback_cold", error=str(e)[:300])
        self.cold += 1
        return evaluate(req)

    def _open(self, key: str, req: EvalRequest) -> None:
        while len(self._pools) >= self.templates:
            _, old = self._pools.popitem(last=False)
            if old is not None:
                old.close()
        try:
            self._pools[key] = Pool(req, self.size, gate=self._gate(req), idle_s=self.idle_s,
                                    refill_while_busy=self.refill_while_busy)
        except Exception as e:  # a backend that cannot pool (docker): this template goes cold
            self._pools[key] = None
            log.warning("pool_unavailable", error=str(e)[:300])

    def _gate(self, req: EvalRequest) -> MeasureGate | None:
        if self.gate is not None or resolve_device(req.device) == "cpu":
            return self.gate
        ids = tuple(req.gpu_ids)
        return self._gates.setdefault(ids, MeasureGate(f"gpu{','.join(ids) or '-default'}"))

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), OrderedDict()
        for p in pools:
            if p is not None:
                p.close()
