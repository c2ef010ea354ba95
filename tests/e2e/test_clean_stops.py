"""Clean stops and nothing lost: real ``kgrader`` processes, real bwrap (and docker where
it answers), real signals.

* SIGINT / SIGTERM of ``kgrader run`` mid-grading: exit 130 / 143 with one
  ``interrupted:`` line, and no folder, process, container or cgroup left;
* SIGKILL leaves a folder only its owner can enter, which the next ``kgrader run``
  reclaims (while a live run's folder stays);
* ``leaderboard run``: a second run on the same state is refused at once naming the
  holder; SIGTERM stops both workers' sandboxes and commits nothing half-done;
* output paths that cannot be written are refused before any grading, in seconds.

Each run's temp dir is the test's own (``TMPDIR``), so what is left is found exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from grader.backends.cleanup import OWNER_FILE, read_marker
from sandbox.contract import wire

from ._backends import backend_or_skip
from ._ray import quiet_env, start_head
from .conftest import kgrader

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "vector_add_small"
RUNTIME_ONLY = ROOT / "tests" / "policies" / "runtime-only.toml"
# The device of the runs these tests (and the outside-kill and full-TMPDIR ones) interrupt:
# the CPU in CI; KGRADER_TEST_DEVICE=cuda on a GPU host (bench/gpu_integrity.sh, "stops").
DEVICE = os.environ.get("KGRADER_TEST_DEVICE", "cpu")
SLEEPY = "import time\ntime.sleep(600)\n\n\ndef launch(x, y, out):\n    out.copy_(x + y)\n"

pytestmark = pytest.mark.bwrap


def _env(tmpdir: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmpdir), "KGRADER_LEADERBOARD_SECRET": "s" * 32}


def _start(args: list[str], tmpdir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "grader.cli", *args], cwd=ROOT,
                            env=_env(tmpdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _kgrader(args: list[str], tmpdir: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return kgrader(*args, env=_env(tmpdir), timeout=timeout)


def _run_args(cand: Path, backend: str) -> list[str]:
    return ["run", str(EXAMPLE), str(cand), "--backend", backend, "--device", DEVICE,
            "--policy", str(RUNTIME_ONLY), "--compile-s", "600", "--run-s", "600"]


def _sleepy(tmp_path: Path) -> tuple[Path, Path]:
    """The test's own TMPDIR (``tmp_path/tmp``) and a candidate that sleeps in its import."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cand = tmp_path / "sleepy.py"
    cand.write_text(SLEEPY)
    return tmpdir, cand


_SEEN_SECRET: set[Path] = set()


def _started(tmpdir: Path, pid: int) -> list[Path]:
    """Evaluation folders of ``pid`` whose judge has consumed its secret (it runs): the
    secret file was seen there, and is gone."""
    out = []
    for d in tmpdir.glob("kgrader-eval-*"):
        m = read_marker(d)
        if not m or m["owner"].split(":")[1] != str(pid):
            continue
        if (d / "out" / wire.SECRET_NAME).exists():
            _SEEN_SECRET.add(d)
        elif d in _SEEN_SECRET and d.is_dir():
            out.append(d)
    return out


def _wait(what: str, cond: Callable[[], bool], proc: subprocess.Popen[str],
          timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before {what}: "
                                 f"{proc.stderr.read()[-3000:] if proc.stderr else ''}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _tree(pid: int) -> list[psutil.Process]:
    return list(psutil.Process(pid).children(recursive=True))


def _still_running(procs: list[psutil.Process], settle_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + settle_s
    while True:
        left = []
        for p in procs:
            try:  # is_running() compares the start time: a reused pid is not ours
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _containers(pid: int) -> list[str]:
    from grader.backends.docker.prereqs import client

    return [f"{c.name} ({c.status})" for c in
            client().containers.list(all=True, filters={"label": "kgrader=1"}, ignore_removed=True)
            if (c.labels.get("kgrader.owner") or "").split(":")[1:2] == [str(pid)]]


def _cgroups(pid: int) -> list[Path]:
    root = Path("/sys/fs/cgroup")
    return [*root.glob(f"kgrader/*@{pid}@*"), *root.glob(f"memory/kgrader-*@{pid}@*"),
            *root.glob(f"pids/kgrader-*@{pid}@*")]


@pytest.mark.parametrize(("backend", "sig"), [("bwrap", signal.SIGINT), ("bwrap", signal.SIGTERM),
                                              ("docker", signal.SIGTERM)])
def test_stop_signal_mid_grading_exits_128_plus_signal_and_leaves_nothing(
        tmp_path: Path, backend: str, sig: signal.Signals) -> None:
    backend_or_skip(backend)
    tmpdir, cand = _sleepy(tmp_path)
    proc = _start(_run_args(cand, backend), tmpdir)
    try:
        _wait("the sandbox to run", lambda: bool(_started(tmpdir, proc.pid)), proc)
        time.sleep(3)  # the judge has started its runner, which sleeps in the import
        tree = _tree(proc.pid)
        assert backend == "docker" or tree, "no sandbox process under the run"
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    assert [ln for ln in err.splitlines() if ln.startswith("interrupted:")] == \
        [f"interrupted: {sig.name}; stopped every sandbox this command started and removed "
         "its folders"], err[-3000:]
    assert "Traceback" not in err and took < 30
    assert list(tmpdir.iterdir()) == []
    assert _still_running(tree) == []
    assert _cgroups(proc.pid) == []
    if backend == "docker":
        assert _containers(proc.pid) == []


def test_sigkill_leaves_a_private_folder_that_the_next_run_reclaims(tmp_path: Path) -> None:
    tmpdir, cand = _sleepy(tmp_path)
    victim, live = _start(_run_args(cand, "bwrap"), tmpdir), _start(_run_args(cand, "bwrap"), tmpdir)
    try:
        # One loop watches both: a secret is consumed within a second of its writing.
        _wait("both sandboxes", lambda: [bool(_started(tmpdir, p.pid)) for p in (victim, live)]
              == [True, True] and live.poll() is None, victim)
        (left,), (live_dir,) = _started(tmpdir, victim.pid), _started(tmpdir, live.pid)
        with_cgroups = bool(_cgroups(victim.pid))  # where the host offers cgroups
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)

        # What SIGKILL leaves is its owner's alone: a 0700 root, a 0600 marker, and no
        # other uid reaches the candidate's source through it.
        assert left.stat().st_mode & 0o777 == 0o700 and left.stat().st_uid == os.geteuid()
        assert (left / OWNER_FILE).stat().st_mode & 0o777 == 0o600
        for path in (left / "in" / wire.CANDIDATE_NAME, left / OWNER_FILE):
            probe = subprocess.run(["/bin/cat", str(path)], user=65534, group=65534,
                                   capture_output=True, text=True)
            assert probe.returncode != 0 and "Permission denied" in probe.stderr, probe

        # The next kgrader run (here one its scan stops at once) reclaims it, not the live one.
        t0 = time.monotonic()
        nxt = _kgrader(["run", str(EXAMPLE), str(EXAMPLE / "candidates" / "broken.py"),
                        "--backend", "bwrap", "--device", "cpu"], tmpdir)
        assert nxt.returncode == 1 and time.monotonic() - t0 < 30, nxt.stderr[-2000:]
        assert not left.exists() and _cgroups(victim.pid) == []
        assert live_dir.is_dir() and live.poll() is None, "the sweep touched a live run"
        assert bool(_cgroups(live.pid)) == with_cgroups, "the sweep removed a live cgroup"
    finally:
        for p in (victim, live):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=60)
    assert live.returncode == 130
    assert list(tmpdir.iterdir()) == []


def test_sigkilled_docker_runs_container_is_reclaimed_by_the_next_run(tmp_path: Path) -> None:
    backend_or_skip("docker")
    tmpdir, cand = _sleepy(tmp_path)
    victim = _start(_run_args(cand, "docker"), tmpdir)
    try:
        _wait("the container", lambda: bool(_started(tmpdir, victim.pid)), victim)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    # Its judge's tether (the host's stdin attach) closed with the host: the container
    # stops by itself, seconds later, instead of running on until the next sweep.
    left = _containers(victim.pid)
    deadline = time.monotonic() + 30
    while any("(running)" in c for c in left) and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _containers(victim.pid)
    assert not any("(running)" in c for c in left), left
    if not left:
        # Gone, not merely stopped: only another kgrader command's sweep removes a dead
        # owner's container, and only a parallel suite runs one meanwhile (what this test
        # checks next, done by a neighbour).
        assert os.environ.get("PYTEST_XDIST_WORKER"), "the killed run's container vanished"
    nxt = _kgrader(["run", str(EXAMPLE), str(EXAMPLE / "candidates" / "broken.py"),
                    "--backend", "docker", "--device", "cpu"], tmpdir)
    assert nxt.returncode == 1, nxt.stderr[-2000:]
    assert _containers(victim.pid) == [] and list(tmpdir.iterdir()) == []


def _sleepy_board(root: Path) -> tuple[Path, Path]:
    """A one-task board (the default policy, so the sleeping submissions pass the scan)
    with two submissions that sleep at import: both workers stay busy."""
    task = root / "tasks" / "tiny_add"
    task.mkdir(parents=True)
    spec = json.loads((EXAMPLE / "task.json").read_text())
    spec.update(name="tiny_add", policy="default", shapes={"tune": [{"M": 8, "N": 256}],
                                                            "hidden": [{"M": 3, "N": 100}]},
                limits={"compile_s": 600, "run_s": 600, "memory_mib": 4096})
    (task / "task.json").write_text(json.dumps(spec))
    shutil.copy(EXAMPLE / "reference.py", task / "reference.py")
    for name in ("sleeper_a", "sleeper_b"):
        (root / "subs" / name).mkdir(parents=True)
        (root / "subs" / name / "tiny_add.py").write_text(f"# {name}\n{SLEEPY}")  # not duplicates
    return task, root / "subs"


def test_leaderboard_state_is_locked_and_sigterm_stops_every_worker(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    task, subs = _sleepy_board(tmp_path)
    state = tmp_path / "state.sqlite"
    args = ["leaderboard", "run", "--tasks", str(task), "--submissions", str(subs), "--state",
            str(state), "--workers", "2", "--device", "cpu", "--backend", "bwrap", "--top-k", "1"]
    first = _start(args, tmpdir)
    try:
        _wait("both workers' sandboxes", lambda: len(_started(tmpdir, first.pid)) == 2
              and all("time.sleep" in (d / "in" / wire.CANDIDATE_NAME).read_text()
                      for d in _started(tmpdir, first.pid)), first, timeout=400)
        time.sleep(10)  # both have imported torch and sleep: the 2 cores are free again
        t0 = time.monotonic()
        second = _kgrader(args, tmpdir, timeout=120)
        # refused before it grades anything (grading this board takes over ten minutes); the
        # bound only allows for a CLI start on a loaded 2-core host
        assert time.monotonic() - t0 < 60 and second.returncode == 2, second.stderr[-2000:]
        assert f"is in use by another `kgrader leaderboard run` (pid {first.pid})" in second.stderr
        tree = _tree(first.pid)
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, err[-3000:]
    assert "interrupted: SIGTERM" in err and "Traceback" not in err
    assert list(tmpdir.iterdir()) == []
    assert _still_running(tree) == [] and _cgroups(first.pid) == []
    import sqlite3

    conn = sqlite3.connect(state)
    rows = conn.execute("SELECT submission, round FROM evaluations").fetchall()
    conn.close()
    assert rows == [("(reference)", "reference")], rows  # nothing half-done was committed


@pytest.mark.parametrize("case", ["records_is_file", "out_is_file", "report_json_is_dir",
                                  "state_is_dir", "state_under_file", "demo_out_is_file"])
def test_unwritable_output_paths_are_refused_before_grading(tmp_path: Path, case: str) -> None:
    # "Before grading": nothing staged in TMPDIR, and the answer came sooner than any
    # grading could end. `run` grades a candidate that sleeps 600 s in its import (the
    # call's 60 s limit would fire); a leaderboard grades its reference and three
    # submissions first (over 30 s idle, minutes under load). A fixed 5 s bound failed
    # beside two evaluations per core: the refusals took 7-17 s there, the CLI's start-up.
    tmpdir, sleepy = _sleepy(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    run = ["run", str(EXAMPLE), str(sleepy), "--backend", "bwrap", "--device", "cpu",
           "--compile-s", "600", "--run-s", "600"]
    board = ["leaderboard", "run", "--tasks", str(EXAMPLE), "--submissions",
             str(ROOT / "examples" / "leaderboard" / "submissions"), "--device", "cpu",
             "--backend", "bwrap"]
    (tmp_path / "out" / "report.json").mkdir(parents=True)
    args, message = {
        "records_is_file": ([*run, "--records", str(afile)], f"--records {afile} is a file"),
        "out_is_file": ([*run, "--out", str(afile)], f"--out {afile} is a file"),
        "report_json_is_dir": ([*run, "--out", str(tmp_path / "out")], "is a folder, not a file"),
        "state_is_dir": ([*board, "--state", str(tmp_path)], f"--state {tmp_path} is a folder"),
        "state_under_file": ([*board, "--state", str(afile / "s.sqlite")], "cannot be created"),
        "demo_out_is_file": (["leaderboard", "demo", str(afile), "--backend", "bwrap",
                              "--device", "cpu"], f"OUT_DIR {afile} is a file"),
    }[case]
    t0 = time.monotonic()
    p = _kgrader(args, tmpdir, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 2 and (args[0] == "run" or took < 30), (took, p.stderr[-2000:])
    assert p.stderr.startswith("error: ") and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert list(tmpdir.iterdir()) == [], "something was staged before the refusal"


@pytest.mark.slow
def test_sigterm_of_a_ray_leaderboard_run_stops_the_workers_sandboxes(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    import tempfile

    tmpdir = Path(tempfile.mkdtemp(prefix="kgray-", dir="/tmp"))  # Ray's socket paths: short
    task, subs = _sleepy_board(tmp_path)
    # The workers run this checkout, with the test's temp dir: their folders are found.
    env = {**quiet_env(_env(tmpdir)), "PYTHONPATH": str(ROOT)}
    head = start_head(port, 2, env)
    try:
        args = ["leaderboard", "run", "--tasks", str(task), "--submissions", str(subs),
                "--state", str(tmp_path / "state.sqlite"), "--engine", "ray", "--ray-address",
                f"127.0.0.1:{port}", "--device", "cpu", "--backend", "bwrap", "--top-k", "1"]
        driver = subprocess.Popen([sys.executable, "-m", "grader.cli", *args], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def sleepers() -> list[Path]:
            return [d for d in tmpdir.glob("kgrader-eval-*")
                    if "time.sleep" in _read(d / "in" / wire.CANDIDATE_NAME)]

        _wait("both Ray workers' sandboxes", lambda: len(sleepers()) == 2, driver, timeout=400)
        time.sleep(5)
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=120)
        assert driver.returncode == 143, err[-3000:]
        # Each cancelled task stops its own sandbox and removes its folder on its node, in its
        # worker (a cancelled task's result can be settled while its finally still runs).
        def left() -> list[str]:
            return [p.name for p in tmpdir.iterdir() if p.name.startswith("kgrader-")]

        deadline = time.monotonic() + 60
        while left() and time.monotonic() < deadline:
            time.sleep(0.5)
        leftover = {name: sorted(str(p.relative_to(tmpdir)) for p in (tmpdir / name).rglob("*"))[:20]
                    for name in left()}
        assert not leftover, (leftover, err[-3000:], _ray_worker_logs(tmpdir))
    finally:
        head.stop()
        shutil.rmtree(tmpdir, ignore_errors=True)


def _ray_worker_logs(tmpdir: Path) -> str:
    """The tail of every Ray worker's log in the session under ``tmpdir`` (what a cancelled
    task printed on its way out), for a failure's message."""
    out = []
    logs = [*tmpdir.glob("ray/session_*/logs/worker-*"),
            *Path("/tmp/ray/session_latest/logs").glob("worker-*")]
    for log in sorted(logs):
        text = _read(log)
        if text.strip():
            out.append(f"== {log.name}\n{text[-1500:]}")
    return "\n".join(out)[-6000:]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
