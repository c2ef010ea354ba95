"""Cancelling one running sandbox (a service job cancelled while it is graded).

:func:`watch` runs ``kill`` once ``cancel`` is set, for as long as the sandbox it guards
runs; each backend passes the kill that ends its whole sandbox (bwrap: the process group
and cgroups; docker: the container). The watcher sleeps on the event (no CPU between
checks) and ends with the sandbox.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

POLL_S = 0.25  # how soon a watch notices its sandbox ended


def watch(cancel: threading.Event | None, kill: Callable[[], None]) -> Callable[[], None]:
    """Kill when ``cancel`` is set; the function returned ends the watch."""
    if cancel is None:
        return lambda: None
    done = threading.Event()

    def run() -> None:
        while not done.is_set():
            if cancel.wait(POLL_S):
                if not done.is_set():
                    with contextlib.suppress(Exception):
                        kill()
                return

    threading.Thread(target=run, daemon=True, name="kgrader-cancel").start()
    return done.set
