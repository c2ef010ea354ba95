"""Wiring: a :class:`~grader.service.config.ServiceConfig` becomes the app; uvicorn serves it."""

from __future__ import annotations

from starlette.applications import Starlette

from grader.backends.cleanup import sweep_orphans
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


def serve(cfg: ServiceConfig, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM; what a killed server left is swept first."""
    import uvicorn

    sweep_orphans()
    app = build(cfg)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=5)
