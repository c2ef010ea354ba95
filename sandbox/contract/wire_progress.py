"""The judge's live steps, part of the host-judge contract (:mod:`sandbox.contract.wire`
re-exports them).

While the sandbox runs, the judge writes one line per step (a stage begins, a stage ends
with its seconds) into a FIFO the host created in the judge's ``out/`` folder,
:data:`PROGRESS_NAME`, and the host reads it as the lines come. Only the judge can write
there: the FIFO is 0600 and the judge's uid's, in a 0700 folder of that uid that no runner
can enter, and the judge unlinks it once it holds it open, before any runner starts,
through a close-on-exec descriptor no runner inherits. Each line also carries an HMAC of
the request's key, so the host believes no line that only the judge could not have written.
A step is for people watching: the verdict comes only from the authenticated record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Literal

PROGRESS_NAME = ".progress"  # the judge's live steps (a FIFO the host made), unlinked at open
MAX_PROGRESS_LINE = 256  # bytes: under PIPE_BUF, so one write is one whole line or nothing
# The steps a judge tells, in the order they run ("judge": the judge has started).
PROGRESS_STEPS = ("judge", "judge_ready", "compile", "correctness", "benchmark", "accept")
ProgressState = Literal["start", "done"]


@dataclass(frozen=True)
class ProgressEvent:
    """The judge's ``n``-th step line: ``step`` begins (``start``) or ended (``done``,
    after ``seconds``)."""

    n: int
    step: str
    state: ProgressState
    seconds: float | None = None


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, b"progress:" + body, hashlib.sha256).hexdigest().encode()


def progress_line(key: bytes, event: ProgressEvent) -> bytes:
    """The line the judge writes for ``event``: compact JSON, a space, its MAC."""
    body = json.dumps({"n": event.n, "step": event.step, "state": event.state,
                       "s": event.seconds}, separators=(",", ":")).encode()
    return body + b" " + _mac(key, body) + b"\n"


def read_progress_line(key: bytes, line: bytes) -> ProgressEvent | None:
    """The event a line (without its newline) carries, or None when its MAC does not
    verify with ``key`` or it is not a step line of this contract."""
    if len(line) > MAX_PROGRESS_LINE or b" " not in line:
        return None
    body, mac = line.rsplit(b" ", 1)
    if not hmac.compare_digest(mac, _mac(key, body)):
        return None
    try:
        raw = json.loads(body)
    except ValueError:
        return None
    if not isinstance(raw, dict) or set(raw) != {"n", "step", "state", "s"}:
        return None
    n, step, state, s = raw["n"], raw["step"], raw["state"], raw["s"]
    if type(n) is not int or step not in PROGRESS_STEPS or state not in ("start", "done"):
        return None
    if s is not None and (type(s) not in (int, float) or not 0 <= s < 1e7):
        return None
    return ProgressEvent(n, step, state, None if s is None else float(s))
