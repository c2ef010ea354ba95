"""The pure parts of stopping Ray tasks (grader.leaderboard.ray_stop), on the real file
system and real processes: a run's group in its folders' markers, the node sweep that
waits for that group's owners to die, and a cancelled task's own clean-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grader.backends.cleanup import (
    OWNER_FILE,
    current_owner,
    group_of,
    mark_owner,
    owner_of,
    read_marker,
    set_owner_group,
)
from grader.leaderboard import ray_stop

ROOT = Path(__file__).resolve().parents[2]


def _folder(base: Path, name: str, owner: str, group: str | None) -> Path:
    d = base / name
    d.mkdir(mode=0o700)
    body = {"owner": owner, "keep": False, **({"group": group} if group else {})}
    (d / OWNER_FILE).write_text(json.dumps(body))
    return d


def test_a_named_group_goes_into_the_marker_and_only_while_it_is_set(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    set_owner_group("ray-abc")
    try:
        mark_owner(tmp_path / "a")
    finally:
        set_owner_group(None)
    (tmp_path / "b").mkdir()
    mark_owner(tmp_path / "b")
    assert group_of(read_marker(tmp_path / "a")) == "ray-abc"
    assert group_of(read_marker(tmp_path / "b")) is None
    assert group_of(None) is None and group_of({"owner": "x", "group": 3}) is None


def test_the_node_sweep_waits_for_the_groups_owner_to_die_then_removes_its_folder(
        tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ours = _folder(tmp_path, "kgrader-eval-ours", owner_of(child.pid), "ray-g1")
        scratch = _folder(tmp_path, "kgrader-scratch-ours", owner_of(child.pid), "ray-g1")
        other_run = _folder(tmp_path, "kgrader-eval-other", current_owner(), "ray-g2")
        plain = _folder(tmp_path, "kgrader-eval-plain", current_owner(), None)
        out: list[tuple[int, int]] = []
        t = threading.Thread(target=lambda: out.append(ray_stop.sweep_group("ray-g1", 20.0,
                                                                            tmp_path)))
        t0 = time.monotonic()
        t.start()
        time.sleep(1.5)
        assert ours.is_dir() and t.is_alive(), "a live owner's folder is never taken"
        child.kill()
        child.wait()
        t.join(15)
    finally:
        child.kill()
    assert not t.is_alive() and out == [(2, 0)]
    assert time.monotonic() - t0 < 10, "it returns once the group's folders are gone"
    assert not ours.exists() and not scratch.exists()
    assert other_run.is_dir() and plain.is_dir()  # live owners, other runs: untouched


def test_the_node_sweep_gives_up_after_its_wait_and_says_what_is_left(tmp_path: Path) -> None:
    _folder(tmp_path, "kgrader-eval-live", current_owner(), "ray-g1")
    t0 = time.monotonic()
    assert ray_stop.sweep_group("ray-g1", 1.0, tmp_path) == (0, 1)
    assert 1.0 <= time.monotonic() - t0 < 5


def test_a_cancelled_task_kills_its_sandboxes_and_removes_its_folders(tmp_path: Path) -> None:
    # In a process of its own: the clean-up kills every descendant of the process it runs in.
    code = """
import json, subprocess, sys, tempfile
from pathlib import Path
from grader.backends.cleanup import mark_owner, read_marker
from grader.leaderboard.ray_stop import on_node
seen = {}
def task():
    d = Path(tempfile.mkdtemp(prefix="kgrader-eval-"))
    mark_owner(d)
    seen["group"] = read_marker(d)["group"]
    seen["child"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen["dir"] = d
    raise KeyboardInterrupt  # what ray.cancel(force=False) raises, a finally cut short
try:
    on_node("ray-g9", task)
except KeyboardInterrupt:
    seen["child"].wait(10)
    print(json.dumps({"group": seen["group"], "exists": seen["dir"].exists(),
                      "rc": seen["child"].returncode}))
"""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"group": "ray-g9", "exists": False, "rc": -9}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("kgrader-")]


def test_a_stop_whose_tasks_never_settle_and_whose_sweep_fails_still_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Stuck:
        """A cluster that takes every cancel and settles nothing, then loses its nodes."""

        def __init__(self) -> None:
            self.forced: list[bool] = []

        def cancel(self, ref: object, force: bool) -> None:
            self.forced.append(force)

        def wait(self, refs: list[object], num_returns: int,
                 timeout: float) -> tuple[list[object], list[object]]:
            time.sleep(timeout)
            return [], list(refs)

        def remote(self, **opts: object) -> object:
            raise ConnectionError("the cluster went away")

    monkeypatch.setattr(ray_stop, "CANCEL_WAIT_S", 0.3)
    monkeypatch.setattr(ray_stop, "FORCE_WAIT_S", 0.3)
    ray = Stuck()
    t0 = time.monotonic()
    report = ray_stop.stop_tasks(ray, [object(), object()], "ray-g1")
    assert time.monotonic() - t0 < 5
    assert ray.forced == [False, False, True, True]
    assert (report.cancelled, report.forced, report.left) == (2, 2, 1)  # said, not hidden
