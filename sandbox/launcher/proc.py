"""The judge's handle on one runner process: spawn, request with a deadline, kill.

Each runner runs under its own uid (``sandbox.launcher.identity``): the child switches groups, gid
and uid in C before exec (``Popen(user=, group=, extra_groups=)``), after the judge emptied
the forking thread's inheritable and ambient capability sets, so the runner starts with no
capability at all. ``sandbox.runner.boot`` then checks all of that and installs seccomp
before torch or the candidate is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.contract import codes, text
from sandbox.launcher import builds, harden, identity, protocol


@dataclass
class RunnerFailure(Exception):
    """The runner did not answer properly. ``code`` is a report error code."""

    code: str
    message: str
    line: int | None = None
    detail: dict[str, Any] | None = None


RUNNER_ENTRY = "sandbox.runner.boot"

# A runner dead of SIGKILL the judge did not send. Nothing inside can have sent it: the
# runner's seccomp filter (sandbox.launcher.seccomp) refuses every way a process can have
# the kernel SIGKILL it by its own doing, inherited by all it starts, and no other process
# in the sandbox shares its uid. Left: an outside kill, or the OOM killer, which the host
# tells apart from its memory cgroup (grader.grading.summary: memory_limit, or the
# candidate's ``signal`` where it cannot count OOM kills). A runner under a diagnostics
# tool is the tool's process, which the filter does not cover: its SIGKILL stays ``signal``.
_KILLED_FROM_OUTSIDE = ("runner killed by SIGKILL that the judge did not send: the runner's "
                        "seccomp filter refuses every self-inflicted SIGKILL, so it came from "
                        "outside the sandbox (an operator, a watchdog) or the kernel; retry")


def _runner_error(err: Any) -> RunnerFailure:
    """A runner's own account of its failure, as data: every string cleaned and capped
    (``sandbox.contract.text``), the code one of a runner's own (``codes.runner_code``: any
    other becomes ``exception``, its text kept as ``runner_code``). It is the candidate's
    text: it may hold anything, and must break nothing downstream."""
    if not isinstance(err, dict):
        return RunnerFailure("protocol_violation", "runner reply has neither ok nor error")
    raw = err.get("code", "exception")
    code = codes.runner_code(raw)
    detail: dict[str, Any] = {"type": text.clean(err.get("type", ""), text.NAME_CAP, lines=False)}
    if code != raw:
        detail["runner_code"] = text.clean(raw, text.NAME_CAP, lines=False)
    line = err.get("line")
    return RunnerFailure(code, text.clean(err.get("message", ""), 2000),
                         line if type(line) is int and 0 < line < 1 << 31 else None, detail)


# The fields of a runner's answer the judge turns into integers or walks: any other type
# is the candidate's protocol violation here, never a judge crash (an infrastructure fault).
_INT_FIELDS = ("threads", "streams", "flush_bytes")


def _malformed(reply: dict[str, Any]) -> str | None:
    for key in _INT_FIELDS:
        v = reply.get(key, 0)
        if type(v) is not int or not -(1 << 62) < v < 1 << 62:
            return f"{key} is not an integer"
    audit = reply.get("audit")
    if audit is not None:
        if not isinstance(audit, dict):
            return "audit is not an object"
        for key in ("ops", "compute_ops"):
            if not isinstance(audit.get(key, []), list):
                return f"audit.{key} is not a list"
    return None


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """``proc``'s exit status once it exits within ``timeout`` seconds, else None. Woken by
    the kernel the moment it exits (a pidfd): ``Popen.wait(timeout)`` polls with sleeps of
    up to 50 ms, and closing a runner and the problem process that way cost a warm CPU
    evaluation ~0.1 s of sleeping."""
    rc = proc.poll()
    if rc is not None:
        return rc
    try:
        fd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):  # no pidfd here: the polling wait
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=timeout)
        return None
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return proc.poll()


def spawn_principal(ident: identity.RunnerIdentity, device: str, pass_fds: tuple[int, ...],
                    argv: Callable[[int, int, int], list[str]]
                    ) -> tuple[subprocess.Popen[bytes], int, int, socket.socket]:
    """Start ``argv(read_fd, write_fd, sock_fd)`` as ``ident`` (own uid, gid and groups, a
    clean environment, its own session, umask 077) with a pipe each way and a unix socket
    for file descriptors; returns the process, the judge's write and read ends and its
    socket. Every descriptor is closed again when the start fails (OSError raised)."""
    j2c_r, j2c_w = os.pipe()
    c2j_r, c2j_w = os.pipe()
    sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            argv(j2c_r, c2j_w, child_sock.fileno()),
            pass_fds=(j2c_r, c2j_w, child_sock.fileno(), *pass_fds),
            env=harden.clean_env(device, ident.env()), stdin=subprocess.DEVNULL,
            start_new_session=True, umask=0o077, user=ident.uid, group=ident.gid,
            extra_groups=list(ident.groups), cwd=identity.spawn_cwd(ident))
    except OSError:
        for fd in (j2c_r, j2c_w, c2j_r, c2j_w):
            os.close(fd)
        child_sock.close()
        sock.close()
        raise
    os.close(j2c_r)
    os.close(c2j_w)
    child_sock.close()
    return proc, j2c_w, c2j_r, sock


def runner_argv(read_fd: int, write_fd: int, fd_sock: int, module_path: str, entry: str,
                device: str) -> list[str]:
    """The runner's command line: ``python -m sandbox.runner.boot`` and the arguments that
    ``sandbox.runner.main.arg_parser`` reads (a diagnostics tool's prefix goes in front)."""
    return [sys.executable, "-m", RUNNER_ENTRY, "--read-fd", str(read_fd), "--write-fd",
            str(write_fd), "--fd-sock", str(fd_sock), "--module", module_path, "--entry", entry,
            "--device", device]


def runner_arg_parser() -> argparse.ArgumentParser:
    """What ``runner_argv`` writes, read back: by ``sandbox.runner.main`` and, under a
    diagnostics tool, by ``sandbox.tools.tool_runner``."""
    p = argparse.ArgumentParser(prog=RUNNER_ENTRY)
    p.add_argument("--read-fd", type=int, required=True)
    p.add_argument("--write-fd", type=int, required=True)
    p.add_argument("--fd-sock", type=int, required=True)
    p.add_argument("--module", required=True)
    p.add_argument("--entry", default="launch")
    p.add_argument("--device", default="cpu")
    return p


class RunnerHandle:
    """One runner (one untrusted module) under its own uid, driven over two pipes.

    Raises RunnerFailure(``runner_isolation_unavailable``) when the runner cannot get an
    identity of its own (no CAP_SETUID in the judge, uids exhausted): an infrastructure
    fault, and no runner is started.
    """

    def __init__(self, module_path: str, entry: str, device: str, pass_fds: tuple[int, ...] = (),
                 prefix: tuple[str, ...] = (), deferred: bool = False):
        # ``prefix`` wraps the runner's argv (ncu / compute-sanitizer, sandbox/tools/profiling.py);
        # the tool is then the process-group leader, so kill() still ends the whole tree.
        # ``deferred``: the module is not staged yet (a warm sandbox, sandbox.judge.prestart);
        # the runner starts without it and :meth:`install` copies it in before any ``load``.
        self._staged: str | None = module_path if deferred else None
        try:
            self.identity = identity.new_runner_identity(module_path)
        except (identity.IsolationUnavailable, OSError) as e:
            raise RunnerFailure(identity.ISOLATION_CODE, str(e)) from None
        try:
            # the runner imports a private copy: no runner may open another's source
            self.module = (os.path.join(self.identity.home, identity.MODULE_DIR,
                                        os.path.basename(module_path)) if deferred
                           else identity.install_module(self.identity, module_path))
            if not deferred:
                builds.restore(self.identity, module_path)  # this source's builds, if kept
            identity.prepare_fork()
        except (identity.IsolationUnavailable, OSError) as e:
            identity.remove_home(self.identity)
            raise RunnerFailure(identity.ISOLATION_CODE, str(e)) from None
        self.uid = self.identity.uid
        self.device = device
        self.prefix = prefix
        self.answered = False  # before the first answer, no candidate code has run
        self.killed = False  # the judge itself sent the runner's uid SIGKILL (kill())
        # A unix socket beside the pipes: buffers (memfd, CUDA VMM handles) can be handed
        # over after the runner started, so that it imports torch while the judge does.
        try:
            self.proc, self.wfd, self.rfd, self.sock = spawn_principal(
                self.identity, device, pass_fds,
                lambda r, w, s: [*prefix, *runner_argv(r, w, s, self.module, entry, device)])
        except OSError as e:  # setgroups/setregid/setreuid refused in the child
            identity.remove_home(self.identity)
            raise RunnerFailure(identity.ISOLATION_CODE,
                                f"cannot start the runner as uid {self.uid}: {e}") from None
        self.started = time.monotonic()

    def install(self) -> None:
        """Copy a deferred module into the runner's folder (once; a no-op otherwise), at the
        path the runner was started with. RunnerFailure(``runner_isolation_unavailable``)
        when it cannot be copied there: the runner is then closed."""
        if self._staged is None:
            return
        path, self._staged = self._staged, None
        try:
            copy = identity.install_module(self.identity, path)
        except (identity.IsolationUnavailable, OSError) as e:
            self.close()
            raise RunnerFailure(identity.ISOLATION_CODE, str(e)) from None
        if copy != self.module:
            self.close()
            raise RunnerFailure(identity.ISOLATION_CODE,
                                f"the module was copied to {copy}, not {self.module}")
        builds.restore(self.identity, path)  # this source's builds, if kept
        # Its start-up (torch's import) was off the evaluation's path: its phases count
        # from here, and figures it reports from before (import_s) are not shown as part.
        self.started = time.monotonic()

    def send(self, msg: dict[str, Any], *, pickled: bool = False) -> None:
        try:
            if pickled:
                protocol.send_pickle(self.wfd, msg)
            else:
                protocol.send_json(self.wfd, msg)
        except protocol.ChannelClosed:
            raise self._death() from None

    def send_fds(self, fds: list[int]) -> None:
        """Hand file descriptors (the shared buffers) to the runner over its unix socket."""
        try:
            socket.send_fds(self.sock, [b"F"], fds)
        except OSError:
            raise self._death() from None

    def send_forking(self, msg: dict[str, Any]) -> None:
        """Send with torch's ForkingPickler, the only way CUDA IPC handles travel."""
        from multiprocessing.reduction import ForkingPickler

        import torch.multiprocessing  # noqa: F401  (registers the CUDA reductions)

        body = protocol.KIND_PICKLE + bytes(ForkingPickler.dumps(msg))
        try:
            protocol._write_all(self.wfd, protocol._HEADER.pack(len(body)) + body)
        except protocol.ChannelClosed:
            raise self._death() from None

    def receive(self, timeout: float, timeout_code: str = "timeout") -> dict[str, Any]:
        try:
            reply = protocol.recv_json(self.rfd, max(0.0, timeout))
        except protocol.ChannelTimeout:
            self.kill()
            raise RunnerFailure(timeout_code, f"no answer within {timeout:.1f} s; "
                                "the runner's whole process group was killed") from None
        except protocol.ChannelClosed:
            raise self._death() from None
        except protocol.ProtocolViolation as e:
            self.kill()
            raise RunnerFailure("protocol_violation", f"runner sent an invalid message: {e}") from None
        self.answered = True
        if reply.get("ok") is True:
            bad = _malformed(reply)
            if bad is not None:
                self.kill()
                raise RunnerFailure("protocol_violation", f"runner reply is malformed: {bad}")
            return reply
        raise _runner_error(reply.get("error"))

    def request(self, msg: dict[str, Any], timeout: float, timeout_code: str = "timeout") -> dict[str, Any]:
        self.send(msg)
        return self.receive(timeout, timeout_code)

    def _death(self) -> RunnerFailure:
        rc = wait_exit(self.proc, 5)
        if rc is None:
            self.kill()
            rc = self.proc.wait()
        sent = self.killed
        self.kill()
        if rc == -signal.SIGKILL and not sent and not self.prefix:
            return RunnerFailure("runner_killed", _KILLED_FROM_OUTSIDE, detail={"signal": -rc})
        if rc == harden.LOCKDOWN_EXIT and not self.answered:
            return RunnerFailure(identity.ISOLATION_CODE,
                                 f"runner uid {self.uid} could not be confined (identity check or "
                                 "seccomp filter failed; see the sandbox's stderr)",
                                 detail={"exit_code": rc})
        if rc == -signal.SIGXFSZ:
            return RunnerFailure("disk_limit", "runner exceeded the file-size limit (SIGXFSZ)",
                                 detail={"signal": -rc})
        if rc < 0:
            sig = -rc
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return RunnerFailure("signal", f"runner killed by {name}", detail={"signal": sig})
        return RunnerFailure("early_exit", f"runner exited with status {rc} before answering "
                             "(os._exit, sys.exit or a crash)", detail={"exit_code": rc})

    def kill(self) -> None:
        """Kill the runner and every process of its uid (the judge has no CAP_KILL)."""
        self.killed = True
        identity.kill_all(self.identity)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self.proc.kill()

    def ask_exit(self) -> None:
        """Tell the runner to exit, without waiting (the judge asks every process first, so
        that their exits, CUDA contexts and all, overlap); :meth:`close` then waits."""
        with contextlib.suppress(protocol.ChannelClosed, OSError):
            protocol.send_json(self.wfd, {"op": "exit"})

    def close(self) -> None:
        self.ask_exit()
        wait_exit(self.proc, 5)
        self.kill()
        for fd in (self.wfd, self.rfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.sock.close()
        wait_exit(self.proc, 5)
        if self._staged is None and self.answered:  # its module was in, and it ran
            with contextlib.suppress(OSError, identity.IsolationUnavailable):
                builds.export(self.identity, self.module)
        identity.remove_home(self.identity)  # its processes are dead: nothing writes there now
