"""Runner identities fail closed, and the launcher's small parsers refuse what they must.

The real uid switch, hidepid, process counts and the judge without CAP_SETUID run in
tests/e2e/test_isolation_launch.py and test_isolation_e2e.py (bwrap); here: the runner-side
check and the pure logic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.launcher import identity, launch

ROOT = Path(__file__).resolve().parents[2]

def test_a_process_with_capabilities_is_not_a_confined_runner() -> None:
    code = ("from sandbox.launcher import identity\ntry:\n    identity.verify_runner()\n    print('confined')\n"
            "except identity.IsolationUnavailable as e:\n    print('refused:', e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.startswith("refused:"), (r.stdout, r.stderr)


@pytest.mark.parametrize("raw", ["0", "44,0", "65534", "65500", "video", "44;45"])
def test_device_gid_lists_that_would_widen_access_are_refused(raw: str) -> None:
    with pytest.raises(launch.LaunchError):
        launch.device_gids(raw)


def test_device_gid_list_is_parsed_sorted_and_deduplicated() -> None:
    assert launch.device_gids("109, 44,44") == (44, 109)
    assert launch.device_gids(None) == () and launch.device_gids("") == ()


def test_only_the_judge_module_or_a_dotted_name_from_argv_is_executed() -> None:
    assert launch.parse_then([]) == "sandbox.judge.main"
    assert launch.parse_then(["--then", "tests.e2e.isolation_probe"]) == "tests.e2e.isolation_probe"
    for bad in (["--then"], ["--then", "x y"], ["--then", "a;b"], ["--then", "..a"], ["x"]):
        with pytest.raises(launch.LaunchError):
            launch.parse_then(bad)


def test_hidepid_is_recognised_only_with_the_judges_gid() -> None:
    assert launch.proc_hidden("rw,gid=65534,hidepid=invisible", 65534)
    assert launch.proc_hidden("rw,hidepid=2,gid=65534", 65534)
    assert not launch.proc_hidden("rw,hidepid=invisible", 65534)
    assert not launch.proc_hidden("rw,gid=65534,hidepid=ptraceable", 65534)
    assert not launch.proc_hidden(None, 65534)


def test_launch_record_becomes_warnings_and_enforcement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(launch.STATUS_ENV, raising=False)
    assert "not started through sandbox.launcher.launch" in identity.launch_warnings()[0]
    assert identity.launch_enforcement()["runner_identity"].startswith("unavailable")
    refused = {"proc": {"hidden": False, "refused": ["remount hidepid=invisible,gid=65534: EACCES"]},
               "bounding_set": "kept"}
    monkeypatch.setenv(launch.STATUS_ENV, json.dumps(refused))
    (warning,) = identity.launch_warnings()
    assert "EACCES" in warning and "seccomp" in warning
    assert identity.launch_enforcement()["process_visibility"].startswith("all processes visible")
    hidden = {"proc": {"hidden": True, "how": "remount hidepid=invisible,gid=65534"}}
    monkeypatch.setenv(launch.STATUS_ENV, json.dumps(hidden))
    assert identity.launch_warnings() == []
    assert "hidepid=invisible" in identity.launch_enforcement()["process_visibility"]
    monkeypatch.setenv(launch.STATUS_ENV, "{not json")
    assert identity.launch_status() == {"error": f"unreadable {launch.STATUS_ENV}"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another uid")
def test_a_tools_log_is_read_with_the_owning_runners_identity() -> None:
    """The judge (no CAP_DAC_OVERRIDE; here: root keeping only CAP_SETUID/SETGID, so that
    returning to fsuid 0 regains nothing) cannot open a runner's 0600 log as itself; with
    ``as_file_owner`` it reads it as that runner, and a file of an unknown uid stays shut."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="kg-owner-", dir="/tmp")
    try:
        os.chmod(folder, 0o755)
        log, stranger = os.path.join(folder, "ncu.csv"), os.path.join(folder, "other.csv")
        for path, uid in ((log, 65501), (stranger, 65502)):
            with open(path, "w") as f:
                f.write("counters")
            os.chown(path, uid, uid)
            os.chmod(path, 0o600)
        code = (
            "import sys\nfrom sandbox.launcher import caps, identity\n"
            "identity._owners[65501] = 'candidate.py'\n"
            "keep = caps.mask(caps.CAP_SETUID, caps.CAP_SETGID)\ncaps.set_sets(keep, keep, 0)\n"
            "def read(p):\n    try:\n        return open(p).read()\n    except PermissionError:\n"
            "        return 'denied'\n"
            "out = [read(sys.argv[1])]\n"
            "for p in sys.argv[1:]:\n    with identity.as_file_owner(p):\n        out.append(read(p))\n"
            "print(' '.join(out))")
        r = subprocess.run([sys.executable, "-c", code, log, stranger], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.stdout.split() == ["denied", "counters", "denied"], (r.stdout, r.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="runner uids and setfsuid need root")


@root_only
def test_a_runners_home_is_removed_as_its_uid_without_following_its_links(tmp_path: Path) -> None:
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "judge.txt").write_text("the judge's")
    ident = identity.new_runner_identity("<test>")
    home = Path(ident.home)
    with identity._as_fs_identity(ident.uid, ident.gid):  # what the runner wrote there
        (home / "triton" / "kernel.cubin").write_bytes(b"x" * 100)
        (home / "tmp" / "to_outside").symlink_to(outside)
        (home / "tmp" / "to_file").symlink_to(outside / "judge.txt")
    identity.remove_home(ident)
    assert not home.exists()
    assert (outside / "judge.txt").read_text() == "the judge's"  # links were not followed
    identity.remove_home(ident)  # a second time: nothing there, no error


@root_only
def test_a_runner_or_problem_process_that_cannot_start_leaves_no_home(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sandbox.launcher import proc
    from sandbox.problem import handle

    def refused(*a: object, **k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(proc, "spawn_principal", refused)
    monkeypatch.setattr(handle, "spawn_principal", refused)
    monkeypatch.setattr(identity.tempfile, "gettempdir", lambda: str(tmp_path))
    src = tmp_path / "cand.py"
    src.write_text("def launch():\n    pass\n")
    src.chmod(0o400)
    with pytest.raises(proc.RunnerFailure):
        proc.RunnerHandle(str(src), "launch", "cpu")
    with pytest.raises(handle.ProblemDied):
        handle.ProblemHandle("cpu")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("kgrader-runner-")] == []
