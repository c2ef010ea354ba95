"""Stopping a driver's Ray tasks so that none of their sandboxes or folders outlives the stop.

Shared by the leaderboard's :class:`~grader.leaderboard.engine.RayEngine` and the
service's bridge (:mod:`grader.service.ray_bridge`). A driver that is told to stop calls
:func:`stop_tasks` with the refs still in flight:

1. ``ray.cancel(force=False)`` raises ``KeyboardInterrupt`` in each running task: its
   ``finally`` blocks stop the sandbox and remove its folders, and :func:`on_node` then
   kills and removes whatever of this worker's a cut-short block left
   (:func:`grader.backends.stop.kill_own`, :func:`~grader.backends.stop.reclaim_own`).
   The driver waits up to :data:`CANCEL_WAIT_S`, in slices of :data:`SLICE_S`, for every
   ref to settle (a settled ref is a task whose clean-up ran).
2. A task still running after that (a starved node, a worker that does not answer) is
   cancelled with ``force=True``: Ray kills its worker, and the sandbox dies with it
   (bwrap's ``--die-with-parent``; a container's owner label makes it an orphan).
3. Then, only if step 2 was needed, a sweep task on every live node (``num_cpus=0``,
   pinned to the node) waits up to :data:`SWEEP_WAIT_S` for the folders marked with this
   driver's run group (:func:`grader.backends.cleanup.set_owner_group`) to lose their
   owner, and reclaims them with everything else dead owners left on that node
   (:func:`grader.backends.cleanup.sweep_orphans`).

Without steps 2 and 3 the driver's exit makes Ray kill the workers mid-clean-up, and what
they leave waits for the next kgrader process on that node. Everything here is bounded
(:data:`STOP_BOUND_S` in all) and never raises: a stop must end.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from grader.backends.cleanup import (
    FOLDER_PREFIXES,
    group_of,
    read_marker,
    set_owner_group,
    sweep_orphans,
    temp_base,
)
from grader.backends.stop import kill_own, reclaim_own
from grader.logs import get_logger

log = get_logger("kgrader.ray_stop")

CANCEL_WAIT_S = 30.0
FORCE_WAIT_S = 10.0
SWEEP_WAIT_S = 20.0
SLICE_S = 0.5
STOP_BOUND_S = CANCEL_WAIT_S + FORCE_WAIT_S + SWEEP_WAIT_S + 5.0
T = TypeVar("T")


def new_group() -> str:
    """A fresh run group: what this driver's tasks write into their folders' markers."""
    return f"ray-{uuid.uuid4().hex[:16]}"


def on_node(group: str, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in a Ray task as a member of ``group``. A cancel
    (``KeyboardInterrupt``) kills this worker's sandboxes and removes its folders once the
    ``finally`` blocks on the way have run, whatever those blocks were cut short of."""
    set_owner_group(group)
    try:
        return fn(*args)
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            kill_own()
        with contextlib.suppress(Exception):
            reclaim_own()
        raise
    finally:
        set_owner_group(None)


def unsettled(ray: Any, refs: Sequence[Any], timeout_s: float) -> list[Any]:
    """The refs of ``refs`` not settled within ``timeout_s``, waited for in short slices
    (``ray.wait`` holds back a signal's exception until its own timeout ends)."""
    pending = list(refs)
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(SLICE_S, left))
        except Exception:  # the cluster went away: nothing more will settle
            break
    return list(pending)


@dataclass(frozen=True)
class StopReport:
    cancelled: int
    forced: int
    swept: int | None  # folders the node sweeps removed; None: no sweep was needed
    left: int  # folders of the group still there after the sweeps (or unknown nodes)


def stop_tasks(ray: Any, refs: Sequence[Any], group: str) -> StopReport:
    """Cancel ``refs`` and make sure nothing of theirs is left on any node (module doc)."""
    refs = list(refs)
    for ref in refs:
        with contextlib.suppress(Exception):  # a finished task cannot be cancelled
            ray.cancel(ref, force=False)
    stuck = unsettled(ray, refs, CANCEL_WAIT_S)
    if not stuck:
        return StopReport(len(refs), 0, None, 0)
    log.warning("ray_stop.forcing", tasks=len(stuck), waited_s=CANCEL_WAIT_S)
    for ref in stuck:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
    unsettled(ray, stuck, FORCE_WAIT_S)
    swept, left = sweep_nodes(ray, group)
    report = StopReport(len(refs), len(stuck), swept, left)
    (log.warning if left else log.info)("ray_stop.swept", **report.__dict__)
    return report


def sweep_nodes(ray: Any, group: str) -> tuple[int, int]:
    """Run :func:`sweep_group` on every live node; ``(removed, left)`` summed over them
    (a node whose sweep did not answer counts one left)."""
    refs = []
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(num_cpus=0, max_retries=0)(sweep_group)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception:  # no sweep could be sent: the group's folders may be left
        return 0, 1
    with contextlib.suppress(Exception):
        for node in nodes:
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            refs.append(remote.options(scheduling_strategy=strategy).remote(
                group, SWEEP_WAIT_S))
    removed = left = 0
    waiting = unsettled(ray, refs, SWEEP_WAIT_S + 5.0)
    for ref in refs:
        if ref in waiting:
            left += 1
            continue
        try:
            r, lft = ray.get(ref, timeout=1.0)
            removed, left = removed + r, left + lft
        except Exception:
            left += 1
    return removed, left


def sweep_group(group: str, wait_s: float, temp_dir: Path | None = None) -> tuple[int, int]:
    """On one node: wait up to ``wait_s`` for the folders of ``group`` to lose their
    owner, reclaiming them (and what other dead owners left) as they do; return
    ``(removed, still there)``. Folders of other runs and of live owners are never
    touched."""
    base = Path(temp_dir or temp_base())
    removed = 0
    deadline = time.monotonic() + wait_s
    while True:
        removed += sweep_orphans(base).removed
        mine = []
        with contextlib.suppress(OSError):
            mine = [p for p in base.iterdir() if p.name.startswith(FOLDER_PREFIXES)
                    and group_of(read_marker(p)) == group]
        if not mine or time.monotonic() >= deadline:
            return removed, len(mine)
        time.sleep(SLICE_S)
