"""Wiring: a :class:`~grader.service.config.ServiceConfig` becomes the app; uvicorn serves it."""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from starlette.applications import Starlette

from grader.backends.cleanup import sweep_orphans
from grader.errors import InfrastructureError, UsageError
from grader.pool import Pools
from grader.service.app import Service, make_app
from grader.service.board import Board
from grader.service.config import ServiceConfig
from grader.service.ray_workers import RayCluster, RayWorkers, slots_for
from grader.service.store import Store
from grader.service.worker import Grader, Workers, grade, load_tasks


def build(cfg: ServiceConfig, grader: Grader | None = None) -> Starlette:
    """The app for ``cfg`` (workers start with the app's lifespan). ``grader``: what every
    job is graded through; default :func:`grader.service.worker.grade` (cold), or with
    ``cfg.warm`` a warm pool's :meth:`grader.pool.Pools.grade` (closed at shutdown)."""
    cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    pools = Pools(size=cfg.warm) if grader is None and cfg.warm > 0 else None
    grader = pools.grade if pools is not None else (grader or grade)
    tasks = load_tasks(cfg.tasks_dir, cfg.secret())
    store = Store(cfg.store_target)
    board = Board(cfg.data_dir / "board", store, tasks)
    on_stop = pools.close if pools is not None else None
    workers: Workers
    if cfg.ray_address is not None:
        cluster = RayCluster(cfg.ray_address, cfg.device, cfg.workers)
        workers = RayWorkers(cluster, store, tasks, slots_for(cluster, cfg.backend),
                             max_attempts=cfg.max_attempts, retry_backoff_s=cfg.retry_backoff_s,
                             on_leaderboard=board.record)
        on_stop = cluster.close
    else:
        workers = Workers(store, tasks, cfg.slots(), grader=grader,
                          max_attempts=cfg.max_attempts, retry_backoff_s=cfg.retry_backoff_s,
                          on_leaderboard=board.record)
    svc = Service(store, tasks, workers, board, max_source_bytes=cfg.max_source_bytes,
                  max_request_bytes=cfg.max_request_bytes, read_per_min=cfg.read_per_min,
                  board_refresh_s=cfg.board_refresh_s, on_stop=on_stop)
    return make_app(svc)


class AddressUnavailable(UsageError):
    """``--host``/``--port`` cannot be listened on (in use, not this machine's, privileged)."""

    code = "address_unavailable"


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound before anything is announced; a port in
    use or an address that is not this machine's is :class:`AddressUnavailable`."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: a port is between 0 and 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise AddressUnavailable(f"--host {host!r}: not an address this machine can listen on "
                                 f"({getattr(e, 'strerror', None) or e})") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise AddressUnavailable(f"{host}:{port} is in use by another process",
                                     hint="stop it, or pick another --port") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise AddressUnavailable(f"{host}:{port}: not allowed to listen there "
                                     f"({e.strerror})", hint="pick a --port above 1023") from None
        raise AddressUnavailable(f"cannot listen on {host}:{port}: "
                                 f"{e.strerror or e}") from None
    return sock


@dataclass
class Stopped:
    """How a server ended: the signal that stopped it, and how long the stop took."""

    signum: int
    seconds: float
    running: int  # jobs left running (re-queued at the next start)


def serve(cfg: ServiceConfig, host: str, port: int,
          on_serving: Callable[[str], None] | None = None) -> Stopped:
    """Serve until SIGINT/SIGTERM; what a killed server left is swept first. The socket
    is bound before anything else (a port in use is :class:`AddressUnavailable`, and
    ``on_serving(url)`` is called only once the server accepts requests). Returns how it
    stopped; the caller exits 128 + the signal."""
    import uvicorn

    sock = bind(host, port)
    try:
        sweep_orphans()
        app = build(cfg)
        svc: Service = app.state.svc
        url = f"http://{_url_host(sock)}:{sock.getsockname()[1]}/"
        server = _server_class(uvicorn.Server)(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                           timeout_graceful_shutdown=GRACE_S),
            svc, lambda: on_serving(url) if on_serving else None)
        try:
            server.run(sockets=[sock])
        except SystemExit:  # uvicorn's start-up failure (the lifespan's error is logged)
            raise InfrastructureError("the server did not start: the application's start-up "
                                      "failed (the line above says why)") from None
        if not server.started:
            raise InfrastructureError("the server did not start (the line above says why)")
    finally:
        sock.close()
    counts = svc.store.counts()
    return Stopped(server.signum or signal.SIGTERM,
                   time.monotonic() - (server.stop_at or time.monotonic()), counts["running"])


GRACE_S = 1  # what an open connection gets to finish after a stop signal


def _url_host(sock: socket.socket) -> str:
    host = str(sock.getsockname()[0])
    return f"[{host}]" if ":" in host else host


def _server_class(base: type[Any]) -> type[Any]:
    """uvicorn's ``Server``, told that a stop signal stops the workers and their sandboxes
    at once (a job being graded goes back to the queue at the next start) and ends the open
    event streams, so a stop takes well under 2 s whoever is connected; and that a signal
    is not raised again once it stopped (the caller says so and exits). Built here so
    uvicorn is imported only to serve."""

    class Server(base):  # type: ignore[misc]
        def __init__(self, config: Any, svc: Service, on_started: Callable[[], None]):
            super().__init__(config)
            self.svc, self.on_started = svc, on_started
            self.signum: int | None = None
            self.stop_at: float | None = None

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                self.on_started()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.signum is None:
                self.signum, self.stop_at = sig, time.monotonic()
                self.svc.begin_stop()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own re-raises the signal after the stop; the caller says and exits.
            before = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT,
                                                                       signal.SIGTERM)}
            try:
                yield
            finally:
                for s, h in before.items():
                    signal.signal(s, h)

    return Server
