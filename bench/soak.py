"""Soak bench (issue 23): evaluations with faults injected at random, in parallel lanes;
nothing left behind, nothing lost.

Usage::

    python3 bench/soak.py [--lanes 1] [--n 40] [--seed 1] [--faults kill_host,kill_judge,...]
                          [--max-wall-s S] [--docker-host unix:///run/kgsoak-docker.sock]
                          [--lb-rounds 1] [--snapshot] [--out bench/results/soak-DATE.jsonl]

N iterations in all, spread over LANES lanes that run at once (lane k runs iterations k,
k+LANES, ...; the operator picks LANES, e.g. two per core for a loaded host). Each
iteration grades one evaluation with ``kgrader run --device cpu --json`` (honest: an
example's good kernel; or a cheat of tests/attacks/runtime that must fail) on bwrap or
docker, with one fault drawn at random from the lane's own stream (--seed and the lane
number: a run is reproducible):

* ``none``; ``kill_host``: SIGKILL of the ``kgrader run`` process at a random moment;
* ``kill_judge`` / ``kill_runner``: SIGKILL of the judge or of a runner inside the sandbox
  (a judge killed from outside is the machine's fault: ``judge_killed`` or
  ``sandbox_unavailable``; a ``judge_died`` there blames the candidate: ``wrong_blame``);
* ``disk_full``: TMPDIR on the lane's small tmpfs that a filler file leaves (nearly) full
  (an infrastructure error or a pass; a candidate blamed is a ``wrong_blame``; needs root);
* ``oom``: a memory-hungry candidate (tests/attacks/runtime/memory_bomb.py) under 1.5 GiB;
* ``dockerd_restart``: the docker daemon (a private one, ``--docker-host``, so that nobody
  else's containers die) stopped and started again mid-run; other lanes' docker runs it
  overlapped are judged as if they had met it too.

Every lane has its own TMPDIR (only its folders are there) and, on docker, runs against
``--docker-host`` (without it nothing imports the docker SDK). After each iteration, for
the lane's own host process only (its owner token ``host:pid:start``): no process of the
sandbox alive (the host's process tree, sampled while it ran, and each container's), and
no evaluation folder, container or cgroup of it -- except after a SIGKILL of the host (or
of the daemon under it), whose leftovers must be private (0700) and gone once the next
kgrader command (the lane's next iteration, which sweeps when it starts; after its last
one, a scan-rejected ``kgrader run``) has run. ``--max-wall-s`` starts no iteration after
that many seconds in any lane. Then LB_ROUNDS times, alone: ``kgrader leaderboard run``
SIGKILLed after its second committed evaluation, the state checked (integrity, nothing
half-written), resumed to the end: the resume re-grades nothing that was committed.
One JSON line per iteration in OUT, the summary last (and printed: lanes, cores, load
average mean and peak, evaluations per minute); exit 0 only when nothing was left,
nothing was lost and nobody was wrongly blamed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from soak_checks import Leftovers, Monitor
from soak_lane import Lane, Shared
from soak_lb import leaderboard

REPO = Path(__file__).resolve().parent.parent
FAULTS = ("none", "kill_host", "kill_judge", "kill_runner", "disk_full", "oom", "dockerd_restart")
NOT_EVALUATIONS = ("leaderboard_kill_resume", "final_sweep")


def summarise(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    evals = [r for r in rows if r["fault"] not in NOT_EVALUATIONS]
    lbs = [r for r in rows if r["fault"] == "leaderboard_kill_resume"]
    checked = [r for r in rows if r["fault"] != "leaderboard_kill_resume"]
    left = [r for r in checked if r["left_processes"] or not (
        r["left_folders_ok"] and r["left_containers_ok"] and r["left_cgroups_ok"])]
    lanes_s = meta.get("lanes_wall_s") or 0.0
    return {**meta, "iterations": len(evals),
            "evaluations_per_min": round(60 * len(evals) / lanes_s, 2) if lanes_s else None,
            "by_fault": dict(Counter(r["fault"] for r in evals)),
            "fired": dict(Counter(r["fault"] for r in evals if r.get("fired"))),
            "verdicts": {f: dict(Counter(r["expected"] for r in evals if r["fault"] == f))
                         for f in FAULTS if any(r["fault"] == f for r in evals)},
            "codes": {f: dict(Counter(str(r.get("code")) for r in evals if r["fault"] == f))
                      for f in FAULTS if any(r["fault"] == f for r in evals)},
            "honest_no_fault_failed": [r for r in evals if r["fault"] == "none" and r["honest"]
                                       and r["expected"] not in ("pass", "infra", "aborted")],
            "cheats_passed": [r for r in evals if r["expected"] == "cheat_passed"],
            "wrong_blame": [{k: r.get(k) for k in ("i", "lane", "fault", "candidate", "code",
                                                   "message")}
                            for r in evals if r["expected"] == "wrong_blame"],
            "tracebacks": sum(bool(r.get("traceback")) for r in evals),
            "left_behind": [{k: r.get(k) for k in ("i", "lane", "fault", "backend", "left_processes",
                                                   "left_folders", "left_containers",
                                                   "left_cgroups")} for r in left],
            "not_private_after_kill": sum(r.get("leftover_private") is False for r in evals),
            "not_swept_by_next_command": [s for r in rows for s in r.get("swept", [])],
            "leaderboard": lbs}


def failed(summary: dict[str, Any]) -> bool:
    return bool(summary["left_behind"] or summary["not_swept_by_next_command"]
                or summary["cheats_passed"] or summary["tracebacks"] or summary["wrong_blame"]
                or summary["not_private_after_kill"] or summary["honest_no_fault_failed"]
                or summary.get("interrupted")
                or not all(lb["ok"] for lb in summary["leaderboard"]))


def can_mount(where: Path) -> str | None:
    """``None`` when a small tmpfs can be mounted here (the disk_full fault), else why not."""
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        return (r.stderr or r.stdout).strip()[:200] or f"mount rc {r.returncode}"
    subprocess.run(["umount", str(where)], check=False)
    return None


def snapshot(work: Path) -> tuple[Path, str]:
    tree = work / "tree"
    tree.mkdir()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree, commit


def views(tree: Path, docker_host: str | None) -> tuple[Leftovers, Any]:
    sys.path.insert(0, str(tree))
    from grader.backends import cgroups, cleanup, owner  # the views the tree under test defines

    return Leftovers(cleanup.FOLDER_PREFIXES, cleanup.read_marker, cgroups._candidates,
                     docker_host), owner.owner_of


def run_lanes(lanes: list[Lane], a: argparse.Namespace, faults: list[str],
              emit: Any) -> bool:
    """Run every lane to its end (or to --max-wall-s); True when interrupted."""
    deadline = time.monotonic() + a.max_wall_s if a.max_wall_s else None
    threads = [threading.Thread(target=lane.run, name=f"lane-{lane.k}", daemon=True,
                                args=(list(range(lane.k, a.n, a.lanes)), faults, deadline,
                                      a.docker_share, emit)) for lane in lanes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(1.0)
    except KeyboardInterrupt:  # SIGINT or SIGTERM: stop every lane, kill its run in flight
        lanes[0].s.stop.set()
        end = time.monotonic() + 60
        while any(t.is_alive() for t in threads) and time.monotonic() < end:
            for lane in lanes:
                lane.abort()
            for t in threads:
                t.join(0.2)
        return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="iterations in all (over every lane)")
    ap.add_argument("--lanes", type=int, default=1, help="lanes that run at once (>= 1)")
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
                    help="start no iteration after this many seconds in any lane; the "
                         "leaderboard rounds still run")
    ap.add_argument("--snapshot", action="store_true", help="grade with a copy of HEAD")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    faults = [f for f in a.faults.split(",") if f]
    if any(f not in FAULTS for f in faults):
        sys.exit(f"--faults: choose from {FAULTS}")
    if a.lanes < 1 or a.n < 0:
        sys.exit("--lanes must be at least 1 and --n at least 0")
    if not a.docker_host:
        faults = [f for f in faults if f != "dockerd_restart"]
    out = a.out or REPO / "bench" / "results" / f"soak-{datetime.now(UTC):%Y-%m-%d-%H%M}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="kgrader-soakbench-") as tmp, out.open("a") as sink:
        summary = soak(Path(tmp), a, faults, sink)
    print(json.dumps(summary, indent=1, default=str))
    sys.exit(1 if failed(summary) else 0)


def soak(work: Path, a: argparse.Namespace, faults: list[str], sink: TextIO) -> dict[str, Any]:
    tree, commit = snapshot(work) if a.snapshot else (REPO, "working tree")
    unavailable: dict[str, str] = {}
    if "disk_full" in faults and (why := can_mount(work / "mount-probe")):
        faults = [f for f in faults if f != "disk_full"]
        unavailable["disk_full"] = why
    if not faults:
        sys.exit(f"--faults: none can run here ({unavailable})")
    left, owner_of = views(tree, a.docker_host)
    monitor = Monitor()
    shared = Shared(tree, work, left, monitor, owner_of, a.docker_host, a.dockerd_cmd.split())
    lanes = [Lane(shared, k, a.seed) for k in range(a.lanes)]
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()

    def emit(row: dict[str, Any]) -> None:
        with lock:
            rows.append(row)
            sink.write(json.dumps(row, sort_keys=True) + "\n")
            sink.flush()

    t0 = time.monotonic()
    monitor.start()
    interrupted = False
    lanes_s = 0.0
    lb = Lane(shared, a.lanes, a.seed)  # the leaderboard's own TMPDIR and random stream
    try:
        interrupted = run_lanes(lanes, a, faults, emit)
        lanes_s = time.monotonic() - t0
        for k in range(0 if interrupted else a.lb_rounds):
            emit(leaderboard(lb, k))
    except KeyboardInterrupt:
        interrupted = True
        lb.abort()
    finally:
        monitor.stop()
        for lane in lanes:
            lane.unmount()
    meta = {"summary": True, "commit": commit, "argv": sys.argv, "seed": a.seed,
            "lanes": a.lanes, "cores": os.cpu_count(), "load_avg_1m": monitor.load(),
            "faults": faults, "faults_unavailable": unavailable,
            "lanes_wall_s": round(lanes_s, 1), "wall_s": round(time.monotonic() - t0, 1),
            "docker_imported": "docker" in sys.modules, "interrupted": interrupted}
    summary = summarise(sorted(rows, key=lambda r: (r["fault"] in NOT_EVALUATIONS,
                                                    r.get("i", 0), r.get("lane", 0))), meta)
    sink.write(json.dumps(summary, sort_keys=True, default=str) + "\n")
    return summary


if __name__ == "__main__":
    main()
