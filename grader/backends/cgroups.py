"""Per-evaluation cgroups (v2 or v1) for memory and pids limits, read back after the run.

When neither hierarchy is writable, :func:`create` returns ``None`` and the backend falls
back to rlimits plus the psutil watchdog (:mod:`grader.backends.watchdog`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.logs import get_logger

log = get_logger("kgrader.cgroups")
ROOT = Path("/sys/fs/cgroup")


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read_kv(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out


@dataclass(frozen=True)
class Counts:
    """What the kernel counted in an evaluation's cgroups, read once its run ended."""

    oom_killed: bool
    oom_counted: bool  # the OOM count could be read: oom_killed False means none
    pids_hit: bool
    memory_limit_hits: int
    lost: bool  # a directory was gone (removed from outside) by the last read


class CgroupSet:
    """The cgroup directories of one evaluation (one per v1 controller, or one v2 dir)."""

    def __init__(self, version: int, dirs: dict[str, Path]):
        self.version = version
        self.dirs = dirs

    @property
    def kind(self) -> str:
        return f"cgroup v{self.version}"

    def attach(self, pid: int) -> None:
        for d in {*self.dirs.values()}:
            _write(d / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in {*self.dirs.values()}:
            with contextlib.suppress(OSError):
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return sorted(out)

    def counts(self) -> Counts:
        """The counts first and whether the set is gone last, before the run's own removal:
        a set removed from outside between two reads (its OOM count gone with it) is then
        always said to be lost, never a sandbox that counted no OOM kill (the landing CI of
        4058978 saw the other order blame the candidate, ``judge_died``)."""
        oom_killed, oom_counted = self.oom_killed(), self.oom_counted()
        pids_hit, hits = self.pids_hit(), self.memory_limit_hits()
        return Counts(oom_killed, oom_counted, pids_hit, hits, self.lost())

    def oom_counted(self) -> bool:
        """Whether the kernel's count of OOM kills in this tree can be read (read while the
        cgroup exists: then :meth:`oom_killed` False means no process was OOM-killed)."""
        d = self.dirs.get("memory")
        return d is not None and (d / ("memory.events" if self.version == 2
                                       else "memory.oom_control")).is_file()

    def lost(self) -> bool:
        """Whether a directory of this set is gone while the run it holds was still ours to
        end: only root on the host removes it (bwrap mounts no /sys in the sandbox), so
        something outside the sandbox (a sweep, an operator) took it and killed what was in it."""
        return any(not d.is_dir() for d in {*self.dirs.values()})

    def oom_killed(self) -> bool:
        if self.version == 2:
            return _read_kv(self.dirs["memory"] / "memory.events").get("oom_kill", 0) > 0
        d = self.dirs["memory"]
        if _read_kv(d / "memory.oom_control").get("oom_kill", 0) > 0:
            return True
        try:
            return int((d / "memory.failcnt").read_text()) > 0 and \
                int((d / "memory.max_usage_in_bytes").read_text()) >= \
                int((d / "memory.limit_in_bytes").read_text()) - (1 << 20)
        except (OSError, ValueError):
            return False

    def memory_limit_hits(self) -> int:
        """How often usage reached the memory limit (cgroup v2 ``memory.events`` ``max``; v1
        ``memory.failcnt``): the kernel then reclaimed the tree's pages, mapped libraries
        included, which slows everything in it long before the OOM killer fires."""
        try:
            if self.version == 2:
                return int(_read_kv(self.dirs["memory"] / "memory.events").get("max", 0))
            return int((self.dirs["memory"] / "memory.failcnt").read_text())
        except (OSError, ValueError):
            return 0

    def pids_hit(self) -> bool:
        return _read_kv(self.dirs["pids"] / "pids.events").get("max", 0) > 0

    def peak_memory(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.dirs["memory"] / name).read_text())
        except (OSError, ValueError):
            return None

    def kill_all(self) -> None:
        if self.version == 2:
            try:
                _write(self.dirs["memory"] / "cgroup.kill", "1")
                return
            except OSError:
                pass
        for _ in range(50):  # v1: no cgroup.kill; a fork bomb may race us, so loop
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def destroy(self) -> None:
        self.kill_all()
        for d in {*self.dirs.values()}:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def owned_name(label: str, owner: str) -> str:
    """A cgroup name that carries its owner (``host:pid:start``) as ``label@pid@start``,
    so that :func:`reclaim_stale` can tell an orphan from a live run's cgroup."""
    _, pid, started = owner.rsplit(":", 2)
    return f"{label}@{pid}@{started}"


def _owner_from_name(name: str) -> str | None:
    parts = name.rsplit("@", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return f"{socket.gethostname()}:{parts[1]}:{parts[2]}"


def _candidates() -> list[tuple[str, Path]]:
    """``(name, dir)`` of every kgrader cgroup on this host (v2 and v1)."""
    found: list[tuple[str, Path]] = []
    with contextlib.suppress(OSError):
        found += [(d.name, d) for d in (ROOT / "kgrader").iterdir() if d.is_dir()]
    for controller in ("memory", "pids"):
        with contextlib.suppress(OSError):
            found += [(d.name[len("kgrader-"):], d) for d in (ROOT / controller).iterdir()
                      if d.is_dir() and d.name.startswith("kgrader-")]
    return found


def reclaim_stale(alive: Callable[[str], bool], *, include_live: bool = False) -> list[str]:
    """Kill what is left in, and remove, the cgroups whose owner is gone; return their paths.

    Cgroups whose name carries no owner are left alone (they may be a live run's).
    """
    removed: list[str] = []
    for name, path in _candidates():
        owner = _owner_from_name(name)
        if owner is None or (alive(owner) and not include_live):
            continue
        CgroupSet(1, {"memory": path, "pids": path}).kill_all()
        for _ in range(50):
            try:
                path.rmdir()
                removed.append(str(path))
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)
    if removed:
        log.info("cgroup_reclaimed", count=len(removed))
    return removed


def create(name: str, memory_bytes: int, pids: int) -> CgroupSet | None:
    """Make and configure the cgroups of one evaluation, or ``None`` if we cannot."""
    try:
        if (ROOT / "cgroup.controllers").exists():
            return _create_v2(name, memory_bytes, pids)
        if (ROOT / "memory" / "cgroup.procs").exists() and (ROOT / "pids" / "cgroup.procs").exists():
            return _create_v1(name, memory_bytes, pids)
    except OSError as e:
        log.warning("cgroup_unavailable", error=str(e))
    return None


def _create_v2(name: str, memory_bytes: int, pids: int) -> CgroupSet:
    parent = ROOT / "kgrader"
    if not parent.exists():
        parent.mkdir()
        _write(ROOT / "cgroup.subtree_control", "+memory +pids")
    _write(parent / "cgroup.subtree_control", "+memory +pids")
    d = parent / name
    d.mkdir()
    cg = CgroupSet(2, {"memory": d, "pids": d})
    try:
        _write(d / "memory.max", str(memory_bytes))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(pids))
    except OSError:
        cg.destroy()
        raise
    return cg


def _create_v1(name: str, memory_bytes: int, pids: int) -> CgroupSet:
    mem, pid = ROOT / "memory" / f"kgrader-{name}", ROOT / "pids" / f"kgrader-{name}"
    mem.mkdir()
    pid.mkdir()
    cg = CgroupSet(1, {"memory": mem, "pids": pid})
    try:
        _write(mem / "memory.limit_in_bytes", str(memory_bytes))
        if (mem / "memory.memsw.limit_in_bytes").exists():
            _write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))
        _write(pid / "pids.max", str(pids))
    except OSError:
        cg.destroy()
        raise
    return cg
