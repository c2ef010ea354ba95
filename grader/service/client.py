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

FINAL = ("done", "failed")
EventSink = Callable[[str, dict[str, Any]], None]  # (kind, data) of one job event


class ServiceRefused(UsageError):
    """The server refused the request (4xx): its status, typed code and message."""

    def __init__(self, status: int, server_code: str, message: str):
        super().__init__(f"the server refused it ({status} {server_code}): {message}")
        self.status, self.server_code = status, server_code


class ServiceUnreachable(InfrastructureError):
    """No answer from the server, or a 5xx."""


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
            raise ServiceUnreachable(f"cannot reach {self.base}: {type(e).__name__}: {e}") from None
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
        return self._json("GET", f"/v1/submissions/{job_id}/report")

    def tasks(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/tasks")["tasks"])

    def events(self, job_id: str, on_event: EventSink | None = None
               ) -> list[tuple[str, dict[str, Any]]]:
        """Follow the job's event stream until its final event; the events seen, each also
        given to ``on_event`` as it arrives (its failure is ignored: it only shows them)."""
        seen: list[tuple[str, dict[str, Any]]] = []
        r = self._call("GET", f"/v1/submissions/{job_id}/events", stream=True)
        kind = ""
        with r:
            for raw in r.iter_lines(decode_unicode=True):
                line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw or ""
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    seen.append((kind, json.loads(line[6:])))
                    if on_event is not None:
                        with contextlib.suppress(Exception):
                            on_event(*seen[-1])
                    if kind in FINAL:
                        break
        return seen

    def wait(self, job_id: str, timeout: float = 3600.0,
             on_event: EventSink | None = None) -> dict[str, Any]:
        """Wait for the job to finish (its event stream, then a poll if the stream broke);
        returns ``{"submission", "report"}``. ``on_event``: each event as it arrives
        (``queued``, ``running``, ``step`` -- the judge's live steps --, the final one)."""
        deadline = time.monotonic() + timeout
        # A broken stream falls back to polling below.
        with contextlib.suppress(requests.RequestException, ServiceUnreachable, ValueError):
            self.events(job_id, on_event)
        while True:
            job = self.job(job_id)
            if job["state"] in FINAL:
                return self.report(job_id)
            if time.monotonic() > deadline:
                raise ServiceUnreachable(f"submission {job_id} did not finish in {timeout:g} s "
                                         f"(it is {job['state']}; `kgrader status` follows it)")
            time.sleep(1.0)
