"""What the automatic sweep asks the docker daemon first, without the docker SDK.

Every grading command sweeps containers that killed kgrader processes left
(:meth:`~grader.backends.docker.backend.DockerBackend.sweep`). Importing the SDK (docker,
requests, urllib3) for that took ~0.1 s of CPU in every command on a host that runs a
daemon, bwrap runs included, beside the command's own start. One request over the daemon's
unix socket says which kgrader containers exist; the SDK is imported only when one of them
may be reclaimed.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any

from grader.backends.docker.config import LABEL, LABEL_OWNER

DEFAULT_SOCKET = "/var/run/docker.sock"
PROBE_TIMEOUT_S = 2.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def socket_path() -> str | None:
    """The daemon's unix socket, or None when ``DOCKER_HOST`` names anything else (a TCP
    or SSH daemon: the SDK's to reach)."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    return host[len("unix://"):] if host.startswith("unix://") else None


def labelled_owners(timeout: float = PROBE_TIMEOUT_S) -> list[str | None] | None:
    """The owner label of every container labelled ``kgrader=1`` (running or not), or None
    when the daemon cannot be asked this way (no unix socket, no answer, an unexpected
    one): the caller then asks through the SDK as before."""
    path = socket_path()
    if path is None:
        return None
    query = urllib.parse.urlencode({"all": "1", "filters": json.dumps({"label": [f"{LABEL}=1"]})})
    conn = _UnixConnection(path, timeout)
    try:
        conn.request("GET", f"/containers/json?{query}")
        resp = conn.getresponse()
        body = resp.read(8 << 20)
        if resp.status != 200:
            return None
        listed: Any = json.loads(body)
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    if not isinstance(listed, list):
        return None
    owners: list[str | None] = []
    for c in listed:
        labels = c.get("Labels") if isinstance(c, dict) else None
        if not isinstance(labels, dict):
            return None
        owner = labels.get(LABEL_OWNER)
        owners.append(owner if isinstance(owner, str) else None)
    return owners
