"""The judge's handle on one runner process: spawn, request with a deadline, kill."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from sandbox import harden, protocol


@dataclass
class RunnerFailure(Exception):
    """The runner did not answer properly. ``code`` is a report error code."""

    code: str
    message: str
    line: int | None = None
    detail: dict[str, Any] | None = None


class RunnerHandle:
    """One runner (one untrusted module), driven over two pipes."""

    def __init__(self, module_path: str, entry: str, device: str, pass_fds: tuple[int, ...] = (),
                 prefix: tuple[str, ...] = ()):
        # ``prefix`` wraps the runner's argv (ncu / compute-sanitizer, sandbox/profiling.py);
        # the tool is then the process-group leader, so kill() still ends the whole tree.
        j2r_r, j2r_w = os.pipe()
        r2j_r, r2j_w = os.pipe()
        self.device = device
        cmd = [*prefix, sys.executable, "-m", "sandbox.runner", "--read-fd", str(j2r_r),
               "--write-fd", str(r2j_w), "--module", module_path, "--entry", entry,
               "--device", device]
        self.proc = subprocess.Popen(
            cmd, pass_fds=(j2r_r, r2j_w, *pass_fds), env=harden.clean_env(device),
            stdin=subprocess.DEVNULL, start_new_session=True, cwd="/tmp",
        )
        os.close(j2r_r)
        os.close(r2j_w)
        self.wfd, self.rfd = j2r_w, r2j_r
        self.started = time.monotonic()

    def send(self, msg: dict[str, Any], *, pickled: bool = False) -> None:
        try:
            if pickled:
                protocol.send_pickle(self.wfd, msg)
            else:
                protocol.send_json(self.wfd, msg)
        except protocol.ChannelClosed:
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
        if reply.get("ok") is True:
            return reply
        err = reply.get("error")
        if not isinstance(err, dict):
            raise RunnerFailure("protocol_violation", "runner reply has neither ok nor error")
        line = err.get("line")
        raise RunnerFailure(str(err.get("code", "exception"))[:40], str(err.get("message", ""))[:2000],
                            line if isinstance(line, int) else None,
                            {"type": str(err.get("type", ""))[:100]})

    def request(self, msg: dict[str, Any], timeout: float, timeout_code: str = "timeout") -> dict[str, Any]:
        self.send(msg)
        return self.receive(timeout, timeout_code)

    def _death(self) -> RunnerFailure:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.wait()
        self.kill()
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
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def close(self) -> None:
        with contextlib.suppress(protocol.ChannelClosed, OSError):
            protocol.send_json(self.wfd, {"op": "exit"})
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.kill()
        for fd in (self.wfd, self.rfd):
            with contextlib.suppress(OSError):
                os.close(fd)
