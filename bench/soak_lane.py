"""One lane of the soak bench (bench/soak.py): a sequence of evaluations with its own TMPDIR,
its own random stream and its own rows; lanes run at once and share only the monitor.

The lane's TMPDIR holds only its own evaluation folders, so "a killed host's leftovers
are private and swept by the next kgrader command" is checked per lane: the next command
is the lane's next iteration (cgroups and containers may be swept by any lane's command,
which is as good). Every check names the lane's own host process by its owner token.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from soak_checks import Leftovers, Monitor, alive, cmdline, expected

from grader.backends.owner import start_ticks

HONEST = ("vector_add_small", "softmax", "matmul")
CHEATS = (("side_stream.py", {"output_untouched", "wrong_values", "background_thread",
                               "work_escaped_timing"}),
          ("cache_by_call_count.py", {"output_untouched"}),
          ("input_mutation.py", {"input_mutated"}))
ATTACK = ("--policy", "tests/policies/runtime-only.toml", "--compile-s", "60", "--run-s", "20",
          "--memory-mib", "1536")
# The next kgrader command after a lane's last kill: `run` sweeps before it scans, and this
# candidate fails the scan, so the sweep costs a second, not an evaluation.
SWEEP_RUN = ("run", "examples/vector_add_small", "tests/attacks/socket_exfil.py", "--backend",
             "bwrap", "--device", "cpu", "--json")
KILLED_KEYS = ("left_folders_ok", "left_containers_ok", "left_cgroups_ok")


@dataclass
class Shared:
    """What all lanes share: the tree under test, the work folder, the views, the daemon."""

    tree: Path
    work: Path
    left: Leftovers
    monitor: Monitor
    owner_of: Callable[[int], str]
    docker_host: str | None = None
    dockerd_cmd: list[str] = field(default_factory=list)
    restarts: list[list[float]] = field(default_factory=list)  # [start, end] of each restart
    stop: threading.Event = field(default_factory=threading.Event)

    def restart_dockerd(self) -> float:
        """Stop the private daemon and start it again; other lanes' docker checks wait."""
        pidfile = Path(self.dockerd_cmd[self.dockerd_cmd.index("--pidfile") + 1])
        with self.left.docker_lock:
            t0 = time.monotonic()
            span = [t0, float("inf")]
            self.restarts.append(span)
            with contextlib.suppress(OSError, ValueError):  # a daemon already down: start it
                pid = int(pidfile.read_text())
                os.kill(pid, signal.SIGTERM)
                while psutil.pid_exists(pid) and time.monotonic() - t0 < 60:
                    time.sleep(0.2)
            log = (self.work / "dockerd.log").open("ab")
            subprocess.Popen(self.dockerd_cmd, stdout=log, stderr=log, start_new_session=True)
            while time.monotonic() - t0 < 120:
                try:
                    self.left.docker().ping()
                    break
                except Exception:
                    time.sleep(0.5)
            span[1] = time.monotonic()
        return round(span[1] - t0, 1)

    def restarted_during(self, t0: float, t1: float) -> bool:
        return any(r0 <= t1 and r1 >= t0 for r0, r1 in list(self.restarts))


class Lane:
    def __init__(self, shared: Shared, k: int, seed: int) -> None:
        self.s, self.k = shared, k
        self.rng = random.Random(f"kgrader-soak:{seed}:{k}")  # str seeds hash the same each run
        self.dir = shared.work / f"lane-{k}"
        self.tmp, self.full = self.dir / "tmp", self.dir / "full"
        self.tmp.mkdir(parents=True)
        self.pending: list[dict[str, Any]] = []  # killed hosts' leftovers, for the next sweep
        self.killed: list[dict[str, Any]] = []  # this iteration's, pending after it
        self.host: subprocess.Popen[str] | None = None  # the run in flight (killed on abort)

    # ---- one kgrader command -------------------------------------------------------------
    def start(self, args: list[str] | tuple[str, ...], tmpdir: Path) -> tuple[subprocess.Popen[str], str]:
        env = {**os.environ, "TMPDIR": str(tmpdir), "KGRADER_LOG": "error"}
        if self.s.docker_host:
            env["DOCKER_HOST"] = self.s.docker_host
        host = subprocess.Popen([sys.executable, "-m", "grader.cli", *args], cwd=self.s.tree,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.host = host
        owner = self.s.owner_of(host.pid)
        if self.s.stop.is_set():  # stopped while this run was being set up
            self.abort()
        return host, owner

    def sample(self, host: subprocess.Popen[str], owner: str, seen: dict[int, int]) -> dict[int, int]:
        procs = {**self.s.monitor.tree(host.pid), **self.s.left.container_procs(owner)}
        for pid, created in procs.items():
            seen.setdefault(pid, created)
        return procs

    def abort(self) -> None:
        host = self.host
        if host is not None and host.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(host.pid, signal.SIGKILL)

    # ---- one evaluation ----------------------------------------------------------------
    def draw(self, fault: str) -> tuple[str, str, tuple[str, ...], set[str], bool]:
        honest = fault != "oom" and self.rng.random() < 0.75
        if fault == "oom":
            return "vector_add_small", "tests/attacks/runtime/memory_bomb.py", ATTACK, \
                {"memory_limit"}, False
        if honest:
            task = self.rng.choice(HONEST)
            return task, f"examples/{task}/candidates/good.py", (), set(), True
        name, expect = self.rng.choice(CHEATS)
        return "vector_add_small", f"tests/attacks/runtime/{name}", ATTACK, expect, False

    def run_one(self, fault: str, backend: str) -> dict[str, Any]:
        task, cand, extra, expect, honest = self.draw(fault)
        row: dict[str, Any] = {"lane": self.k, "fault": fault, "backend": backend, "task": task,
                               "candidate": cand, "honest": honest,
                               "load1": round(os.getloadavg()[0], 2)}
        tmpdir = self.tmp
        if fault == "disk_full":
            tmpdir = self.full
            row["free_kib"] = self.fill(self.rng.choice([0, 4, 64, 512]))
        args = ["run", f"examples/{task}", cand, "--backend", backend, "--device", "cpu", "--json",
                *extra]
        t0 = time.monotonic()
        host, owner = self.start(args, tmpdir)
        seen: dict[int, int] = {}
        fired = self.drive(host, owner, fault, seen, row)
        try:
            out, err = host.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            host.kill()
            out, err = host.communicate()
            row["bench_timeout"] = True
        t1 = time.monotonic()
        row.update(rc=host.returncode, wall_s=round(t1 - t0, 1), fired=fired, owner=owner)
        if backend == "docker" and fault != "dockerd_restart" and self.s.restarted_during(t0, t1):
            row["dockerd_overlap"] = True  # another lane restarted the daemon under this run
        row.update(parse(out, err))
        row["expected"] = expected(row, expect)
        if self.s.stop.is_set() and host.returncode == -signal.SIGKILL:
            row["expected"] = "aborted"  # the bench itself was stopped and killed this run
        time.sleep(3)  # --die-with-parent and the container kill take a moment
        self.leftovers(row, seen, owner, tmpdir, killed=(fault == "kill_host" and fired)
                       or fault == "dockerd_restart" or bool(row.get("dockerd_overlap"))
                       or row["expected"] == "aborted")
        if fault == "disk_full":
            (self.full / "filler").unlink(missing_ok=True)
        return row

    def leftovers(self, row: dict[str, Any], seen: dict[int, int], owner: str, tmpdir: Path,
                  *, killed: bool) -> None:
        row["left_processes"] = alive(seen)
        row["left_folders"] = self.s.left.folders(tmpdir, owner)
        row["left_containers"] = self.s.left.containers(owner)
        row["left_cgroups"] = self.s.left.cgroups_of(owner)
        if killed:  # allowed until the next kgrader command sweeps; must be private now
            row["leftover_private"] = all(f["private"] for f in row["left_folders"])
            self.killed.append({"owner": owner, "tmpdir": str(tmpdir)})
            row.update(dict.fromkeys(KILLED_KEYS, True))
        else:
            row["left_folders_ok"] = not row["left_folders"]
            row["left_containers_ok"] = not row["left_containers"]
            row["left_cgroups_ok"] = not row["left_cgroups"]

    def drive(self, host: subprocess.Popen[str], owner: str, fault: str, seen: dict[int, int],
              row: dict[str, Any]) -> bool:
        """Sample the lane's sandbox processes while the run lasts; inject ``fault``. True
        when the fault fired before the run ended on its own."""
        at = time.monotonic() + self.rng.uniform(2.0, 14.0)
        wanted = {"kill_judge": "sandbox.judge.main", "kill_runner": "sandbox.runner"}.get(fault)
        fired = False
        while host.poll() is None:
            procs = self.sample(host, owner, seen)
            if not fired and time.monotonic() >= at:
                if fault == "kill_host":
                    host.send_signal(signal.SIGKILL)
                    fired = True
                elif wanted:
                    targets = sorted(pid for pid, t in procs.items() if wanted in cmdline(pid, t))
                    if targets:
                        pid = self.rng.choice(targets)
                        with contextlib.suppress(psutil.Error):
                            p = psutil.Process(pid)
                            if start_ticks(pid) == procs[pid]:
                                p.send_signal(signal.SIGKILL)
                                fired = True
                elif fault == "dockerd_restart":
                    row["dockerd_down_s"] = self.s.restart_dockerd()
                    fired = True
            time.sleep(0.3)
        return fired

    def fill(self, free_kib: int) -> int:
        """Leave ``free_kib`` free on the lane's own small tmpfs (mounted once)."""
        self.full.mkdir(exist_ok=True)
        if not os.path.ismount(self.full):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=1777", "tmpfs",
                            str(self.full)], check=True)
        st = os.statvfs(self.full)
        size = max(0, st.f_bavail * st.f_frsize - free_kib * 1024)
        with (self.full / "filler").open("wb") as f:
            f.write(b"\0" * size)
        st = os.statvfs(self.full)
        return st.f_bavail * st.f_frsize // 1024

    def unmount(self) -> None:
        if os.path.ismount(self.full):
            subprocess.run(["umount", str(self.full)], check=False)

    # ---- the sweep by the next command ---------------------------------------------------
    def check_pending(self) -> list[str]:
        """Leftovers of killed hosts that the last kgrader command did not sweep."""
        left = []
        for p in self.pending:
            owner, tmpdir = p["owner"], Path(p["tmpdir"])
            left += [f"folder {f['path']}" for f in self.s.left.folders(tmpdir, owner)]
            left += [f"container {c}" for c in self.s.left.containers(owner)]
            left += [f"cgroup {c}" for c in self.s.left.cgroups_of(owner)]
        self.pending = []
        return left

    def next_pending(self) -> None:
        self.pending += self.killed
        self.killed = []

    def final_sweep(self) -> dict[str, Any]:
        """The next kgrader command after the lane's last kill, and its own leftovers."""
        self.next_pending()
        host, owner = self.start(SWEEP_RUN, self.tmp)
        seen: dict[int, int] = {}
        while host.poll() is None:
            self.sample(host, owner, seen)
            time.sleep(0.3)
        out, err = host.communicate()
        row: dict[str, Any] = {"lane": self.k, "fault": "final_sweep", "rc": host.returncode,
                               "owner": owner, **parse(out, err)}
        row["swept"] = self.check_pending()
        time.sleep(1)
        self.leftovers(row, seen, owner, self.tmp, killed=False)
        return row

    # ---- the lane's sequence ---------------------------------------------------------------
    def run(self, indices: list[int], faults: list[str], deadline: float | None,
            docker_share: float, emit: Callable[[dict[str, Any]], None]) -> None:
        for i in indices:
            if self.s.stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                break
            fault = self.rng.choice(faults)
            backend = "docker" if fault == "dockerd_restart" or (
                self.s.docker_host and fault != "disk_full"
                and self.rng.random() < docker_share) else "bwrap"
            row = {"i": i, **self.run_one(fault, backend)}
            # this run was the next kgrader command after the lane's earlier kills: it swept
            # (a disk-full run has another TMPDIR: the check waits for the next one)
            row["swept"] = self.check_pending() if fault != "disk_full" else []
            self.next_pending()
            emit(row)
        if (self.pending or self.killed) and not self.s.stop.is_set():
            emit(self.final_sweep())


def parse(out: str, err: str) -> dict[str, Any]:
    """The first error of ``kgrader run --json``'s document (or of the CLI's error one)."""
    row: dict[str, Any] = {"traceback": "Traceback (most recent call last)" in err}
    try:
        r = json.loads(out)
        first = r["errors"][0] if r.get("errors") else {}
        if not first and isinstance(r.get("error"), dict):  # the CLI's error document
            first = {"stage": "cli", **r["error"]}
            first["origin"] = first.get("origin") or "infrastructure"
        row.update(ok=r.get("ok"), stage=first.get("stage"), code=first.get("code"),
                   origin=first.get("origin"), message=str(first.get("message", ""))[:300])
    except (ValueError, AttributeError, TypeError, KeyError, IndexError):
        row.update(ok=None, tail=(out + err)[-400:])
    return row
