"""A Ray that an e2e test starts sends nothing beyond this host's loopback.

Left alone, Ray reaches out even on a one-machine test cluster: it rewrites a loopback
address into the host's outward one (``resolve_ip_for_localhost``), its dashboard process
asks the cloud metadata service (169.254.169.254, and a DNS lookup of
``metadata.google.internal``) which cloud it runs on whatever the usage-stats setting, and
a ``ray start`` head with usage stats disabled still posts a "disabled" report. The
environment here, given to the head, its nodes and the kgrader process that drives them,
keeps every address on 127.0.0.1 and points every outward HTTP(S) request at a closed
loopback port.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

LOOPBACK = "127.0.0.1"
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens, refused at once


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
