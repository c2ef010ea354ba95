"""Pure logic of clean stops, on the real file system and real processes: output-path
checks, the automatic sweep's owner rule, reclaiming this process's own folders, and the
leaderboard state's lock (a real ``flock``, held by a real second process)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.backends import stop
from grader.backends.cleanup import (
    OWNER_FILE,
    current_owner,
    mark_kept,
    mark_owner,
    owner_gone,
    owner_of,
    sweep_orphans,
)
from grader.leaderboard.state import StateBusy, exclusive
from grader.outpaths import OutputPathError, check_output_dir, check_output_file


def test_output_dir_that_is_a_file_or_lies_under_one_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputPathError, match="is a file, not a folder"):
        check_output_dir(f, "--records")
    with pytest.raises(OutputPathError, match="cannot be created"):
        check_output_dir(f / "a" / "b", "--out")
    check_output_dir(tmp_path / "new" / "deeper", "--out")  # creatable: fine
    assert not (tmp_path / "new").exists(), "a check must create nothing"


def test_output_file_that_is_a_folder_or_lies_under_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputPathError, match="is a folder, not a file"):
        check_output_file(tmp_path, "--state")
    with pytest.raises(OutputPathError, match="cannot be created"):
        check_output_file(f / "s.sqlite", "--state")
    check_output_file(f, "--state")
    check_output_file(tmp_path / "sub" / "s.sqlite", "--state")


@pytest.mark.skipif(os.geteuid() == 0, reason="root passes every permission bit")
def test_unwritable_parent_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(OutputPathError, match=r"cannot create the folder .*Permission denied"):
        check_output_dir(ro / "out", "--out")


def _dead_owner() -> str:
    """The owner token of a real process that has exited."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    token = owner_of(p.pid)
    p.kill()
    p.wait()
    return token


def _folder(base: Path, name: str, owner: str | None, keep: bool = False) -> Path:
    d = base / name
    d.mkdir(mode=0o700)
    (d / "in").mkdir()
    if owner is not None:
        (d / OWNER_FILE).write_text(json.dumps({"owner": owner, "keep": keep}))
    return d


def test_owner_gone_needs_proof_that_a_process_of_this_host_ended() -> None:
    host = socket.gethostname()
    assert owner_gone(_dead_owner())
    assert not owner_gone(current_owner())
    assert not owner_gone(f"{host}:{os.getpid()}:?")  # no start time: proves nothing
    assert not owner_gone(f"other-host:{os.getpid()}:1.00")  # another host's
    assert not owner_gone("garbage") and not owner_gone(None)
    assert owner_gone(f"{host}:{os.getpid()}:1.00")  # this pid, another start: a reuse


def test_sweep_removes_only_folders_whose_owner_is_provably_gone(tmp_path: Path) -> None:
    dead = _dead_owner()
    gone = _folder(tmp_path, "kgrader-eval-gone", dead)
    scratch = _folder(tmp_path, "kgrader-scratch-gone", dead)
    live = _folder(tmp_path, "kgrader-eval-live", current_owner())
    kept = _folder(tmp_path, "kgrader-eval-kept", dead, keep=True)
    unmarked = _folder(tmp_path, "kgrader-eval-unmarked", None)
    foreign = _folder(tmp_path, "kgrader-eval-foreign", "other-host:1:1.00")
    other = _folder(tmp_path, "not-kgrader", dead)
    t0 = time.monotonic()
    report = sweep_orphans(tmp_path)
    assert time.monotonic() - t0 < 2
    assert sorted(report.folders_removed) == sorted([str(gone), str(scratch)])
    assert not gone.exists() and not scratch.exists()
    assert all(p.is_dir() for p in (live, kept, unmarked, foreign, other))


def test_reclaim_own_removes_this_process_folders_even_without_their_marker(tmp_path: Path) -> None:
    base = tmp_path / "tmp"
    base.mkdir()
    mine = base / "kgrader-eval-mine"
    mine.mkdir(mode=0o700)
    mark_owner(mine)
    cut_short = tmp_path / "elsewhere" / "kgrader-eval-cut"  # a work_dir parent
    cut_short.mkdir(parents=True, mode=0o700)
    mark_owner(cut_short)
    (cut_short / OWNER_FILE).unlink()  # an interrupted rmtree took the marker first
    kept = base / "kgrader-eval-kept"
    kept.mkdir(mode=0o700)
    mark_owner(kept)
    mark_kept(kept)
    others = _folder(base, "kgrader-eval-others", _dead_owner())
    assert stop.reclaim_own(base) >= 2
    assert not mine.exists() and not cut_short.exists()
    assert kept.is_dir() and others.is_dir()  # kept on purpose; not this process's


def test_a_stopped_process_prepares_no_new_evaluation(tmp_path: Path) -> None:
    code = ("import sys; from grader.backends import stop; from grader.judgecall import "
            "make_eval_dirs\nstop.request_stop()\ntry:\n    make_eval_dirs(None, 'kgrader-eval-')\n"
            "except stop.Stopped as e:\n    print(e.code)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert p.stdout.strip() == "interrupted", p.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_state_lock_refuses_a_second_holder_naming_the_first(tmp_path: Path) -> None:
    state = tmp_path / "lb.sqlite"
    with exclusive(state), pytest.raises(StateBusy, match=f"pid {os.getpid()}"), \
            exclusive(state):
        pass
    with exclusive(state):  # released on exit
        pass


def test_state_lock_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    state = tmp_path / "lb.sqlite"
    code = ("import sys, time; from grader.leaderboard.state import exclusive\n"
            f"with exclusive({str(state)!r}):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StateBusy, match=f"pid {holder.pid}"), exclusive(state):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with exclusive(state):  # the kernel dropped the dead holder's lock
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
