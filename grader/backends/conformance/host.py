"""Proving the host unharmed after a sandbox ran: a sentinel file outside every mount
unchanged, no sandbox process left, the loopback still answering.

Leftover detection is scoped to one check's work directory, because other sandboxes may
legitimately be alive as uid 65534 at the same time: a sandbox process is the check's when
its mount table mentions the check's unique work directory (every backend binds ``/kg/in``
and ``/kg/out`` from there), or when it runs as a sandbox uid and descends from this
process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

from grader.backends.base import SANDBOX_UID


@dataclass
class Sentinel:
    """A world-readable host file in a world-traversable directory, outside every mount."""

    path: Path
    content: str

    @classmethod
    def create(cls, directory: Path) -> Sentinel:
        content = f"kgrader-conformance-sentinel {uuid.uuid4().hex}\n"
        path = directory / f".host-sentinel-{uuid.uuid4().hex[:12]}"
        path.write_text(content)
        path.chmod(0o644)
        return cls(path, content)

    def digest(self) -> tuple[str, int]:
        st = self.path.stat()
        return hashlib.sha256(self.path.read_bytes()).hexdigest(), st.st_mtime_ns


def _mentions(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            return marker in f.read()
    except OSError:
        return False


# The judge's uid and the runners' uids.
SANDBOX_UIDS = frozenset({SANDBOX_UID, *range(65500, 65532)})


def sandbox_processes(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) sandbox processes that belong to this test: any uid the sandbox
    uses, or uid 0 with this test's folder in its mount table (the launcher)."""
    me = os.getpid()
    mine: set[int] = set()
    with contextlib.suppress(psutil.Error):
        mine = {p.pid for p in psutil.Process(me).children(recursive=True)}
    found = []
    for p in psutil.process_iter(["uids", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            uids = p.info["uids"]
            if uids.real in SANDBOX_UIDS or uids.effective in SANDBOX_UIDS:
                if p.pid in mine or _mentions(p.pid, marker):
                    found.append(p)
            elif 0 in (uids.real, uids.effective) and _mentions(p.pid, marker):
                found.append(p)  # the launcher (uid 0 inside the sandbox, no user namespace)
        except psutil.Error:
            continue
    return found



def loopback_answers(timeout: float = 5.0) -> bool:
    """The host's own network stack still works: a 127.0.0.1 round trip."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        srv.settimeout(timeout)
        with socket.create_connection(srv.getsockname(), timeout=timeout) as c:
            conn, _ = srv.accept()
            with conn:
                c.sendall(b"ping")
                return conn.recv(4) == b"ping"
