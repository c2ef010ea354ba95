"""Connecting to an existing Ray cluster: what the leaderboard's :class:`~grader.leaderboard.
engine.RayEngine` and the service's Ray workers (:mod:`grader.service.ray_workers`) share.

* :func:`import_ray`: the ``ray`` module, or the CLI's :class:`UsageError` naming the
  option that needs it;
* :func:`connect`: ``ray.init`` on the operator's cluster (loopback addresses keep the
  driver on loopback too), keeping the SIGINT/SIGTERM handlers ``ray.init`` replaces;
  a cluster that cannot be reached is an :class:`InfrastructureError` (at once, by
  :func:`probe`, where nothing listens at the address);
* :class:`ClusterLost` and :func:`lost_errors`: what a cluster that went away raises.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

from grader.errors import InfrastructureError, UsageError


class ClusterLost(InfrastructureError):
    """The Ray cluster went away mid-run."""

    code = "ray_cluster_lost"


def import_ray(option: str) -> Any:
    """The ``ray`` module; without it, ``option`` (e.g. ``--engine ray``) is a usage error."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"{option} needs the ray package (pip install 'ray>=2.9')") from None
    return ray


@contextlib.contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """Put back the SIGINT/SIGTERM handlers ``ray.init`` replaces with its own (which exit
    the driver at once): the CLI's handlers must run, so that the driver cancels its
    tasks and the workers stop their sandboxes."""
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``[ray://]HOST:PORT``; None for ``auto`` and anything else."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float = 5.0) -> None:
    """Refuse at once an address where nothing listens (``ray.init`` retries one for
    minutes); ``auto`` and what is not ``[ray://]HOST:PORT`` are left to Ray."""
    where = _host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except OSError as e:
        raise InfrastructureError(f"cannot connect to the Ray cluster at {address!r}: "
                                  f"nothing answers there ({e})",
                                  hint="start one with `ray start --head` or pass "
                                       "--ray-address HOST:PORT") from None


def refused(address: str, timeout: float = 5.0) -> bool:
    """Whether a connection to ``HOST:PORT`` is refused: nothing listens there any more, so
    the cluster's head is gone for certain. A timeout or another error proves nothing (a
    remote head behind a slow network) and is left to Ray's own calls."""
    where = _host_port(address)
    if where is None:
        return False
    try:
        socket.create_connection(where, timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def connect(address: str, option: str) -> Any:
    """``ray.init`` on the cluster at ``address`` (``auto`` or ``HOST:PORT``); returns the
    ``ray`` module. Raises :class:`UsageError` without ray, :class:`InfrastructureError`
    when the cluster cannot be reached."""
    ray: Any = import_ray(option)
    probe(address)
    try:
        extra: dict[str, Any] = {}
        if address.startswith(("127.", "localhost")):
            # A loopback cluster: keep the driver's own endpoints on loopback too, rather
            # than on whatever address Ray picks for this host.
            extra["_node_ip_address"] = "127.0.0.1"
        with keep_signal_handlers():
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False, logging_level=logging.ERROR, **extra)
    except Exception as e:
        raise InfrastructureError(f"cannot connect to the Ray cluster at {address!r}: {e}",
                                  hint="start one with `ray start --head` or pass "
                                       "--ray-address HOST:PORT") from None
    return ray


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """The exceptions a Ray call raises when the cluster (or the link to it) is gone."""
    return (ray.exceptions.RaySystemError, ray.exceptions.RayError, ConnectionError)
