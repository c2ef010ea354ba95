"""Soak bench (issue 23): evaluations with faults injected at random; nothing left behind.

Usage::

    python3 bench/soak.py [--n 40] [--seed 1] [--faults kill_host,kill_judge,...]
                          [--docker-host unix:///run/kgsoak-docker.sock] [--lb-rounds 1]
                          [--snapshot] [--out bench/results/soak-DATE.jsonl]

Each of N iterations grades one evaluation with ``kgrader run --device cpu --json``
(honest: an example's good kernel; or a cheat of tests/attacks/runtime that must fail) on
bwrap or docker, with one fault drawn at random:

* ``none``; ``kill_host``: SIGKILL of the ``kgrader run`` process at a random moment;
  ``kill_judge`` / ``kill_runner``: SIGKILL of the judge or of a runner inside the sandbox;
* ``disk_full``: TMPDIR on a small tmpfs that a filler file leaves (nearly) full;
* ``oom``: a memory-hungry candidate (tests/attacks/runtime/memory_bomb.py) under 1.5 GiB;
* ``dockerd_restart``: the docker daemon (a private one, ``--docker-host``, so that nobody
  else's containers die) stopped and started again mid-run.

Every evaluation runs with its own TMPDIR (only this bench's folders are there) and, on
docker, against ``--docker-host``. After each iteration: no process of the sandbox alive
(the run's process tree, sampled while it ran, and each container's), and no evaluation
folder, container or cgroup of its host process -- except after a SIGKILL of the host (or
of the daemon under it), whose leftovers must be private (0700) and gone once the next
kgrader command (the next iteration's, which sweeps when it starts) has run. Then
LB_ROUNDS times: ``kgrader leaderboard run`` SIGKILLed after its second committed
evaluation, the state checked (integrity, nothing half-written), resumed to the end: the
resume re-grades nothing that was committed. One JSON line per iteration in OUT, the
summary last (and printed); exit 0 only when nothing was left and nothing was lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
FAULTS = ("none", "kill_host", "kill_judge", "kill_runner", "disk_full", "oom", "dockerd_restart")
HONEST = ("vector_add_small", "softmax", "matmul")
CHEATS = (("side_stream.py", {"output_untouched", "wrong_values", "background_thread",
                               "work_escaped_timing"}),
          ("cache_by_call_count.py", {"output_untouched"}),
          ("input_mutation.py", {"input_mutated"}))
ATTACK = ("--policy", "tests/policies/runtime-only.toml", "--compile-s", "60", "--run-s", "20",
          "--memory-mib", "1536")
LB_SUBS = ("fast_kernels", "wrong_kernels", "malicious", "partial_entry")


class Soak:
    def __init__(self, tree: Path, work: Path, docker_host: str | None, dockerd_cmd: list[str]):
        self.tree, self.work, self.docker_host, self.dockerd_cmd = tree, work, docker_host, dockerd_cmd
        self.tmp = work / "tmp"
        self.tmp.mkdir()
        self.full = work / "full"
        sys.path.insert(0, str(tree))
        from grader.backends import cgroups, cleanup  # the views the tree under test defines

        self.prefixes, self.read_marker, self.cgroups = cleanup.FOLDER_PREFIXES, cleanup.read_marker, \
            cgroups._candidates
        self.pending: list[dict[str, Any]] = []  # killed hosts' leftovers, for the next sweep
        self.killed: list[dict[str, Any]] = []  # this iteration's, pending after it

    # ---- what is left ------------------------------------------------------------------
    def docker(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.docker_host, timeout=30)

    def containers(self, pid: int | None = None) -> list[str]:
        if not self.docker_host:
            return []
        try:
            cs = self.docker().containers.list(all=True, filters={"label": "kgrader"})
        except Exception as e:  # a daemon mid-restart: asked again by the next check
            return [f"daemon unreachable: {str(e)[:120]}"]
        return [f"{c.short_id} {c.status} {c.labels.get('kgrader.owner')}" for c in cs
                if pid is None or f":{pid}:" in c.labels.get("kgrader.owner", "")]

    def folders(self, base: Path, pid: int | None = None) -> list[dict[str, Any]]:
        out = []
        for p in sorted(base.iterdir()) if base.is_dir() else []:
            if not p.name.startswith(self.prefixes):
                continue
            marker = self.read_marker(p) or {}
            if pid is not None and f":{pid}:" not in str(marker.get("owner", "")):
                continue
            st = p.lstat()
            out.append({"path": p.name, "mode": oct(st.st_mode & 0o777), "owner": marker.get("owner"),
                        "private": st.st_mode & 0o077 == 0 and st.st_uid == os.geteuid()})
        return out

    def cgroups_of(self, pid: int) -> list[str]:
        return [str(path) for name, path in self.cgroups() if f"@{pid}@" in name]

    def container_procs(self, pid: int) -> list[psutil.Process]:
        if not self.docker_host:
            return []
        procs: list[psutil.Process] = []
        try:
            for c in self.docker().containers.list(filters={"label": "kgrader"}):
                if f":{pid}:" in c.labels.get("kgrader.owner", ""):
                    init = psutil.Process(int(c.attrs["State"]["Pid"]))
                    procs += [init, *init.children(recursive=True)]
        except Exception:
            pass
        return procs

    # ---- one evaluation ----------------------------------------------------------------
    def start(self, args: list[str], tmpdir: Path) -> subprocess.Popen[str]:
        env = {**os.environ, "TMPDIR": str(tmpdir), "KGRADER_LOG": "error"}
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        return subprocess.Popen([sys.executable, "-m", "grader.cli", *args], cwd=self.tree, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def sandbox_procs(self, host: subprocess.Popen[str]) -> list[psutil.Process]:
        kids: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            kids = list(psutil.Process(host.pid).children(recursive=True))
        return kids + self.container_procs(host.pid)

    def run_one(self, rng: random.Random, fault: str, backend: str) -> dict[str, Any]:
        honest = fault != "oom" and rng.random() < 0.75
        extra: tuple[str, ...]
        if fault == "oom":
            task, cand, extra, expect = "vector_add_small", "tests/attacks/runtime/memory_bomb.py", \
                ATTACK, {"memory_limit"}
        elif honest:
            task = rng.choice(HONEST)
            cand, extra, expect = f"examples/{task}/candidates/good.py", (), set()
        else:
            name, expect = rng.choice(CHEATS)
            task, cand, extra = "vector_add_small", f"tests/attacks/runtime/{name}", ATTACK
        row: dict[str, Any] = {"fault": fault, "backend": backend, "task": task, "candidate": cand,
                               "honest": honest, "load1": round(os.getloadavg()[0], 2)}
        tmpdir = self.tmp
        if fault == "disk_full":
            tmpdir = self.full
            row["free_kib"] = self.fill(rng.choice([0, 4, 64, 512]))
        args = ["run", f"examples/{task}", cand, "--backend", backend, "--device", "cpu", "--json",
                *extra]
        t0 = time.monotonic()
        host = self.start(args, tmpdir)
        seen: dict[int, float] = {}
        fired = self.drive(host, fault, rng, seen, row)
        try:
            out, err = host.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            host.kill()
            out, err = host.communicate()
            row["bench_timeout"] = True
        row.update(rc=host.returncode, wall_s=round(time.monotonic() - t0, 1), fired=fired)
        try:
            r = json.loads(out)
            first = r["errors"][0] if r.get("errors") else {}
            if not first and isinstance(r.get("error"), dict):  # the CLI's error document
                first = {"stage": "cli", **r["error"]}
                first["origin"] = first.get("origin") or "infrastructure"
            row.update(ok=r.get("ok"), stage=first.get("stage"), code=first.get("code"),
                       origin=first.get("origin"), message=str(first.get("message", ""))[:300])
        except ValueError:
            row.update(ok=None, tail=(out + err)[-400:])
        row["traceback"] = "Traceback (most recent call last)" in err
        row["expected"] = self.expected(row, expect)
        time.sleep(3)  # --die-with-parent and the container kill take a moment
        row["left_processes"] = [f"{p} {n}" for p, n in self.alive(seen)]
        killed_host = (fault == "kill_host" and fired) or fault == "dockerd_restart"
        row["left_folders"] = self.folders(tmpdir, host.pid)
        row["left_containers"] = self.containers(host.pid)
        row["left_cgroups"] = self.cgroups_of(host.pid)
        if killed_host:  # allowed until the next kgrader command sweeps; must be private now
            row["leftover_private"] = all(f["private"] for f in row["left_folders"])
            self.killed.append({"pid": host.pid, "tmpdir": str(tmpdir)})
            row["left_folders_ok"] = row["left_containers_ok"] = row["left_cgroups_ok"] = True
        else:
            row["left_folders_ok"] = not row["left_folders"]
            row["left_containers_ok"] = not row["left_containers"]
            row["left_cgroups_ok"] = not row["left_cgroups"]
        if fault == "disk_full":
            (self.full / "filler").unlink(missing_ok=True)
        return row

    def expected(self, row: dict[str, Any], expect: set[str]) -> str:
        """What the verdict says about the fault: ``pass``, ``infra`` (retried), ``stopped``
        (a cheat with its own code), or what went wrong."""
        if row.get("traceback"):
            return "traceback"
        if row["fault"] == "kill_host" and row.get("fired"):
            return "killed" if row["rc"] == -signal.SIGKILL else f"rc {row['rc']} after SIGKILL"
        if row.get("ok") is True:
            return "pass" if row["honest"] else "cheat_passed"
        if row.get("origin") == "infrastructure" or row.get("ok") is None:
            return "infra"
        if not row["honest"]:
            return "stopped" if row.get("code") in expect else "stopped_other_code"
        return "honest_blamed"

    def alive(self, seen: dict[int, float]) -> list[tuple[int, str]]:
        out = []
        for pid, created in seen.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    out.append((pid, " ".join(p.cmdline())[:120]))
            except psutil.Error:
                pass
        return out

    def drive(self, host: subprocess.Popen[str], fault: str, rng: random.Random,
              seen: dict[int, float], row: dict[str, Any]) -> bool:
        """Sample the sandbox's processes while the run lasts; inject ``fault``. True when
        the fault fired before the run ended on its own."""
        at = time.monotonic() + rng.uniform(2.0, 14.0)
        wanted = {"kill_judge": "sandbox.judge.main", "kill_runner": "sandbox.runner"}.get(fault)
        fired = False
        while host.poll() is None:
            procs = self.sandbox_procs(host)
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    seen.setdefault(p.pid, p.create_time())
            if not fired and time.monotonic() >= at:
                if fault == "kill_host":
                    host.send_signal(signal.SIGKILL)
                    fired = True
                elif wanted:
                    targets = [p for p in procs if wanted in " ".join(_cmdline(p))]
                    if targets:
                        rng.choice(targets).send_signal(signal.SIGKILL)
                        fired = True
                elif fault == "dockerd_restart":
                    row["dockerd_down_s"] = self.restart_dockerd()
                    fired = True
            time.sleep(0.3)
        return fired

    # ---- faults ------------------------------------------------------------------------
    def fill(self, free_kib: int) -> int:
        if not self.full.is_dir():
            self.full.mkdir()
        if not os.path.ismount(self.full):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=1777", "tmpfs",
                            str(self.full)], check=True)
        st = os.statvfs(self.full)
        size = max(0, st.f_bavail * st.f_frsize - free_kib * 1024)
        with (self.full / "filler").open("wb") as f:
            f.write(b"\0" * size)
        st = os.statvfs(self.full)
        return st.f_bavail * st.f_frsize // 1024

    def restart_dockerd(self) -> float:
        pidfile = Path(self.dockerd_cmd[self.dockerd_cmd.index("--pidfile") + 1])
        t0 = time.monotonic()
        with contextlib.suppress(OSError, ValueError):  # a daemon already down: start it
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            while psutil.pid_exists(pid) and time.monotonic() - t0 < 60:
                time.sleep(0.2)
        log = (self.work / "dockerd.log").open("ab")
        subprocess.Popen(self.dockerd_cmd, stdout=log, stderr=log, start_new_session=True)
        while time.monotonic() - t0 < 120:
            try:
                self.docker().ping()
                break
            except Exception:
                time.sleep(0.5)
        return round(time.monotonic() - t0, 1)

    def check_pending(self) -> list[str]:
        """Leftovers of killed hosts that the last kgrader command did not sweep."""
        left = []
        for p in self.pending:
            pid, tmpdir = p["pid"], Path(p["tmpdir"])
            left += [f"folder {f['path']}" for f in self.folders(tmpdir, pid)]
            left += [f"container {c}" for c in self.containers(pid)]
            left += [f"cgroup {c}" for c in self.cgroups_of(pid)]
        self.pending = []
        return left

    def next_pending(self) -> None:
        self.pending += self.killed
        self.killed = []

    # ---- the leaderboard ----------------------------------------------------------------
    def leaderboard(self, rng: random.Random, k: int) -> dict[str, Any]:
        subs = self.work / f"lb-subs-{k}"
        for s in LB_SUBS:
            (subs / s).mkdir(parents=True)
            shutil.copy(self.tree / "examples/leaderboard/submissions" / s / "vector_add_small.py",
                        subs / s)
        state = self.work / f"lb-{k}.sqlite"
        args = ["leaderboard", "run", "--tasks", "examples/vector_add_small", "--submissions",
                str(subs), "--state", str(state), "--device", "cpu", "--backend", "bwrap",
                "--top-k", "0", "--workers", "1", "--no-progress", "--json"]
        row: dict[str, Any] = {"fault": "leaderboard_kill_resume"}
        host = self.start(args, self.tmp)
        seen: dict[int, float] = {}
        while host.poll() is None and _count(state) < 2:
            for p in self.sandbox_procs(host):
                seen.setdefault(p.pid, p.create_time())
            time.sleep(0.3)
        time.sleep(rng.uniform(0.0, 5.0))  # into the next evaluation
        host.send_signal(signal.SIGKILL)
        host.communicate()
        time.sleep(3)
        before = _rows(state)
        row.update(committed_before_kill=len(before), integrity=_integrity(state),
                   left_processes=[f"{p} {n}" for p, n in self.alive(seen)],
                   left_folders_private=all(f["private"] for f in self.folders(self.tmp, host.pid)))
        self.pending.append({"pid": host.pid, "tmpdir": str(self.tmp)})
        again = self.start(args, self.tmp)  # it sweeps what the killed run left, then resumes
        out, err = again.communicate(timeout=1800)
        after = _rows(state)
        try:
            doc = json.loads(out)
        except ValueError:
            doc = {"unparsed": (out + err)[-400:]}
        row.update(resume_rc=again.returncode, resume_skipped_done=doc.get("skipped_done"),
                   resume_evaluated=doc.get("evaluated"), committed_after=len(after),
                   unchanged=all(after.get(key) == v for key, v in before.items()),
                   swept=self.check_pending(), integrity_after=_integrity(state))
        row["ok"] = (row["integrity"] == "ok" and row["integrity_after"] == "ok" and row["unchanged"]
                     and row["resume_skipped_done"] == sum(k[3] != "reference" for k in before)
                     and not row["left_processes"]
                     and row["left_folders_private"] and not row["swept"] and again.returncode == 0)
        return row


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return list(p.cmdline())
    except psutil.Error:
        return []


def _count(state: Path) -> int:
    return len(_rows(state))


def _rows(state: Path) -> dict[tuple[str, ...], tuple[Any, ...]]:
    if not state.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=5) as db:
            return {tuple(r[:4]): tuple(r[4:]) for r in db.execute(
                "SELECT submission, task, file_sha, round, verdict, finished_at FROM evaluations")}
    except sqlite3.Error:
        return {}


def _integrity(state: Path) -> str:
    with sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=5) as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def summarise(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    evals = [r for r in rows if r["fault"] != "leaderboard_kill_resume"]
    lbs = [r for r in rows if r["fault"] == "leaderboard_kill_resume"]
    left = [r for r in evals if r["left_processes"] or not (r["left_folders_ok"] and
                                                            r["left_containers_ok"] and
                                                            r["left_cgroups_ok"])]
    return {**meta, "iterations": len(evals),
            "by_fault": dict(Counter(r["fault"] for r in evals)),
            "fired": dict(Counter(r["fault"] for r in evals if r.get("fired"))),
            "verdicts": {f: dict(Counter(r["expected"] for r in evals if r["fault"] == f))
                         for f in FAULTS if any(r["fault"] == f for r in evals)},
            "honest_no_fault_failed": [r for r in evals if r["fault"] == "none" and r["honest"]
                                       and r["expected"] not in ("pass", "infra")],
            "cheats_passed": [r for r in evals if r["expected"] == "cheat_passed"],
            "tracebacks": sum(bool(r.get("traceback")) for r in evals),
            "left_behind": [{k: r[k] for k in ("fault", "backend", "left_processes", "left_folders",
                                                "left_containers", "left_cgroups")} for r in left],
            "not_private_after_kill": sum(r.get("leftover_private") is False for r in evals),
            "not_swept_by_next_command": [s for r in rows for s in r.get("swept", [])],
            "leaderboard": lbs}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--docker-share", type=float, default=0.3)
    ap.add_argument("--docker-host", default=None,
                    help="a private daemon's socket; without it, bwrap only and no dockerd fault")
    ap.add_argument("--dockerd-cmd", default="dockerd --bridge=none --iptables=false "
                    "--data-root /var/lib/kgsoak-docker --exec-root /run/kgsoak-docker "
                    "--pidfile /run/kgsoak-docker.pid -H unix:///run/kgsoak-docker.sock")
    ap.add_argument("--lb-rounds", type=int, default=1)
    ap.add_argument("--max-wall-s", type=float, default=None,
                    help="start no iteration after this many seconds; the leaderboard rounds "
                         "still run")
    ap.add_argument("--snapshot", action="store_true", help="grade with a copy of HEAD")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    faults = [f for f in a.faults.split(",") if f]
    if any(f not in FAULTS for f in faults):
        sys.exit(f"--faults: choose from {FAULTS}")
    if not a.docker_host:
        faults = [f for f in faults if f != "dockerd_restart"]
    rng = random.Random(a.seed)
    out = a.out or REPO / "bench" / "results" / f"soak-{datetime.now(UTC):%Y-%m-%d-%H%M}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kgrader-soakbench-") as tmp, out.open("a") as sink:
        work = Path(tmp)
        tree, commit = REPO, "working tree"
        if a.snapshot:
            tree = work / "tree"
            tree.mkdir()
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                    text=True, check=True).stdout.strip()
            archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        soak = Soak(tree, work, a.docker_host, a.dockerd_cmd.split())
        t0 = time.monotonic()
        try:
            for i in range(a.n):
                if a.max_wall_s and time.monotonic() - t0 > a.max_wall_s:
                    break
                fault = rng.choice(faults)
                backend = "docker" if fault == "dockerd_restart" or (
                    a.docker_host and fault != "disk_full" and rng.random() < a.docker_share) else "bwrap"
                row = {"i": i, **soak.run_one(rng, fault, backend)}
                # this run was the next kgrader command after the earlier kills: it swept
                # (a disk-full run has another TMPDIR: the check waits for the next one)
                row["swept"] = soak.check_pending() if fault != "disk_full" else []
                soak.next_pending()
                rows.append(row)
                sink.write(json.dumps(row, sort_keys=True) + "\n")
                sink.flush()
            if soak.pending or soak.killed:  # the last kill's leftovers: the next command sweeps
                soak.next_pending()
                row = {"i": len(rows), **soak.run_one(rng, "none", "bwrap")}
                row["swept"] = soak.check_pending()
                soak.next_pending()
                rows.append(row)
                sink.write(json.dumps(row, sort_keys=True) + "\n")
            for k in range(a.lb_rounds):
                lb = soak.leaderboard(rng, k)
                rows.append(lb)
                sink.write(json.dumps(lb, sort_keys=True) + "\n")
                sink.flush()
        finally:
            if os.path.ismount(soak.full):
                subprocess.run(["umount", str(soak.full)], check=False)
        meta = {"summary": True, "commit": commit, "argv": sys.argv, "cores": os.cpu_count(),
                "seed": a.seed, "wall_s": round(time.monotonic() - t0, 1)}
        summary = summarise(rows, meta)
        sink.write(json.dumps(summary, sort_keys=True, default=str) + "\n")
    print(json.dumps(summary, indent=1, default=str))
    bad = (summary["left_behind"] or summary["not_swept_by_next_command"] or summary["cheats_passed"]
           or summary["tracebacks"] or summary["not_private_after_kill"]
           or summary["honest_no_fault_failed"] or not all(lb["ok"] for lb in summary["leaderboard"]))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
