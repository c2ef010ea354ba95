"""The HTTP API (Starlette, served by uvicorn). Routes (JSON unless said otherwise):

* ``GET /v1/health`` -- no token: queue counts and worker count (on a Ray cluster, its
  state: ``ok`` is false while it is gone);
* ``GET /v1/tasks`` -- the tasks this server grades; ``GET /v1/queue`` -- operators:
  counts per state, claims and grades in total;
* ``POST /v1/submissions`` ``{"task", "mode", "source", "label"?}`` -- 201 with the job
  and its private ``view_url`` (shown once);
* ``GET /v1/submissions`` -- the token's jobs (an operator's: every job, with its owner);
* ``POST /v1/submissions/{id}/cancel`` -- cancel a queued or running job;
* ``GET /v1/submissions/{id}`` -- one job; ``/events`` -- its events as server-sent
  events (``Last-Event-ID`` resumes); ``/report`` -- the job and its report (the
  candidate-facing copy for a submitter, the full one for an operator);
* ``GET /r/{id}/{key}`` -- the submitter's own report as a page (no token: the key is
  the capability, stored hashed);
* ``GET /board/`` -- the live board (public, hidden shapes redacted; refreshes itself);
  ``/board/run/{id}.html`` -- one board run's candidate-facing report (public).

Every refusal is a 4xx with ``{"code", "message"}`` (:mod:`grader.service.errors`); a
bug is a 500 ``internal``, never a traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import secrets
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from grader.backends.stop import request_stop
from grader.errors import CandidateFileError
from grader.grading.redact import facts_for, redact
from grader.logs import get_logger
from grader.report.model import Report
from grader.scan import check_source
from grader.service import pages
from grader.service.auth import RateLimiter, authenticate, require
from grader.service.board import Board
from grader.service.errors import ApiError, api_error, http_error
from grader.service.store import FINAL, JobRow, Store, TokenRow
from grader.service.worker import MODES, ServiceTask, Workers

log = get_logger("kgrader.service")
_FIELDS = {"task", "mode", "source", "label"}
_LABEL = re.compile(r"[A-Za-z0-9_.-]{0,64}")
_ID = re.compile(r"[0-9a-f]{32}")


class Service:
    """What the routes share: store, tasks, workers, board and limits."""

    def __init__(self, store: Store, tasks: dict[str, ServiceTask], workers: Workers,
                 board: Board, *, max_source_bytes: int, max_request_bytes: int,
                 read_per_min: float, board_refresh_s: int,
                 on_stop: Callable[[], None] | None = None):
        self.store, self.tasks, self.workers, self.board = store, tasks, workers, board
        self.on_stop = on_stop  # after the workers stopped (e.g. close a warm pool)
        self.max_source_bytes, self.max_request_bytes = max_source_bytes, max_request_bytes
        self.read_per_min, self.board_refresh_s = read_per_min, board_refresh_s
        self.limiter = RateLimiter()
        self.stopping = threading.Event()  # a stop signal arrived: event streams end

    def begin_stop(self) -> None:
        """A stop signal arrived (called from the signal handler): the workers claim and
        record nothing more, every sandbox of this process is killed
        (:func:`grader.backends.stop.request_stop`: a job being graded goes back to the
        queue at the next start), and open event streams end."""
        self.stopping.set()
        self.workers.halt()
        request_stop()

    async def caller(self, request: Request) -> TokenRow:
        row = await run_in_threadpool(authenticate, self.store,
                                      request.headers.get("authorization"))
        wait = self.limiter.take("read:" + row.id, self.read_per_min)
        if wait:
            raise ApiError("rate_limited", f"too many requests; retry in {wait:.1f} s", wait)
        return row

    async def owned_job(self, request: Request) -> tuple[TokenRow, JobRow]:
        row = await self.caller(request)
        job_id = request.path_params["job_id"]
        job = await run_in_threadpool(self.store.job, job_id) if _ID.fullmatch(job_id) else None
        if job is None or (job.token_id != row.id and row.role != "operator"):
            raise ApiError("not_found", f"no submission {job_id[:40]!r} for this token")
        return row, job

    def report_for(self, job: JobRow, operator: bool) -> dict[str, Any] | None:
        """The job's report as this caller may read it."""
        text = self.store.report_json(job.id)
        if text is None:
            return None
        report = Report.model_validate_json(text)
        task = self.tasks.get(job.task)
        if not operator:
            report = redact(report, facts_for(task.spec if task else None, report))
        out: dict[str, Any] = json.loads(report.model_dump_json())
        return out


async def _body(request: Request, cap: int) -> dict[str, Any]:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > cap):
        raise ApiError("too_large", f"the request is larger than {cap} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise ApiError("too_large", f"the request is larger than {cap} bytes")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        raise ApiError("bad_request", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError("bad_request", "the body must be a JSON object")
    return body


def _submission(body: dict[str, Any], svc: Service) -> tuple[str, str, str, str]:
    extra = set(body) - _FIELDS
    if extra:
        raise ApiError("bad_request", f"unknown fields: {', '.join(sorted(extra))[:200]}")
    task, mode, source = body.get("task"), body.get("mode", "run"), body.get("source")
    label = body.get("label", "")
    for name, v in (("task", task), ("mode", mode), ("source", source), ("label", label)):
        if not isinstance(v, str):
            raise ApiError("bad_request", f"'{name}' must be a string")
    assert isinstance(task, str) and isinstance(mode, str) and isinstance(source, str)
    assert isinstance(label, str)
    if mode not in MODES:
        raise ApiError("bad_request", f"'mode' must be one of {', '.join(MODES)}")
    if not _LABEL.fullmatch(label):
        raise ApiError("bad_request", "'label' is at most 64 letters, digits, '_', '.', '-'")
    if task not in svc.tasks:
        raise ApiError("unknown_task", f"this server grades no task {task[:80]!r} "
                       "(GET /v1/tasks lists them)")
    try:  # the checks every candidate's text passes (the CLI's, the agent tools')
        check_source(source, "the submitted source", svc.max_source_bytes)
    except CandidateFileError as e:
        raise api_error(e) from None
    return task, mode, source, label


async def submit(request: Request) -> Response:
    svc: Service = request.app.state.svc
    row = await svc.caller(request)
    task, mode, source, label = _submission(await _body(request, svc.max_request_bytes), svc)
    wait = svc.limiter.take("submit:" + row.id, row.submit_per_min)
    if wait:
        raise ApiError("rate_limited", f"submission rate over {row.submit_per_min:g}/min; "
                       f"retry in {wait:.1f} s", wait)
    key = secrets.token_urlsafe(24)
    job = await run_in_threadpool(
        lambda: svc.store.submit(
            token_id=row.id, task=task, mode=mode, label=label, source=source,
            source_sha=hashlib.sha256(source.encode()).hexdigest(),
            view_sha=hashlib.sha256(key.encode()).hexdigest(),
            max_active=row.max_active, max_per_day=row.max_per_day))
    if isinstance(job, str):
        what = {"max_active": f"{row.max_active} jobs queued or running",
                "max_per_day": f"{row.max_per_day} submissions in 24 h"}[job]
        raise ApiError("quota_exceeded", f"this token's quota is {what}",
                       30.0 if job == "max_active" else 3600.0)
    svc.workers.wake()
    log.info("service_submitted", job=job.id, token=row.name, task=task, mode=mode)
    return JSONResponse({**job.public(), "view_url": f"/r/{job.id}/{key}"}, status_code=201)


def _owners(store: Store) -> dict[str, str]:
    return {t.id: t.name for t in store.tokens()}


async def list_jobs(request: Request) -> Response:
    """The token's jobs; an operator's: every job, each with its ``owner`` (token name)."""
    svc: Service = request.app.state.svc
    row = await svc.caller(request)
    if row.role != "operator":
        jobs = await run_in_threadpool(svc.store.jobs, row.id)
        return JSONResponse({"submissions": [j.public() for j in jobs]})
    jobs = await run_in_threadpool(svc.store.jobs, None)
    names = await run_in_threadpool(_owners, svc.store)
    return JSONResponse({"submissions": [{**j.public(), "owner": names.get(j.token_id, "?")}
                                         for j in jobs]})


async def get_job(request: Request) -> Response:
    svc: Service = request.app.state.svc
    row, job = await svc.owned_job(request)
    if row.role != "operator":
        return JSONResponse(job.public())
    names = await run_in_threadpool(_owners, svc.store)
    return JSONResponse({**job.public(), "owner": names.get(job.token_id, "?")})


async def cancel(request: Request) -> Response:
    """Cancel a queued job (never graded), or a running one (its sandbox is killed and its
    grade is not recorded); a finished one is 409 ``already_finished``."""
    svc: Service = request.app.state.svc
    row, job = await svc.owned_job(request)
    who = "an operator" if row.role == "operator" and row.id != job.token_id else "its submitter"
    was, now = await run_in_threadpool(svc.store.cancel, job.id, f"cancelled by {who}")
    if not now:
        raise ApiError("already_finished", f"submission {job.id} is {was}: only a queued "
                       "or running one can be cancelled")
    # A running job's sandbox is killed now, not left to run to its end (local workers;
    # Ray workers' evaluations end within their limits and are not recorded).
    killed = was == "running" and svc.workers.cancel(job.id)
    log.info("service_cancelled", job=job.id, token=row.name, was=was, sandbox_killed=killed)
    after = await run_in_threadpool(svc.store.job, job.id)
    assert after is not None
    return JSONResponse({"submission": after.public(), "was": was})


async def get_report(request: Request) -> Response:
    svc: Service = request.app.state.svc
    row, job = await svc.owned_job(request)
    if job.state not in FINAL:
        raise ApiError("not_finished", f"submission {job.id} is {job.state}")
    report = await run_in_threadpool(svc.report_for, job, row.role == "operator")
    return JSONResponse({"submission": job.public(), "report": report})


async def events(request: Request) -> Response:
    svc: Service = request.app.state.svc
    _, job = await svc.owned_job(request)
    last = request.headers.get("last-event-id", "0")
    after = int(last) if last.isdigit() else 0

    async def stream() -> AsyncIterator[bytes]:
        nonlocal after
        idle = 0.0
        while True:
            evs = await run_in_threadpool(svc.store.events, job.id, after)
            for seq, at, kind, data in evs:
                after = seq
                payload = json.dumps({"at": at, **data})
                yield f"id: {seq}\nevent: {kind}\ndata: {payload}\n\n".encode()
                if kind in FINAL:
                    return
            idle = 0.0 if evs else idle + 0.25
            if idle >= 15.0:
                idle = 0.0
                yield b": keep-alive\n\n"
            if svc.stopping.is_set() or await request.is_disconnected():
                return
            await asyncio.sleep(0.25)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})


async def tasks(request: Request) -> Response:
    svc: Service = request.app.state.svc
    await svc.caller(request)
    return JSONResponse({"tasks": [{"name": t.name, "description": t.spec.description,
                                    "modes": list(MODES)} for t in svc.tasks.values()]})


async def queue(request: Request) -> Response:
    """Operators: the counts per state and how many times jobs were graded."""
    svc: Service = request.app.state.svc
    require(await svc.caller(request), "operator")
    return JSONResponse(await run_in_threadpool(svc.store.stats))


async def health(request: Request) -> Response:
    svc: Service = request.app.state.svc
    counts = await run_in_threadpool(svc.store.counts)
    return JSONResponse({"ok": True, "jobs": counts, "workers": len(svc.workers.slots),
                         **svc.workers.health()})


async def view(request: Request) -> Response:
    """The submitter's own report page: the key in the path is the capability."""
    svc: Service = request.app.state.svc
    job_id, key = request.path_params["job_id"], request.path_params["key"]
    job = await run_in_threadpool(svc.store.job, job_id) if _ID.fullmatch(job_id) else None
    given = hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()
    if job is None or not hmac.compare_digest(given, job.view_sha):
        raise ApiError("not_found", "no such report")
    report = await run_in_threadpool(svc.report_for, job, False) \
        if job.state in FINAL else None
    # While it runs: the judge's steps of its current attempt so far (the job's step events).
    steps = [] if job.state in FINAL else \
        [d for _, _, kind, d in await run_in_threadpool(svc.store.events, job.id)
         if kind == "step" and d.get("attempt", job.attempts) == job.attempts]
    headers = pages.HEADERS | ({} if job.state in FINAL else {"Refresh": "3"})
    return Response(pages.report_page(job.public(), report, steps), media_type="text/html",
                    headers=headers)


async def board(request: Request) -> Response:
    svc: Service = request.app.state.svc
    name = request.path_params.get("name", "index.html")
    if name.startswith("eval/"):
        raise ApiError("forbidden", "a submission's report is its submitter's: "
                       "GET /v1/submissions/{id}/report with its token, or its view link")
    data = await run_in_threadpool(svc.board.read, name)
    if data is None:
        raise ApiError("not_found", "no such board page")
    if name == "index.html":
        return Response(data, media_type="text/html",
                        headers=pages.HEADERS | {"Refresh": str(svc.board_refresh_s),
                                                 "Content-Security-Policy": pages.BOARD_CSP})
    if name.endswith(".html"):  # a run's public report (grader.service.board)
        return Response(data, media_type="text/html", headers=pages.HEADERS)
    return Response(data, media_type="image/png", headers={"Cache-Control": "no-store"})


async def _api_error(request: Request, exc: Exception) -> Response:
    status, body, headers = http_error(exc)
    return JSONResponse(body, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    return await _api_error(request, ApiError(code, str(exc.detail), status=exc.status_code))


async def _internal(request: Request, exc: Exception) -> Response:
    log.error("service_internal_error", path=request.url.path, error=type(exc).__name__)
    return await _api_error(request, exc)


def make_app(svc: Service) -> Starlette:
    """The ASGI app; its lifespan re-queues what a killed server left running and starts
    the workers."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None, None]:
        again = svc.store.recover()
        if again:
            log.warning("service_requeued_after_restart", jobs=len(again))
        svc.workers.start()
        yield
        svc.workers.stop()
        if svc.on_stop is not None:
            svc.on_stop()

    routes = [
        Route("/", lambda r: RedirectResponse("/board/")),
        Route("/v1/health", health),
        Route("/v1/tasks", tasks),
        Route("/v1/queue", queue),
        Route("/v1/submissions", submit, methods=["POST"]),
        Route("/v1/submissions", list_jobs, methods=["GET"]),
        Route("/v1/submissions/{job_id}", get_job),
        Route("/v1/submissions/{job_id}/events", events),
        Route("/v1/submissions/{job_id}/report", get_report),
        Route("/v1/submissions/{job_id}/cancel", cancel, methods=["POST"]),
        Route("/r/{job_id}/{key}", view),
        Route("/board/", board),
        Route("/board/{name:path}", board),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        ApiError: _api_error, HTTPException: _http_error, Exception: _internal})
    app.state.svc = svc
    return app
