"""The soak bench's per-lane checks (bench/soak_checks.py): a lane sees only its own host's
processes, folders and cgroups, and a verdict after an injected fault is named right."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("soak_checks", ROOT / "bench" / "soak_checks.py")
assert _spec is not None and _spec.loader is not None
sc = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("soak_checks", sc)
_spec.loader.exec_module(sc)

A = "box:4242:1700000000.25"  # lane A's host
B = "box:4243:1700000001.50"  # lane B's host, alive at the same time
A_REUSED = "box:4242:1700000999.00"  # a later process that got A's pid again


def _row(**kw: Any) -> dict[str, Any]:
    return {"fault": "none", "honest": True, "fired": False, "rc": 0, **kw}


def test_descendants_are_the_roots_tree_only() -> None:
    parents = {10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20, 22: 21}  # two lanes' hosts 10, 20
    assert sc.descendants(parents, 10) == [11, 12, 13]
    assert sc.descendants(parents, 20) == [21, 22]
    assert sc.descendants(parents, 99) == []


def test_descendants_survive_a_loop_in_a_torn_sample() -> None:
    assert sc.descendants({5: 6, 6: 5, 7: 6}, 5) == [6, 7]


def _folder(base: Path, name: str, owner: str, mode: int = 0o700) -> None:
    d = base / name
    d.mkdir(mode=mode)
    (d / ".kgrader-owner").write_text(json.dumps({"owner": owner, "keep": False}))
    d.chmod(mode)


def _read_marker(p: Path) -> dict[str, Any] | None:
    try:
        body = json.loads((p / ".kgrader-owner").read_text())
    except OSError:
        return None
    return body if isinstance(body, dict) else None


def test_folders_of_another_lane_or_a_reused_pid_are_not_this_lanes(tmp_path: Path) -> None:
    _folder(tmp_path, "kgrader-eval-a", A)
    _folder(tmp_path, "kgrader-eval-b", B)
    _folder(tmp_path, "kgrader-eval-a2", A_REUSED, mode=0o755)
    (tmp_path / "unrelated").mkdir()
    left = sc.Leftovers(("kgrader-eval-",), _read_marker, list, None)
    mine = left.folders(tmp_path, A)
    assert [f["path"] for f in mine] == ["kgrader-eval-a"]
    assert mine[0]["private"] is (os.geteuid() == os.stat(tmp_path / "kgrader-eval-a").st_uid)
    reused = left.folders(tmp_path, A_REUSED)
    assert [f["path"] for f in reused] == ["kgrader-eval-a2"] and reused[0]["private"] is False
    assert len(left.folders(tmp_path)) == 3


def test_cgroups_match_pid_and_start_time_not_a_pid_prefix() -> None:
    names = [("eval@4242@1700000000.25", Path("/cg/a")), ("eval@42421@1700000000.25", Path("/cg/x")),
             ("eval@4243@1700000001.50", Path("/cg/b")), ("eval@4242@1700000999.00", Path("/cg/r"))]
    left = sc.Leftovers(("kgrader-eval-",), _read_marker, lambda: names, None)
    assert left.cgroups_of(A) == ["/cg/a"]
    assert left.cgroups_of(B) == ["/cg/b"]
    assert left.cgroups_of("box:4242:?") == ["/cg/a", "/cg/r"]  # no start time: the pid decides
    assert left.containers(A) == []  # no --docker-host: docker is never asked


def test_an_outside_judge_kill_is_infra_and_judge_died_is_a_wrong_blame() -> None:
    kill = {"fault": "kill_judge", "fired": True, "ok": False}
    assert sc.expected(_row(**kill, code="judge_killed", origin="infrastructure"), set()) == "infra"
    assert sc.expected(_row(**kill, code="sandbox_unavailable", origin="infrastructure"),
                       set()) == "infra"
    assert sc.expected(_row(**kill, code="judge_died", origin="candidate"), set()) == "wrong_blame"
    cheat = _row(**{**kill, "honest": False}, code="judge_died", origin="candidate")
    assert sc.expected(cheat, {"output_untouched"}) == "wrong_blame"
    # a kill that came after the result was written leaves the verdict the kernel earned
    assert sc.expected(_row(fault="kill_judge", fired=True, ok=True), set()) == "pass"
    # another lane's daemon restart under a docker run counts as the same outside kill
    overlap = _row(fault="none", ok=False, dockerd_overlap=True, code="judge_died",
                   origin="candidate")
    assert sc.expected(overlap, set()) == "wrong_blame"


def test_a_full_disk_is_infra_or_a_pass_never_the_kernels_fault() -> None:
    full = {"fault": "disk_full", "ok": False}
    assert sc.expected(_row(**full, code="disk_full", origin="infrastructure"), set()) == "infra"
    assert sc.expected(_row(fault="disk_full", ok=True), set()) == "pass"
    assert sc.expected(_row(**full, code="import", origin="candidate"), set()) == "wrong_blame"
    assert sc.expected(_row(**full, code="disk_full", traceback=True), set()) == "traceback"


def test_other_outcomes_keep_their_names() -> None:
    assert sc.expected(_row(fault="kill_host", fired=True, rc=-signal.SIGKILL), set()) == "killed"
    assert sc.expected(_row(fault="kill_host", fired=True, rc=1), set()) == "rc 1 after SIGKILL"
    assert sc.expected(_row(ok=True, honest=False), set()) == "cheat_passed"
    stopped = _row(ok=False, honest=False, code="input_mutated", origin="candidate")
    assert sc.expected(stopped, {"input_mutated"}) == "stopped"
    assert sc.expected(stopped, {"output_untouched"}) == "stopped_other_code"
    assert sc.expected(_row(ok=False, code="signal", origin="candidate"), set()) == "honest_blamed"
    runner = _row(fault="kill_runner", fired=True, ok=False, code="signal", origin="candidate")
    assert sc.expected(runner, set()) == "wrong_blame"  # its seccomp filter: it cannot SIGKILL itself
    killed = _row(fault="kill_runner", fired=True, ok=False, code="runner_killed", origin="infrastructure")
    assert sc.expected(killed, set()) == "infra"
    assert sc.expected(_row(ok=None), set()) == "infra"
