"""The judge's handle on the problem process: spawn it as a principal of its own, talk, kill.

A task's problem code (its reference, input generator and checker: KernelBench and GPU
MODE files imported from outside, or kgrader's own ``reference.py``) runs in one process
of its own, started like a runner: its own uid and private HOME from the runner range
(:mod:`sandbox.launcher.identity`), no capability, the runner's lockdown and seccomp filter
(:func:`sandbox.launcher.harden.lock_down_runner`) before torch or any problem code is imported,
and a clean environment. It never holds the record's key, never sees the request, and
cannot read the judge's memory (the judge is undumpable and of another uid). It answers
over the framed JSON protocol (:mod:`sandbox.launcher.protocol`); tensors cross in a buffer the
judge allocated and hands over as a file descriptor, as a runner's. Standard library only:
it can be started ahead, while the judge imports torch (:func:`start_ahead`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from typing import Any

from sandbox.launcher import harden, identity, protocol
from sandbox.launcher.proc import spawn_principal, wait_exit

ENTRY = "sandbox.problem.main"
OWNER = "<problem>"  # identity's owner label for the problem's uid (not a module path)
MAX_REPLY = 4 << 20  # a layout's template or a checker's text, never tensor bytes
# How long one request may take (set from the request's limits by :func:`start_ahead`):
# the setup gets the compile budget, each call into problem code a run stage's, both far
# inside the sandbox's wall limit, so that a hung problem is reported as the task's fault
# (``reference_failed``), not as a wall-clock kill the host might lay at the candidate.
budget = {"setup_s": 120.0, "call_s": 300.0}


class ProblemDied(Exception):
    """The problem process did not answer properly: ``code`` says how, ``message`` why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class ProblemError(Exception):
    """The problem process answered with an error (its own account: data, cleaned later)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class ProblemHandle:
    """One problem process under its own uid, driven over two pipes and a unix socket."""

    def __init__(self, device: str):
        try:
            self.identity = identity.new_runner_identity(OWNER)
        except (identity.IsolationUnavailable, OSError) as e:
            raise ProblemDied(identity.ISOLATION_CODE, str(e)) from None
        try:
            identity.prepare_fork()
        except (identity.IsolationUnavailable, OSError) as e:
            identity.remove_home(self.identity)
            raise ProblemDied(identity.ISOLATION_CODE, str(e)) from None
        self.uid = self.identity.uid
        try:
            self.proc, self.wfd, self.rfd, self.sock = spawn_principal(
                self.identity, device, (),
                lambda r, w, fd_sock: [sys.executable, "-m", ENTRY, "--read-fd", str(r),
                                       "--write-fd", str(w), "--fd-sock", str(fd_sock),
                                       "--device", device])
        except OSError as e:
            identity.remove_home(self.identity)
            raise ProblemDied(identity.ISOLATION_CODE,
                              f"cannot start the problem process as uid {self.uid}: {e}") from None
        self.started = time.monotonic()
        self.dead = False

    def request(self, msg: dict[str, Any], timeout: float, fds: list[int] | None = None
                ) -> dict[str, Any]:
        """Send ``msg`` (and ``fds`` over the socket), return the answer's body.

        Raises :class:`ProblemError` for an error answer, :class:`ProblemDied` when the
        process is gone, silent past ``timeout`` (then killed) or speaks nonsense."""
        self.send(msg, fds)
        return self.await_answer(str(msg.get("op")), timeout)

    def send(self, msg: dict[str, Any], fds: list[int] | None = None) -> None:
        """The first half of :meth:`request`: every request sent is answered, in order."""
        if self.dead:
            raise ProblemDied("problem_gone", "the problem process was already stopped")
        try:
            protocol.send_json(self.wfd, msg)
            if fds:
                socket.send_fds(self.sock, [b"F"], fds)
        except (protocol.ChannelClosed, OSError):
            raise ProblemDied("crashed", self._death()) from None

    def await_answer(self, op: str, timeout: float) -> dict[str, Any]:
        """The second half of :meth:`request`: the answer to the oldest request (``op``)."""
        if self.dead:
            raise ProblemDied("problem_gone", "the problem process was already stopped")
        try:
            reply = protocol.recv_json(self.rfd, max(0.0, timeout), MAX_REPLY)
        except protocol.ChannelTimeout:
            self.kill()
            raise ProblemDied("timeout", f"no answer to {op!r} within {timeout:.0f} s; "
                              "the problem process was killed") from None
        except (protocol.ChannelClosed, OSError):
            raise ProblemDied("crashed", self._death()) from None
        except protocol.ProtocolViolation as e:
            self.kill()
            raise ProblemDied("protocol_violation", f"invalid message: {e}") from None
        if reply.get("ok") is True:
            return reply
        err = reply.get("error")
        if not isinstance(err, dict):
            self.kill()
            raise ProblemDied("protocol_violation", "an answer with neither ok nor error")
        return _raise(err)

    def _death(self) -> str:
        rc = wait_exit(self.proc, 5)
        if rc is None:
            self.kill()
            rc = self.proc.wait()
        self.kill()
        if rc == harden.LOCKDOWN_EXIT:
            return f"the problem process (uid {self.uid}) could not be confined"
        if rc < 0:
            sig = -rc
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return f"the problem process was killed by {name}"
        return f"the problem process exited with status {rc}"

    def kill(self) -> None:
        """Kill the process and everything of its uid (the judge has no CAP_KILL)."""
        self.dead = True
        identity.kill_all(self.identity)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self.proc.kill()
        wait_exit(self.proc, 5)

    def ask_exit(self) -> None:
        """Tell the process to exit, without waiting (:meth:`close` waits)."""
        if not self.dead:
            with contextlib.suppress(protocol.ChannelClosed, OSError):
                protocol.send_json(self.wfd, {"op": "exit"})

    def close(self) -> None:
        if not self.dead:
            self.ask_exit()
            wait_exit(self.proc, 5)
        self.kill()
        for fd in (self.wfd, self.rfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.sock.close()
        wait_exit(self.proc, 5)
        identity.remove_home(self.identity)  # its processes are dead: nothing writes there now


def _raise(err: dict[str, Any]) -> dict[str, Any]:
    raise ProblemError(str(err.get("code", "reference_failed"))[:64],
                       str(err.get("message", ""))[:4000])


_ahead: list[ProblemHandle] = []


def start_ahead(device: str, compile_s: float, run_s: float) -> None:
    """Start the problem process now (it imports torch while the judge does); a failure
    here only means no head start. ``compile_s``/``run_s``: the request's limits."""
    budget.update(setup_s=max(60.0, compile_s), call_s=max(30.0, run_s))
    if not _ahead:
        with contextlib.suppress(ProblemDied, OSError):
            _ahead.append(ProblemHandle(device))


def take(device: str) -> ProblemHandle:
    """The process started ahead, or a new one."""
    return _ahead.pop() if _ahead else ProblemHandle(device)


def pending() -> dict[int, int]:
    """pid -> uid of a problem process started ahead and not yet taken."""
    return {h.proc.pid: h.uid for h in _ahead}


def close_ahead() -> None:
    while _ahead:
        _ahead.pop().close()
