"""The CUDA driver's early start (sandbox.launcher.driver): a thread on cuda only, which
ends whatever the driver does (here, a machine without libcuda: the first real CUDA call
reports that, not this thread), so a runner can join it before its threads are counted."""

from __future__ import annotations

import threading

from sandbox.launcher import driver


def test_no_thread_off_cuda() -> None:
    before = threading.active_count()
    assert driver.start("cpu") is None and driver.start("rocm") is None
    driver.wait(None)
    assert threading.active_count() == before


def test_the_thread_ends_even_without_a_driver() -> None:
    t = driver.start("cuda")
    assert t is not None and t.daemon
    driver.wait(t)
    assert not t.is_alive()
