"""The client ``kgrader submit``/``status``/``report`` use (requests; no server code).

A refusal from the server becomes :class:`ServiceRefused` with the server's code and
message; a server that cannot be reached, or answers 5xx, :class:`ServiceUnreachable`
(an infrastructure error: nothing was graded).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from grader.errors import InfrastructureError, UsageError
from grader.scan import read_candidate
from sandbox.contract.codes import BY_NAME

FINAL = ("done", "failed", "cancelled")
EventSink = Callable[[str, dict[str, Any]], None]  # (kind, data) of one job event


class ServiceRefused(UsageError):
    """The server refused the request (4xx): its status, typed code and message."""

    def __init__(self, status: int, server_code: str, message: str):
        super().__init__(f"the server refused it ({status} {server_code}): {message}",
                         code=server_code if server_code in BY_NAME else None)
        self.status, self.server_code = status, server_code


class ServiceUnreachable(InfrastructureError):
    """No answer from the server, or a 5xx."""

    code = "service_unreachable"


class NotFinished(InfrastructureError):
    """The submission is still queued or running after the wait's timeout (the CLI exits 75:
    ask again later; an agent tool's result: the infrastructure's, nothing was graded)."""

    code = "not_finished"


Say = Callable[[str], None]
RECONNECT_S = 300.0  # how long a waiting client keeps trying a server that went away


def _why(e: requests.RequestException) -> str:
    """A connection failure in a few words (never urllib3's repr)."""
    text = str(e)
    for needle, words in (("Connection refused", "connection refused"),
                          ("Connection reset", "connection reset"),
                          ("Name or service not known", "unknown host"),
                          ("Temporary failure in name resolution", "unknown host"),
                          ("No route to host", "no route to host"),
                          ("RemoteDisconnected", "the server closed the connection"),
                          ("Connection aborted", "connection aborted")):
        if needle in text:
            return words
    if isinstance(e, requests.Timeout):
        return "no answer in time"
    if isinstance(e, requests.exceptions.ChunkedEncodingError):
        return "the connection broke mid-answer"
    return type(e).__name__


class Client:
    """One server and one token."""

    def __init__(self, server: str, token: str | None, timeout: float = 30.0):
        if not server.startswith(("http://", "https://")):
            raise UsageError(f"--server must be an http:// or https:// URL, got {server!r}")
        self.base = server.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self.session = requests.Session()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              stream: bool = False) -> requests.Response:
        try:
            r = self.session.request(method, self.base + path, json=body, headers=self.headers,
                                     timeout=self.timeout, stream=stream)
        except requests.RequestException as e:
            raise ServiceUnreachable(f"cannot reach {self.base}: {_why(e)}") from None
        if r.status_code >= 500:
            raise ServiceUnreachable(f"{self.base} answered {r.status_code}: {r.text[:300]}")
        if r.status_code >= 400:
            try:
                err = r.json()
                code, message = str(err["code"]), str(err["message"])
            except (ValueError, KeyError, TypeError):
                code, message = "http_error", r.text[:300]
            raise ServiceRefused(r.status_code, code, message)
        return r

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        r = self._call(method, path, body)
        try:
            out = r.json()
        except ValueError:
            raise ServiceUnreachable(f"{self.base}{path} did not answer JSON") from None
        if not isinstance(out, dict):
            raise ServiceUnreachable(f"{self.base}{path} did not answer a JSON object")
        return out

    def submit(self, task: str, source: str, mode: str = "run", label: str = "") -> dict[str, Any]:
        return self._json("POST", "/v1/submissions",
                          {"task": task, "mode": mode, "source": source, "label": label})

    def submit_file(self, task: str, path: Path, mode: str = "run",
                    label: str = "") -> dict[str, Any]:
        return self.submit(task, read_candidate(path), mode, label)

    def job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/submissions/{job_id}")

    def jobs(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/submissions")["submissions"])

    def report(self, job_id: str) -> dict[str, Any]:
        """``{"submission", "report"}``; for a job not finished yet the report is None."""
        try:
            return self._json("GET", f"/v1/submissions/{job_id}/report")
        except ServiceRefused as e:
            if e.server_code != "not_finished":
                raise
        return {"submission": self.job(job_id), "report": None}

    def tasks(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/tasks")["tasks"])

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/submissions/{job_id}/cancel")

    def events(self, job_id: str, after: int = 0,
               on_event: Callable[[int, str, dict[str, Any]], None] | None = None,
               until: float | None = None) -> int:
        """Follow the job's event stream from after event ``after`` until its final event,
        the stream's end or the ``until`` (monotonic) time; the last event id seen
        (``on_event`` gets each event)."""
        headers = {**self.headers, "Last-Event-ID": str(after)}
        left = None if until is None else until - time.monotonic()
        read = self.timeout if left is None else max(min(self.timeout, left + 0.1), 0.2)
        try:
            r = self.session.get(self.base + f"/v1/submissions/{job_id}/events", headers=headers,
                                 timeout=(self.timeout, read), stream=True)
            if r.status_code >= 400:
                r.close()
                self._call("GET", f"/v1/submissions/{job_id}")  # the refusal, typed
                raise ServiceUnreachable(f"{self.base} answered {r.status_code} to the events")
            kind, seq = "", after
            with r:
                for raw in r.iter_lines(decode_unicode=True):
                    line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw or ""
                    if line.startswith("id: ") and line[4:].isdigit():
                        seq = int(line[4:])
                    elif line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        after = seq
                        if on_event is not None:
                            on_event(seq, kind, json.loads(line[6:]))
                        if kind in FINAL:
                            break
                    if until is not None and time.monotonic() > until:
                        break
        except requests.RequestException as e:
            if until is not None and time.monotonic() >= until - 0.05:
                return after  # the read timed out at the wait's own deadline: no lost server
            raise ServiceUnreachable(f"cannot reach {self.base}: {_why(e)}") from None
        except ValueError:
            raise ServiceUnreachable(f"{self.base} sent an event that is not JSON") from None
        return after

    def wait(self, job_id: str, timeout: float = 3600.0, say: Say | None = None,
             reconnect_s: float = RECONNECT_S, on_event: EventSink | None = None
             ) -> dict[str, Any]:
        """Wait for the job to finish (its event stream, polled when the stream ends);
        returns ``{"submission", "report"}``. A server that goes away (restarted, or a
        network break) is tried again with a growing pause for ``reconnect_s`` seconds;
        what happened to the job meanwhile is told through ``say`` ("the server
        restarted; job ... continues as attempt 2"). :class:`NotFinished` after
        ``timeout``; :class:`ServiceUnreachable` when the server stays away. ``on_event``:
        each event as it arrives (``queued``, ``running``, ``step`` -- the judge's live
        steps --, the final one); its failure is ignored (it only shows them)."""
        tell = say or (lambda _: None)
        deadline = time.monotonic() + timeout
        seen = 0
        lost_at: float | None = None
        pause = 0.5
        restarted = False

        def back() -> None:
            nonlocal lost_at, pause
            if lost_at is not None:
                tell(f"the server at {self.base} answers again")
            lost_at, pause = None, 0.5

        def seen_event(seq: int, kind: str, data: dict[str, Any]) -> None:
            nonlocal restarted
            back()
            if on_event is not None:
                with contextlib.suppress(Exception):
                    on_event(kind, data)
            if kind == "requeued":
                restarted = "restarted" in str(data.get("why", ""))
                if not restarted:
                    tell(f"submission {job_id} goes back to the queue: {data.get('why')}")
            elif kind == "running" and int(data.get("attempt", 1)) > 1:
                head = "the server restarted; " if restarted else ""
                tell(f"{head}submission {job_id} continues as attempt {data['attempt']}")
                restarted = False
            elif kind == "cancelled":
                tell(f"submission {job_id} was {data.get('why', 'cancelled')}")

        while True:
            try:
                seen = self.events(job_id, seen, seen_event, until=deadline)
                job = self.job(job_id)
                back()
                if job["state"] in FINAL:
                    return self.report(job_id)
            except ServiceUnreachable as e:
                now = time.monotonic()
                if lost_at is None:
                    lost_at = now
                    tell(f"lost the server ({e}); trying again for up to {reconnect_s:g} s "
                         f"(the job stays on the server)")
                elif now - lost_at > reconnect_s:
                    raise ServiceUnreachable(
                        f"{self.base} has not answered for {reconnect_s:g} s ({e}); submission "
                        f"{job_id} is kept by the server", hint=f"`kgrader status {job_id}` "
                        "once the server is back") from None
                time.sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            if time.monotonic() > deadline:
                raise NotFinished(f"submission {job_id} did not finish in {timeout:g} s (it is "
                                  f"{job['state']}); it goes on on the server",
                                  hint=f"`kgrader status {job_id}` follows it, `kgrader cancel "
                                  f"{job_id}` cancels it")
            time.sleep(1.0)
