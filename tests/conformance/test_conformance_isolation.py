"""What an untrusted candidate can see and touch from inside the sandbox.

One probe candidate (``candidates/probe_isolation.py``) runs once per backend, records what
it could reach, then computes the right answer; each test below checks one property of that
record, plus the report's verdict and the host's state after the run.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grader.report.model import Report

from ._support import REPO, Host, describe, probe_line

SECRET_NAME = "KG_CONFORMANCE_SECRET"


@dataclass
class Probe:
    report: Report
    seen: dict[str, Any]
    token: str
    listener_got_connection: bool
    host: Host


@pytest.fixture(scope="module")
def probe(module_host: Host) -> Probe:
    token = uuid.uuid4().hex[:12]
    secret = f"kg-secret-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))  # loopback only, never any other address
        srv.listen(8)
        cand = module_host.candidate(
            "probe_isolation",
            port=srv.getsockname()[1],
            sentinel=str(module_host.sentinel.path),
            secret_name=SECRET_NAME,
            secret_value=secret,
            token=token,
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(SECRET_NAME, secret)
            report = module_host.evaluate(cand, stages=("compile",))
        srv.setblocking(False)
        try:
            conn, _ = srv.accept()
            conn.close()
            got = True
        except BlockingIOError:
            got = False
    assert report.ok, describe(report)
    return Probe(report, probe_line(report), token, got, module_host)


def test_probe_candidate_runs_to_a_normal_pass(probe: Probe) -> None:
    assert probe.report.ok and probe.report.stage == "compile", describe(probe.report)
    assert probe.report.sandbox is not None and probe.report.sandbox.limit_fired is None
    probe.host.assert_unharmed()


def test_network_has_only_loopback_interface(probe: Probe) -> None:
    ifaces = probe.seen["proc_net_dev"]
    assert ifaces["ok"], ifaces
    assert ifaces["value"] == ["lo"], ifaces
    sysnet = probe.seen["sys_class_net"]
    # bwrap does not mount /sys for CPU runs; where it is visible it must agree.
    if sysnet["ok"]:
        assert sysnet["value"] == ["lo"], sysnet
    probe.host.assert_unharmed()


def test_connection_to_host_loopback_listener_fails(probe: Probe) -> None:
    assert probe.seen["connect"]["ok"] is False, probe.seen["connect"]
    assert not probe.listener_got_connection, "the host's 127.0.0.1 listener was reached"
    probe.host.assert_unharmed()


def test_host_environment_is_not_visible_inside(probe: Probe) -> None:
    assert probe.seen["env_has_secret"] is False
    assert probe.seen["environ_leaks"] == [], "a /proc/*/environ inside holds the host secret"
    p1 = probe.seen["proc1_environ_has_secret"]
    assert not (p1["ok"] and p1["value"]), f"/proc/1/environ of the sandbox leaks: {p1}"
    probe.host.assert_unharmed()


def test_host_files_are_not_readable_inside(probe: Probe) -> None:
    # The sentinel is world-readable on the host: only the mount namespace hides it.
    assert probe.seen["sentinel_read"]["ok"] is False, probe.seen["sentinel_read"]
    assert probe.seen["sentinel_read"]["error"] == "FileNotFoundError", probe.seen["sentinel_read"]
    assert probe.seen["sentinel_write"]["ok"] is False
    for path, res in probe.seen["host_files"].items():
        assert res["ok"] is False, f"{path} readable inside the sandbox: {res}"
    probe.host.assert_unharmed()


@pytest.mark.parametrize(
    "directory", ["/", "/kg/in", "/kg/harness", "/kg/harness/sandbox", "/usr", "/etc"]
)
def test_writes_outside_scratch_fail(probe: Probe, directory: str) -> None:
    res = probe.seen["writes"][directory]
    assert res["ok"] is False, f"wrote into {directory} inside the sandbox: {res}"
    assert res["error"] in ("PermissionError", "OSError", "FileNotFoundError"), res
    if directory.startswith("/kg/harness"):
        assert not (REPO / "sandbox" / f"kgprobe-{probe.token}").exists()
    if directory == "/usr":
        assert not Path(f"/usr/kgprobe-{probe.token}").exists()
    probe.host.assert_unharmed()


def test_scratch_tmp_is_writable_and_private(probe: Probe) -> None:
    res = probe.seen["writes"]["/tmp"]
    assert res["ok"] is True, res
    assert not Path(f"/tmp/kgprobe-{probe.token}").exists(), "sandbox /tmp is the host's /tmp"
    assert probe.seen["append_candidate"]["ok"] is False, "the candidate source is writable"
    probe.host.assert_unharmed()


# The launcher's capabilities (CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN): without
# CAP_SETPCAP nobody inside can empty the bounding set below them; no_new_privs keeps any
# exec from raising them again.
LAUNCH_BOUNDING = (1 << 6) | (1 << 7) | (1 << 21)


def test_candidate_runs_unprivileged_without_capabilities(probe: Probe) -> None:
    st = probe.seen["status"]
    assert probe.seen["euid"] != 0
    uids = st["Uid"].split()
    assert len(set(uids)) == 1 and int(uids[0]) >= 65500, st
    assert "0" not in st["Gid"].split(), st
    for cap in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(st[cap], 16) == 0, f"{cap}={st[cap]}"
    assert int(st["CapBnd"], 16) & ~LAUNCH_BOUNDING == 0, f"CapBnd={st['CapBnd']}"
    assert st["NoNewPrivs"] == "1", st
    probe.host.assert_unharmed()
