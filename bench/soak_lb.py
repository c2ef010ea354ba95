"""The soak bench's leaderboard round (bench/soak.py): ``kgrader leaderboard run`` SIGKILLed
after its second committed evaluation, the state checked (integrity, nothing half-written),
then resumed to the end: the resume sweeps what the killed run left and re-grades nothing
that was committed. Runs alone, after the lanes, in a lane of its own (its own TMPDIR)."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from soak_checks import alive
from soak_lane import Lane

LB_SUBS = ("fast_kernels", "wrong_kernels", "malicious", "partial_entry")


def leaderboard(lane: Lane, k: int) -> dict[str, Any]:
    work, tree = lane.s.work, lane.s.tree
    subs = work / f"lb-subs-{k}"
    for s in LB_SUBS:
        (subs / s).mkdir(parents=True)
        shutil.copy(tree / "examples/leaderboard/submissions" / s / "vector_add_small.py", subs / s)
    state = work / f"lb-{k}.sqlite"
    args = ["leaderboard", "run", "--tasks", "examples/vector_add_small", "--submissions",
            str(subs), "--state", str(state), "--device", "cpu", "--backend", "bwrap",
            "--top-k", "0", "--workers", "1", "--no-progress", "--json"]
    row: dict[str, Any] = {"fault": "leaderboard_kill_resume", "lane": lane.k}
    host, owner = lane.start(args, lane.tmp)
    seen: dict[int, float] = {}
    while host.poll() is None and len(_rows(state)) < 2:
        lane.sample(host, owner, seen)
        time.sleep(0.3)
    deadline = time.monotonic() + lane.rng.uniform(0.0, 5.0)  # into the next evaluation
    while host.poll() is None and time.monotonic() < deadline:
        lane.sample(host, owner, seen)
        time.sleep(0.3)
    host.send_signal(signal.SIGKILL)
    host.communicate()
    time.sleep(3)
    before = _rows(state)
    row.update(committed_before_kill=len(before), integrity=_integrity(state),
               left_processes=alive(seen),
               left_folders_private=all(f["private"] for f in lane.s.left.folders(lane.tmp, owner)))
    lane.pending.append({"owner": owner, "tmpdir": str(lane.tmp)})
    again, _ = lane.start(args, lane.tmp)  # it sweeps what the killed run left, then resumes
    out, err = again.communicate(timeout=1800)
    after = _rows(state)
    try:
        doc = json.loads(out)
    except ValueError:
        doc = {"unparsed": (out + err)[-400:]}
    row.update(resume_rc=again.returncode, resume_skipped_done=doc.get("skipped_done"),
               resume_evaluated=doc.get("evaluated"), committed_after=len(after),
               unchanged=all(after.get(key) == v for key, v in before.items()),
               swept=lane.check_pending(), integrity_after=_integrity(state))
    if again.returncode != 0:  # what the resume said, to tell its fault from the bench's
        row["resume_tail"] = (out[-600:] + err[-600:]).strip()
    row["ok"] = (row["integrity"] == "ok" and row["integrity_after"] == "ok" and row["unchanged"]
                 and row["resume_skipped_done"] == sum(k[3] != "reference" for k in before)
                 and not row["left_processes"]
                 and row["left_folders_private"] and not row["swept"] and again.returncode == 0)
    return row


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
    try:
        with sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=5) as db:
            return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    except sqlite3.Error as e:
        return f"unreadable: {e}"
