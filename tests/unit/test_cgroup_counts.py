"""The cgroup counts of a finished run are read in an order that survives the set being
removed from outside between any two reads (pure logic over fake cgroup folders; the real
removal is tests/e2e/test_outside_kills.py, which meets the race only sometimes)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from grader.backends import cgroups

READS = ("oom_killed", "oom_counted", "pids_hit", "memory_limit_hits", "lost")


class VanishingSet(cgroups.CgroupSet):
    """A set whose folders an outside sweep removes just before its ``k``-th read."""

    def __init__(self, version: int, dirs: dict[str, Path], k: int) -> None:
        super().__init__(version, dirs)
        self.k, self.reads = k, 0

    def __getattribute__(self, name: str) -> Any:
        if name in READS:
            self.reads += 1
            if self.reads == self.k:
                for d in {*self.dirs.values()}:
                    shutil.rmtree(d, ignore_errors=True)
        return super().__getattribute__(name)


def _v2(tmp: Path, oom_kills: int) -> dict[str, Path]:
    d = tmp / "kgrader-eval"
    d.mkdir()
    (d / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kills}\n")
    (d / "pids.events").write_text("max 0\n")
    return {"memory": d, "pids": d}


def _v1(tmp: Path, oom_kills: int) -> dict[str, Path]:
    mem, pids = tmp / "memory" / "kg", tmp / "pids" / "kg"
    mem.mkdir(parents=True)
    pids.mkdir(parents=True)
    (mem / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kills}\n")
    (mem / "memory.failcnt").write_text("0\n")
    (pids / "pids.events").write_text("max 0\n")
    return {"memory": mem, "pids": pids}


@pytest.mark.parametrize("version,make", [(2, _v2), (1, _v1)])
@pytest.mark.parametrize("k", range(1, len(READS) + 2))
def test_a_set_removed_between_any_two_reads_is_lost_never_a_run_that_counted_no_oom_kill(
        tmp_path: Path, version: int, make: Any, k: int) -> None:
    cg = VanishingSet(version, make(tmp_path, oom_kills=0), k)
    c = cg.counts()
    removed = k <= len(READS)
    assert c.lost == removed
    # What classify() turns into the candidate's judge_died is a set that counted no OOM
    # kill and is not lost; a removed one must never read that way.
    assert c.lost or c.oom_counted
    assert not c.oom_killed


@pytest.mark.parametrize("version,make", [(2, _v2), (1, _v1)])
def test_counts_of_a_set_left_in_place(tmp_path: Path, version: int, make: Any) -> None:
    c = cgroups.CgroupSet(version, make(tmp_path, oom_kills=2)).counts()
    assert c == cgroups.Counts(oom_killed=True, oom_counted=True, pids_hit=False,
                               memory_limit_hits=3 if version == 2 else 0, lost=False)
