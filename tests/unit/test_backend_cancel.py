"""A cancelled evaluation's sandbox is killed (grader.backends.cancel.watch), and a watch
whose sandbox ended kills nothing."""

from __future__ import annotations

import threading
import time

from grader.backends.cancel import POLL_S, watch


def test_a_set_cancel_kills_once_and_promptly() -> None:
    cancel, killed = threading.Event(), []
    end = watch(cancel, lambda: killed.append(time.monotonic()))
    t0 = time.monotonic()
    cancel.set()
    for _ in range(100):
        if killed:
            break
        time.sleep(0.01)
    end()
    assert len(killed) == 1 and killed[0] - t0 < 1.0


def test_an_ended_watch_kills_nothing() -> None:
    cancel, killed = threading.Event(), []
    end = watch(cancel, lambda: killed.append(1))
    end()
    time.sleep(POLL_S * 2)
    cancel.set()
    time.sleep(POLL_S * 2)
    assert killed == []
    assert watch(None, lambda: killed.append(1))() is None and killed == []
