"""sandbox.judge.idle against real processes: the judge's read of a process's CPU clock and of
its caught signals (/proc), on a sleeper, a spinner and a process that installs handlers."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge import idle


@dataclass
class _Proc:
    pid: int


@dataclass
class _Runner:
    proc: _Proc


@dataclass
class _Side:
    runner: _Runner
    prefix: tuple[str, ...] = ()
    base_caught: int = -1
    idle_at: idle.Counters | None = None
    idle_max_ns: tuple[int, int] = field(default=(0, 0))


def _start(code: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", code + "\nprint('ready', flush=True)\n"
                          "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def _side(p: subprocess.Popen[str]) -> _Side:
    side = _Side(_Runner(_Proc(p.pid)))
    idle.baseline(side)
    idle.replied(side)
    return side


def test_a_sleeping_runner_passes_and_its_figures_are_kept(procs: list[subprocess.Popen[str]]) -> None:
    p = _start("import signal")
    procs.append(p)
    side = _side(p)
    assert side.base_caught & (1 << (2 - 1))  # Python catches SIGINT: the harness's baseline
    time.sleep(0.05)
    touched = idle.before_touch(side, "benchmark")
    assert touched is not None and touched.threads is not None
    time.sleep(0.05)  # the judge writes: the runner sleeps in its read throughout
    idle.before_send(side, "benchmark", touched)
    assert side.idle_max_ns[0] < idle.TAIL_NS and side.idle_max_ns[1] == 0


def test_cpu_used_between_reply_and_call_is_work_between_calls(procs: list[subprocess.Popen[str]]) -> None:
    # a handler-like burst after the "reply": the process spins 50 ms, then sleeps again
    p = _start("import threading, time\n"
               "def burst():\n"
               "    time.sleep(0.05); t = time.process_time()\n"
               "    while time.process_time() - t < 0.05: pass\n"
               "threading.Thread(target=burst).start()")
    procs.append(p)
    side = _side(p)
    time.sleep(0.3)
    with pytest.raises(StageFailure) as e:
        idle.before_touch(side, "accept")
    assert e.value.error.code == "work_between_calls" and e.value.error.stage == "accept"
    assert e.value.error.detail["cpu_ms"] >= 40


def test_a_harness_thread_spinning_after_the_call_is_not_blamed(
        procs: list[subprocess.Popen[str]]) -> None:
    # an OpenMP worker spins after its last parallel region (docker: 5-7 ms), then sleeps
    p = _start("import threading, time\n"
               "def worker():\n"
               "    time.sleep(0.05); t = time.process_time()\n"
               "    while time.process_time() - t < 0.01: pass\n"
               "    time.sleep(3600)\n"
               "threading.Thread(target=worker, daemon=True).start()")
    procs.append(p)
    side = _side(p)
    time.sleep(0.3)
    touched = idle.before_touch(side, "benchmark")
    idle.before_send(side, "benchmark", touched)
    assert side.idle_max_ns[0] < idle.TAIL_NS  # the calling thread's figure


def test_the_calling_thread_working_after_its_reply_is_work_between_calls(
        procs: list[subprocess.Popen[str]]) -> None:
    p = _start("import signal, time\n"
               "def h(*a):\n"
               "    t = time.process_time()\n"
               "    while time.process_time() - t < 0.02: pass\n"
               "signal.signal(signal.SIGUSR1, h)")
    procs.append(p)
    side = _side(p)
    p.send_signal(10)  # SIGUSR1: the handler runs in the calling thread, 20 ms
    time.sleep(0.2)
    with pytest.raises(StageFailure) as e:
        idle.before_touch(side, "correctness")
    assert "calling thread" in e.value.error.message and e.value.error.detail["cpu_ms"] >= 15


def test_cpu_used_while_the_inputs_are_written_is_work_between_calls(
        procs: list[subprocess.Popen[str]]) -> None:
    p = _start("import threading, time\n"
               "def burst():\n"
               "    time.sleep(0.2); t = time.process_time()\n"
               "    while time.process_time() - t < 0.02: pass\n"
               "threading.Thread(target=burst).start()")
    procs.append(p)
    side = _side(p)
    touched = idle.before_touch(side, "benchmark")  # before the burst: idle
    time.sleep(0.4)  # the judge "writes"; the process computes meanwhile
    with pytest.raises(StageFailure) as e:
        idle.before_send(side, "benchmark", touched)
    assert e.value.error.code == "work_between_calls"
    assert "while the judge wrote" in e.value.error.message and "threads that ended" in e.value.error.message


def test_a_calling_thread_that_wakes_while_the_inputs_are_written_is_caught(
        procs: list[subprocess.Popen[str]]) -> None:
    # A poller that sleeps between looks (a finaliser or a handler waiting for the judge's
    # poison) is asleep when the judge looks and uses little CPU, but its thread runs.
    p = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.001)"])
    procs.append(p)  # type: ignore[arg-type]
    time.sleep(0.3)
    side = _Side(_Runner(_Proc(p.pid)))
    idle.baseline(side)
    idle.replied(side)
    touched = idle.before_touch(side, "benchmark")
    assert touched is not None and touched.threads is not None  # it was asleep
    time.sleep(0.01)
    with pytest.raises(StageFailure) as e:
        idle.before_send(side, "benchmark", touched)
    assert e.value.error.code == "work_between_calls" and "calling thread" in e.value.error.message
    assert e.value.error.detail["cpu_ms"] < 1.0  # a little CPU, but it ran


@pytest.mark.parametrize("how", ["python", "ctypes"])
def test_a_handler_installed_after_the_baseline_is_refused(
        procs: list[subprocess.Popen[str]], how: str) -> None:
    p = _start("import sys")
    procs.append(p)
    side = _side(p)
    install = {  # Python's signal module, or libc sigaction with a C handler (SIG_DFL to Python)
        "python": "import signal; signal.signal(signal.SIGALRM, lambda *a: None)",
        "ctypes": "import ctypes, signal\n"
                  "class SA(ctypes.Structure):\n"
                  "    _fields_ = [('h', ctypes.c_void_p), ('m', ctypes.c_ulong * 16),"
                  " ('f', ctypes.c_int), ('r', ctypes.c_void_p)]\n"
                  "h = ctypes.cast(ctypes.pythonapi.PyErr_SetInterrupt, ctypes.c_void_p).value\n"
                  "ctypes.CDLL(None).sigaction(signal.SIGALRM, ctypes.byref(SA(h, (ctypes.c_ulong * 16)(), 0, None)), None)\n"
                  "assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL",
    }[how]
    q = _start(install)
    procs.append(q)
    side_q = _Side(_Runner(_Proc(q.pid)), base_caught=side.base_caught)  # the same harness's
    idle.check_handlers(side, "compile", "after its import")  # nothing new: passes
    with pytest.raises(StageFailure) as e:
        idle.check_handlers(side_q, "compile", "after its import")
    assert e.value.error.code == "signal_handler" and "SIGALRM" in e.value.error.message


def test_an_unwatched_side_is_not_read() -> None:
    side = _Side(_Runner(_Proc(2 ** 22 + 7)), prefix=("nsys",))
    idle.baseline(side)
    idle.replied(side)
    assert side.base_caught == -1 and idle.before_touch(side, "benchmark") is None


def test_a_runner_that_has_exited_is_left_to_its_next_exchange(
        procs: list[subprocess.Popen[str]]) -> None:
    # An exit after the reply is the candidate's (the next send or receive says how): never
    # an infrastructure fault of the judge's reads, and no 2 s wait on a zombie.
    p = _start("import sys")
    procs.append(p)
    side = _side(p)
    assert p.stdin is not None
    p.stdin.close()  # it exits; unreaped, it is a zombie
    time.sleep(0.3)
    t0 = time.monotonic()
    touched = idle.before_touch(side, "benchmark")
    assert time.monotonic() - t0 < 1.0
    idle.before_send(side, "benchmark", touched)
    p.wait()  # reaped: its /proc entries are gone
    gone = _Side(_Runner(_Proc(p.pid)), base_caught=0)
    idle.replied(gone)
    assert gone.idle_at is None and idle.before_touch(gone, "benchmark") is None


def test_a_thread_started_between_calls_is_work_between_calls(
        procs: list[subprocess.Popen[str]]) -> None:
    p = _start("import threading, time\n"
               "def later():\n"
               "    time.sleep(0.1)\n"
               "    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
               "threading.Timer(0.0, later).start()")
    procs.append(p)
    time.sleep(0.05)  # the Timer's own thread is running: part of the "reply" counters
    side = _side(p)
    time.sleep(0.4)
    with pytest.raises(StageFailure) as e:
        idle.before_touch(side, "benchmark")
    assert "started 1 thread(s) between its last reply" in e.value.error.message
