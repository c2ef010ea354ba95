"""Framed messages between the judge and a runner over a pair of pipes.

Direction matters for trust:

* judge -> runner: JSON, or a pickle for the one-time buffer hand-over (CUDA IPC handles
  can only travel pickled). The runner is untrusted, so unpickling judge bytes there is
  harmless.
* runner -> judge: JSON only, size-capped. The judge never unpickles runner bytes.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct(">I")
MAX_RUNNER_MESSAGE = 1 << 20
KIND_JSON = b"J"
KIND_PICKLE = b"P"


class ChannelClosed(Exception):
    """The other side closed its end (it exited or was killed)."""


class ChannelTimeout(Exception):
    """No complete message arrived in time."""


class ProtocolViolation(Exception):
    """The other side sent bytes that are not a valid message."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            raise ChannelClosed("peer closed the pipe") from None
        view = view[n:]


def send_json(fd: int, obj: Any) -> None:
    body = KIND_JSON + json.dumps(obj, separators=(",", ":")).encode()
    _write_all(fd, _HEADER.pack(len(body)) + body)


def send_pickle(fd: int, obj: Any) -> None:
    body = KIND_PICKLE + pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, _HEADER.pack(len(body)) + body)


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("timed out")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise ChannelTimeout("timed out")
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise ChannelClosed("peer closed the pipe")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_raw(fd: int, timeout: float | None, max_bytes: int) -> tuple[bytes, bytes]:
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    if size < 1 or size > max_bytes:
        raise ProtocolViolation(f"message of {size} bytes (cap {max_bytes})")
    body = _read_exact(fd, size, deadline)
    return body[:1], body[1:]


def recv_json(fd: int, timeout: float | None, max_bytes: int = MAX_RUNNER_MESSAGE) -> dict[str, Any]:
    """Receive one JSON object; anything else is a :class:`ProtocolViolation`."""
    kind, payload = recv_raw(fd, timeout, max_bytes)
    if kind != KIND_JSON:
        raise ProtocolViolation("expected a JSON message")
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError) as e:
        raise ProtocolViolation(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolViolation("message is not an object")
    return obj


def recv_any_from_judge(fd: int) -> Any:
    """Runner side: the judge may send JSON or a pickle (trusted direction)."""
    kind, payload = recv_raw(fd, None, 1 << 30)
    if kind == KIND_PICKLE:
        return pickle.loads(payload)
    return json.loads(payload)
