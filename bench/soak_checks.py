"""The soak bench's checks (bench/soak.py): what one host process left, and what a verdict
says about the fault it met.

Every view here is scoped to one ``kgrader`` host process, named by its owner token
``host:pid:start-time`` (the one kgrader writes into its folder markers, cgroup names and
container labels; a pid alone is reused within a run of a few thousand processes), so that
a lane is never blamed for another lane's live run:

* :class:`Monitor` samples the whole process table once per tick for every lane (one scan,
  not one per lane) and the load average every few seconds; :func:`descendants` gives a
  lane its own host's tree from a sample;
* :class:`Leftovers` lists the folders (in one TMPDIR), cgroups and containers of one owner;
* :func:`expected` names the outcome of one evaluation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from grader.backends.owner import start_ticks

# After a SIGKILL of the judge or a runner from outside the sandbox (or of the docker daemon
# under it), an honest kernel is owed an infrastructure verdict; ``judge_died`` and the
# runner's ``signal`` blame the candidate.
INFRA_AFTER_KILL = frozenset({"judge_killed", "sandbox_unavailable", "runner_killed",
                              "current_runner_killed", "runner_setup_failed"})
BLAMED_AFTER_KILL = frozenset({"judge_died", "signal", "current_signal"})


def descendants(parents: Mapping[int, int], root: int) -> list[int]:
    """Every pid under ``root`` in a ``pid -> ppid`` sample (``root`` itself excluded)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in out or pid == root:  # a sample taken mid-reparenting may hold a loop
            continue
        out.append(pid)
        todo += children.get(pid, ())
    return sorted(out)


def expected(row: Mapping[str, Any], expect: set[str]) -> str:
    """What the verdict says about the fault: ``pass``, ``infra`` (retried), ``stopped`` (a
    cheat with its own code), ``killed`` (the host itself), or what went wrong:
    ``wrong_blame`` (the candidate blamed for a fault the bench injected), ``honest_blamed``,
    ``cheat_passed``, ``stopped_other_code``, ``traceback``."""
    if row.get("traceback"):
        return "traceback"
    fault, fired, honest = row["fault"], bool(row.get("fired")), bool(row["honest"])
    if fault == "kill_host" and fired:
        return "killed" if row["rc"] == -signal.SIGKILL else f"rc {row['rc']} after SIGKILL"
    if row.get("ok") is True:
        return "pass" if honest else "cheat_passed"
    code, origin = row.get("code"), row.get("origin")
    outside_kill = (fault in ("kill_judge", "kill_runner", "dockerd_restart") and fired) \
        or bool(row.get("dockerd_overlap"))
    if outside_kill:
        if code in BLAMED_AFTER_KILL or (honest and origin == "candidate"):
            return "wrong_blame"
        if code in INFRA_AFTER_KILL:
            return "infra"
    if origin == "infrastructure" or row.get("ok") is None:
        return "infra"
    if fault == "disk_full" and honest:  # a full TMPDIR is the machine's fault, not the kernel's
        return "wrong_blame"
    if not honest:
        return "stopped" if code in expect else "stopped_other_code"
    return "honest_blamed"


def owner_pid(owner: str) -> tuple[str, str]:
    """``(pid, start)`` of an owner token ``host:pid:start``."""
    _, pid, start = owner.rsplit(":", 2)
    return pid, start


def _owns(owner: str, other: object) -> bool:
    """Whether the token ``other`` (a marker's or a label's) names the process ``owner`` names;
    with no start time known (``?``) the pid alone decides."""
    if not isinstance(other, str) or other.count(":") < 2:
        return False
    if owner_pid(owner)[1] == "?":
        return owner_pid(other)[0] == owner_pid(owner)[0]
    return other == owner


class Monitor:
    """One thread that samples, for all lanes at once, the process table every ``period``
    seconds and the 1-minute load average every ``load_every`` seconds."""

    def __init__(self, period: float = 0.3, load_every: float = 5.0) -> None:
        self.period, self.load_every = period, load_every
        self.loads: list[float] = []
        self._parents: dict[int, int] = {}
        self._started: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-monitor", daemon=True)

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        parents: dict[int, int] = {}
        started: dict[int, int] = {}
        for p in psutil.process_iter(["ppid"]):
            ticks = start_ticks(p.pid)  # not create_time(): it moves with the wall clock
            if p.info["ppid"] is not None and ticks is not None:
                parents[p.pid], started[p.pid] = p.info["ppid"], ticks
        with self._lock:
            self._parents, self._started = parents, started

    def _loop(self) -> None:
        next_load = 0.0
        while not self._stop.wait(self.period):
            with contextlib.suppress(Exception):  # a sampling hiccup: the next tick retries
                self._sample()
            if time.monotonic() >= next_load:
                self.loads.append(os.getloadavg()[0])
                next_load = time.monotonic() + self.load_every

    def tree(self, root: int) -> dict[int, int]:
        """``pid -> start time`` of ``root``'s descendants in the latest sample."""
        with self._lock:
            return {pid: self._started[pid] for pid in descendants(self._parents, root)}

    def load(self) -> dict[str, float | int | None]:
        loads = list(self.loads)
        return {"mean": round(sum(loads) / len(loads), 2) if loads else None,
                "peak": round(max(loads), 2) if loads else None, "samples": len(loads)}


def alive(seen: Mapping[int, int]) -> list[str]:
    """The sampled processes that still run (same pid and start ticks, not a zombie)."""
    out = []
    for pid, created in seen.items():
        try:
            p = psutil.Process(pid)
            if start_ticks(pid) == created and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            pass
    return out


def cmdline(pid: int, created: int) -> str:
    """The command line of ``pid`` if it is still the process sampled at ``created``."""
    try:
        p = psutil.Process(pid)
        return " ".join(p.cmdline()) if start_ticks(pid) == created else ""
    except psutil.Error:
        return ""


class Leftovers:
    """Folders, cgroups and containers of one owner, as the tree under test defines them."""

    def __init__(self, prefixes: tuple[str, ...], read_marker: Callable[[Path], Any],
                 cgroups: Callable[[], list[tuple[str, Path]]], docker_host: str | None) -> None:
        self.prefixes, self.read_marker, self.cgroups = prefixes, read_marker, cgroups
        self.docker_host = docker_host
        self.docker_lock = threading.Lock()  # held while the private daemon restarts

    def docker(self) -> Any:
        import docker  # only with --docker-host: a bwrap-only host has no SDK to need

        return docker.DockerClient(base_url=self.docker_host, timeout=30)

    def folders(self, base: Path, owner: str | None = None) -> list[dict[str, Any]]:
        out = []
        for p in sorted(base.iterdir()) if base.is_dir() else []:
            if not p.name.startswith(self.prefixes):
                continue
            marker = self.read_marker(p) or {}
            if owner is not None and not _owns(owner, marker.get("owner")):
                continue
            with contextlib.suppress(FileNotFoundError):  # removed while we looked
                st = p.lstat()
                out.append({"path": p.name, "mode": oct(st.st_mode & 0o777),
                            "owner": marker.get("owner"),
                            "private": st.st_mode & 0o077 == 0 and st.st_uid == os.geteuid()})
        return out

    def cgroups_of(self, owner: str) -> list[str]:
        pid, start = owner_pid(owner)
        return [str(path) for name, path in self.cgroups()
                if (f"@{pid}@" in name if start == "?" else name.endswith(f"@{pid}@{start}"))]

    def containers(self, owner: str | None = None) -> list[str]:
        if not self.docker_host:
            return []
        err = ""
        for _ in range(5):  # a daemon mid-restart (another lane's fault): wait for it
            with self.docker_lock:
                try:
                    cs = self.docker().containers.list(all=True, filters={"label": "kgrader"})
                    return [f"{c.short_id} {c.status} {c.labels.get('kgrader.owner')}" for c in cs
                            if owner is None or _owns(owner, c.labels.get("kgrader.owner"))]
                except Exception as e:
                    err = str(e)[:120]
            time.sleep(2)
        return [f"daemon unreachable: {err}"]

    def container_procs(self, owner: str) -> dict[int, int]:
        if not self.docker_host or not self.docker_lock.acquire(blocking=False):
            return {}
        procs: dict[int, int] = {}
        try:
            for c in self.docker().containers.list(filters={"label": "kgrader"}):
                if _owns(owner, c.labels.get("kgrader.owner")):
                    init = psutil.Process(int(c.attrs["State"]["Pid"]))
                    for p in [init, *init.children(recursive=True)]:
                        ticks = start_ticks(p.pid)
                        if ticks is not None:
                            procs[p.pid] = ticks
        except Exception:
            pass
        finally:
            self.docker_lock.release()
        return procs
