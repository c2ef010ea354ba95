"""Supervising one bwrap sandbox from the host: start, drain, watch, wait, kill, classify."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from grader.backends import cgroups
from grader.backends.base import SandboxOutcome, SandboxSpec
from grader.backends.bwrap.hoststeps import HostSteps
from grader.backends.cancel import watch
from grader.backends.classify import Evidence, classify, decode_status
from grader.backends.enforcement import Enforcement
from grader.backends.gate import MAX_WAIT_FACTOR
from grader.backends.gpu_watch import GpuWatch
from grader.backends.output import OutputDrain, collect, fd_chunks
from grader.backends.watchdog import Watchdog
from grader.errors import SandboxUnavailableError
from grader.logs import get_logger

log = get_logger("kgrader.bwrap")


@dataclass
class Supervision:
    """What the host saw of one bwrap run."""

    spec: SandboxSpec
    returncode: int | None
    wall_s: float
    stdout: OutputDrain
    stderr: OutputDrain
    evidence: Evidence
    gpu_watchdog: bool | None  # None: none ran; else whether NVML was available

    def outcome(self, enforcement: Enforcement, backend: str) -> SandboxOutcome:
        out, err, truncated = collect(self.stdout, self.stderr, self.spec.limits.output_bytes)
        exit_code, sig = decode_status(self.returncode)
        ev = self.evidence
        return SandboxOutcome(
            backend=backend, exit_code=exit_code, signal=sig, wall_s=self.wall_s,
            stdout=out, stderr=err, timed_out=ev.timed_out, oom_killed=ev.oom_killed,
            pids_limited=ev.pids_limited, output_truncated=truncated,
            limit_fired=classify(ev), enforcement=enforcement,
            memory_limit_hits=ev.memory_limit_hits, oom_counted=ev.oom_counted,
            cgroup_lost=ev.cgroup_lost, device_shared_by=ev.device_shared_by,
            device_watched=bool(self.gpu_watchdog))


def supervise(argv: list[str], steps: HostSteps, spec: SandboxSpec,
              cg: cgroups.CgroupSet | None) -> Supervision:
    """Run ``argv`` with ``steps`` as its pre-exec pipeline until it ends or a limit fires.

    Always kills the whole tree and destroys ``cg`` before returning or raising; a turn at
    the measurement gate (``spec.gate``) is given back only after that.
    """
    try:
        return _supervise(argv, steps, spec, cg)
    finally:
        if spec.gate is not None:
            spec.gate.release()


def _wait(proc: subprocess.Popen[bytes], spec: SandboxSpec) -> bool:
    """Wait for the sandbox; True when its wall limit fired. With a gate, the limit counts
    from the grant (grader.backends.gate)."""
    wall_s = spec.limits.wall_s
    if spec.gate is not None:
        granted = spec.gate.wait(lambda: proc.poll() is None, wall_s * MAX_WAIT_FACTOR)
        if granted is None:
            if proc.poll() is not None:
                return False  # it ended before its turn (a judge that failed to start)
            why = spec.gate.refused()
            if why:
                log.info("sandbox_discarded", label=spec.label, why=why)
            else:
                log.error("gate_wait_exceeded", label=spec.label, gate=repr(spec.gate.gate),
                          limit_s=wall_s * MAX_WAIT_FACTOR)
            return True
        wall_s = max(0.0, granted + wall_s - time.monotonic())
    return not exited_within(proc, wall_s)


def exited_within(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether ``proc`` exits (and is reaped) within ``timeout`` seconds. Woken the moment it
    exits, by a pidfd: ``Popen.wait(timeout)`` polls with sleeps of up to 50 ms, which every
    evaluation paid between its judge's exit and its report (25 ms on average)."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):  # no pidfd here: the polling wait
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if select.select([fd], [], [], left)[0]:
                time.sleep(0.001)  # it exited: the next poll reaps it (unless another
                # thread's wait holds Popen's lock for a moment)
    finally:
        os.close(fd)
    return True


def _supervise(argv: list[str], steps: HostSteps, spec: SandboxSpec,
               cg: cgroups.CgroupSet | None) -> Supervision:
    lim = spec.limits
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=steps, start_new_session=True)
    except (OSError, subprocess.SubprocessError) as e:
        if cg:
            cg.destroy()
        raise SandboxUnavailableError(f"cannot start bwrap: {e}") from None
    assert proc.stdout is not None and proc.stderr is not None
    drains = [OutputDrain(fd_chunks(p.fileno()), lim.output_bytes, close=p.close)
              for p in (proc.stdout, proc.stderr)]
    for d in drains:
        d.start()
    killed = threading.Event()

    def kill_tree() -> None:
        killed.set()
        if cg is not None:
            cg.kill_all()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    dog = Watchdog(proc.pid, memory_bytes=None if cg else lim.memory_mib << 20,
                   pids=None if cg else lim.pids, kill=kill_tree,
                   pids_hit=cg.pids_hit if cg else None)
    dog.start()
    end_watch = watch(spec.cancel, kill_tree)  # a cancelled job's sandbox (grader.service)
    gdog = None
    if spec.device == "cuda":
        turn = spec.gate  # others' work before its grant is no sharing (grader.backends.gate)
        gdog = GpuWatch(proc.pid, spec.gpu_ids,
                        lim.gpu_memory_mib << 20 if lim.gpu_memory_mib else None, kill_tree,
                        counting=lambda: turn is None or turn.granted_at is not None)
        gdog.start()
    timed_out = False
    try:
        if _wait(proc, spec):
            timed_out = True
            kill_tree()
            proc.wait()
    except BaseException:
        kill_tree()
        proc.wait()
        if cg is not None:
            cg.destroy()
        raise
    finally:
        end_watch()
        dog.stop()
        if gdog is not None:
            gdog.stop()
        if cg is not None:
            cg.kill_all()
        for d in drains:
            d.join(5)
    wall = time.monotonic() - t0
    counts = cg.counts() if cg is not None else None  # before this run's own removal
    evidence = Evidence(
        timed_out=timed_out,
        oom_killed=bool(counts and counts.oom_killed) or dog.fired == "memory_limit",
        gpu_memory_exceeded=bool(gdog and gdog.fired),
        pids_limited=bool(counts and counts.pids_hit) or dog.fired == "pids_limit",
        signal=decode_status(proc.returncode)[1],
        memory_limit_hits=counts.memory_limit_hits if counts else 0,
        oom_counted=bool(counts and counts.oom_counted),
        cgroup_lost=bool(counts and counts.lost),
        device_shared_by=gdog.shared_by() if gdog is not None else (),
    )
    if cg is not None:
        cg.destroy()
    return Supervision(spec=spec, returncode=proc.returncode, wall_s=wall, stdout=drains[0],
                       stderr=drains[1], evidence=evidence,
                       gpu_watchdog=None if gdog is None else gdog.available)
