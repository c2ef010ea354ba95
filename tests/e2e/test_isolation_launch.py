"""``sandbox.launcher.launch`` and ``sandbox.launcher.identity`` in a real bwrap sandbox (as the backends run them).

bwrap builds the pid, net, ipc and uts namespaces as root and keeps uid 0 with exactly the
capabilities of the launch contract; ``sandbox.launcher.launch --then tests.e2e.isolation_probe``
then runs a probe instead of the judge, which reports what the judge would hold and what
processes started under runner identities can see and do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.backends.bwrap import _mkdirs, _python_roots

ROOT = Path(__file__).resolve().parents[2]
REPO_MOUNT = "/tmp/kgrader-repo"  # inside the sandbox's own /tmp (the root is read-only)
CONTRACT = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN")
SETID = 0xC0  # CAP_SETUID | CAP_SETGID

pytestmark = [pytest.mark.bwrap,
              pytest.mark.skipif(os.geteuid() != 0, reason="the launch contract starts as root")]


def launch(probe: str, caps: tuple[str, ...] = CONTRACT, then: tuple[str, ...] | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]
    for root in _python_roots():  # the interpreter may live under a 0700 folder (/root)
        top = "/" + Path(root).parts[1]
        if top == "/root":
            argv += ["--tmpfs", "/root", *_mkdirs(root), "--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
             # the checkout at a fixed place: it may itself live under /tmp, which the
             # sandbox replaces with a tmpfs (as CI's clone may)
             "--ro-bind", str(ROOT), REPO_MOUNT,
             "--cap-drop", "ALL"]
    for cap in caps:
        argv += ["--cap-add", cap]
    for k, v in {"PYTHONPATH": REPO_MOUNT, "KG_PROBE": probe, **(env or {})}.items():
        argv += ["--setenv", k, v]
    tail = list(then) if then is not None else ["--then", "tests.e2e.isolation_probe"]
    argv += ["--", sys.executable, "-m", "sandbox.launcher.launch", *tail]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def probe(probe: str, **kw: Any) -> dict[str, Any]:
    r = launch(probe, **kw)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def test_judge_runs_as_65534_with_only_setuid_setgid_in_every_set() -> None:
    out = probe("status")
    st = out["status"]
    assert st["Uid"].split() == ["65534"] * 4 and st["Gid"].split() == ["65534"] * 4, st
    assert st["Groups"] == ""
    for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert int(st[key], 16) == SETID, (key, st)
    assert st["NoNewPrivs"] == "1"
    assert "hidepid=invisible" in out["proc_options"] and "gid=65534" in out["proc_options"]
    assert out["launch"]["proc"]["hidden"] is True and out["warnings"] == []


def test_with_setpcap_the_bounding_set_keeps_only_setuid_setgid() -> None:
    out = probe("status", caps=(*CONTRACT, "CAP_SETPCAP"))
    assert int(out["status"]["CapBnd"], 16) == SETID, out["status"]
    assert int(out["status"]["CapEff"], 16) == SETID
    assert out["launch"]["bounding_set"] == "CAP_SETUID,CAP_SETGID only"


def test_refused_proc_mount_is_recorded_and_the_launch_continues() -> None:
    out = probe("status", caps=("CAP_SETUID", "CAP_SETGID"))  # as under docker's AppArmor
    assert out["launch"]["proc"]["hidden"] is False
    assert any("Operation not permitted" in r for r in out["launch"]["proc"]["refused"])
    assert len(out["warnings"]) == 1 and "hidepid" in out["warnings"][0]
    assert int(out["status"]["CapEff"], 16) == SETID


def test_without_setuid_the_launch_fails_closed() -> None:
    r = launch("status", caps=("CAP_SETGID", "CAP_SYS_ADMIN"))
    assert r.returncode == 71, (r.returncode, r.stderr)
    assert "kgrader-launch: switch_user" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("then", [("--then", "os; import x"), ("--then",), ("--bogus", "x")])
def test_malformed_arguments_fail_closed(then: tuple[str, ...]) -> None:
    r = launch("status", then=then)
    assert r.returncode == 71 and "kgrader-launch: arguments" in r.stderr, r.stderr


def test_device_gid_of_root_is_refused() -> None:
    r = launch("status", env={"KGRADER_DEVICE_GIDS": "0,44"})
    assert r.returncode == 71 and "kgrader-launch: groups" in r.stderr, r.stderr


def test_device_gids_become_the_judges_supplementary_groups() -> None:
    out = probe("status", env={"KGRADER_DEVICE_GIDS": "44,109"})
    assert sorted(out["status"]["Groups"].split()) == ["109", "44"]


@pytest.fixture(scope="module")
def judge() -> dict[str, Any]:
    return probe("judge")


def test_runners_get_distinct_uids_and_private_homes(judge: dict[str, Any]) -> None:
    ua, ub = judge["uids"]
    assert ua != ub and all(65500 <= u <= 65531 for u in (ua, ub))
    for uid in (ua, ub):
        assert judge["homes"][str(uid)] == [uid, "0o700"]
    assert judge["all_uids_distinct"] is True
    assert "all 32 runner uids" in judge["exhausted"]


def test_runner_has_no_capabilities_and_keeps_no_new_privs(judge: dict[str, Any]) -> None:
    for side, uid in zip(("a", "b"), judge["uids"], strict=True):
        st = judge[side]["status"]
        assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(uid)] * 4
        assert st["Groups"].split() == [str(uid)]
        for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert int(st[key], 16) == 0, (side, key, st)
        assert st["NoNewPrivs"] == "1"


def test_runners_cannot_see_signal_or_read_each_other_or_the_judge(judge: dict[str, Any]) -> None:
    a, pids = judge["a"], judge["pids"]
    assert pids["b"] not in a["visible"] and pids["judge"] not in a["visible"]
    assert pids["a"] in a["visible"]
    assert a["stop_other"] == "PermissionError" and a["stop_judge"] == "PermissionError"
    assert a["read_other_status"] in ("FileNotFoundError", "PermissionError")
    assert a["list_other_home"] == "PermissionError" and a["write_own_home"] == "ok"
    # a's SIGSTOP did not stop b: b is alive and not stopped (under load it may still be
    # running, "R", when the judge looks, rather than asleep, "S")
    assert judge["b_state_after_a"][:1] in ("S", "R", "D"), judge["b_state_after_a"]


def test_process_count_sees_a_helper_in_its_own_session_and_kill_all_removes_it(
        judge: dict[str, Any]) -> None:
    msg = judge["check_with_helper"]
    assert msg is not None and "runner of a.py" in msg and "sleep" in msg, msg
    assert judge["check_after_kill_a"] is None
    assert "runner of b.py" in judge["check_b_only_without_expecting_it"]
    assert judge["check_after_kill_all"] is None
