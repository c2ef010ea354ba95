"""A Ray that an e2e test starts sends nothing beyond this host's loopback.

Left alone, Ray reaches out even on a one-machine test cluster: it rewrites a loopback
address into the host's outward one (``resolve_ip_for_localhost``), its dashboard process
asks the cloud metadata service (169.254.169.254, and a DNS lookup of
``metadata.google.internal``) which cloud it runs on whatever the usage-stats setting, and
a ``ray start`` head with usage stats disabled still posts a "disabled" report. The
environment here, given to the head, its nodes and the kgrader process that drives them,
keeps every address on 127.0.0.1 and points every outward HTTP(S) request at a closed
loopback port.

A ``ray start`` head that a test starts is its own: :func:`start_head` starts it in a new
session, and :meth:`Head.stop` kills that session's processes only. ``ray stop --force``
kills every Ray process on the host: a parallel test's cluster, or a developer's own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

LOOPBACK = "127.0.0.1"
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens, refused at once


# Ray's node start (``Cluster``, a ``ray.init`` that starts a node, ``ray start --head``)
# waits a fixed 30 s for the new raylet to register with the GCS (ray/_private/node.py),
# then raises "The current node timed out during startup". Beside the whole suite and two
# evaluations per core (load 25 on 2 cores) a head took longer once. A test's node start
# is given this long instead.
RAYLET_REGISTER_S = 180.0
STARTUP_TIMED_OUT = "timed out during startup"


def patient_node_start(monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """In this process, Ray's look-up of a node it started retries for
    :data:`RAYLET_REGISTER_S` (the node start's own 30 s loop calls it). With ``monkeypatch``
    the change ends with the test; without, it lasts the process (a test's driver script)."""
    from ray._private import services

    real: Callable[..., Any] = services.get_node

    def get_node(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + RAYLET_REGISTER_S
        while True:
            try:
                return real(*args, **kwargs)
            except RuntimeError:  # not registered yet
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    if monkeypatch is None:
        services.get_node = get_node
    else:
        monkeypatch.setattr(services, "get_node", get_node)


def quiet_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default this process's environment) for a Ray head, node or driver."""
    env = dict(os.environ if base is None else base)
    env.update({
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": NOWHERE,  # the report a disabled `ray start` still sends
        # Off on Linux only for the address Ray derives for this host: loopback, not eth0
        # (what else it switches concerns Windows and macOS, or a second `ray start`).
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    })
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[name] = NOWHERE  # the dashboard's cloud probe: refused here, no DNS lookup
    for name in ("no_proxy", "NO_PROXY"):
        env[name] = f"{LOOPBACK},localhost"
    return env


@dataclass(frozen=True)
class Head:
    """A ``ray start --head`` on loopback; every process it started (GCS, raylet, agents,
    workers) is in the session ``sid``."""

    address: str
    sid: int

    def processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == self.sid:
                    found.append(proc)
            except (OSError, psutil.Error):
                continue
        return found

    def stop(self, timeout: float = 60.0) -> None:
        """Kill this head's processes (what ``ray stop --force`` does, for this head only)
        and wait until they are gone."""
        procs = self.processes()
        for proc in procs:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                continue
        _, alive = psutil.wait_procs(procs, timeout=timeout)
        assert not alive, f"Ray processes of {self.address} still alive: {alive}"


def start_head(port: int, num_cpus: int, env: Mapping[str, str], timeout: float = 180) -> Head:
    """``ray start --head`` on 127.0.0.1:``port`` with ``env`` (see :func:`quiet_env`), in a
    session of its own. A start that Ray gave up on after its fixed 30 s wait for the raylet
    (a loaded host, see :data:`RAYLET_REGISTER_S`) is stopped and tried again while
    ``timeout`` lasts."""
    ray_bin = shutil.which("ray")
    if ray_bin is None:
        pytest.skip("ray is not installed (pip install ray)")
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.Popen([ray_bin, "start", "--head", f"--port={port}",
                                 "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
                                 "--include-dashboard=false", "--disable-usage-stats"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(env), start_new_session=True)
        head = Head(f"{LOOPBACK}:{port}", proc.pid)
        try:
            _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            head.stop()
            raise AssertionError(f"`ray start --head` on port {port} took over {timeout:.0f} s") \
                from None
        if proc.returncode == 0:
            return head
        head.stop()
        if STARTUP_TIMED_OUT not in err or time.monotonic() > deadline - 60:
            raise AssertionError(f"`ray start --head` failed ({proc.returncode}): {err[-2000:]}")

