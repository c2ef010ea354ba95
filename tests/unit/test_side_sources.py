"""Sources are the judge's alone on the host side, and each runner gets a private copy.

Real files, real chown and real fsuid switches (the tests run as root, as the backends
do); the runner identities are the judge's own code, run in this process.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

import grader.evaluate as ge
import grader.judgecall as jc
from grader.errors import InfrastructureError
from sandbox.contract import wire
from sandbox.launcher import identity

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown and setfsuid need root")


@root_only
def test_staged_sources_are_0400_files_of_the_judge_in_a_0700_folder(tmp_path: Path) -> None:
    root, in_dir, _ = jc.make_eval_dirs(tmp_path, "kgrader-test-")
    for name in (wire.CANDIDATE_NAME, wire.CURRENT_NAME):
        (in_dir / name).write_text("x = 1\n")
    jc.seal_inputs(in_dir)
    st = os.lstat(in_dir)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (wire.JUDGE_UID, wire.JUDGE_GID, 0o700)
    for name in (wire.CANDIDATE_NAME, wire.CURRENT_NAME):
        st = os.lstat(in_dir / name)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (wire.JUDGE_UID, 0o400)
    shutil.rmtree(root)


def test_a_host_that_cannot_chown_refuses_to_stage(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / wire.CURRENT_NAME).write_text("x = 1\n")
    monkeypatch.setattr(jc.os, "geteuid", lambda: 1000)
    with pytest.raises(InfrastructureError, match="root"):
        jc.seal_inputs(tmp_path)


def test_staging_failure_leaves_no_evaluation_folder(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    task = Path(__file__).parents[2] / "examples" / "vector_add_small"
    req = ge.EvalRequest.from_paths(task, task / "candidates" / "good.py", work_dir=tmp_path)
    monkeypatch.setattr(jc.os, "geteuid", lambda: 1000)
    with pytest.raises(InfrastructureError):
        jc.stage(ge.judge_request(req, "cpu", None), ge.sources(req), req.effective_limits(),
                 work_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o444, 0o440, 0o404, 0o600])
def test_the_judge_refuses_a_source_others_could_read(tmp_path: Path, mode: int) -> None:
    src = tmp_path / "current.py"
    src.write_text("SECRET = 1\n")
    src.chmod(mode)
    if mode & 0o077:
        with pytest.raises(identity.IsolationUnavailable, match="readable beyond"):
            identity._read_staged(str(src))
    else:
        assert identity._read_staged(str(src)) == b"SECRET = 1\n"


@root_only
def test_the_judge_refuses_a_source_of_another_owner(tmp_path: Path) -> None:
    src = tmp_path / "current.py"
    src.write_text("SECRET = 1\n")
    src.chmod(0o400)
    os.chown(src, 65500, 65500)
    with pytest.raises(identity.IsolationUnavailable, match="uid 65500"):
        identity._read_staged(str(src))


def test_the_judge_refuses_a_link_in_place_of_a_source(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text("x = 1\n")
    (tmp_path / "real.py").chmod(0o400)
    (tmp_path / "current.py").symlink_to(tmp_path / "real.py")
    with pytest.raises(identity.IsolationUnavailable, match="cannot open"):
        identity._read_staged(str(tmp_path / "current.py"))


@root_only
def test_each_runner_imports_a_private_copy_owned_by_its_uid(tmp_path: Path) -> None:
    src = tmp_path / "current.py"
    text = "# marker\n" + "def launch():\n    return 1\n" * 50
    src.write_text(text)
    src.chmod(0o400)
    ident = identity.new_runner_identity(str(src))
    try:
        copy = identity.install_module(ident, str(src))
        assert copy == os.path.join(ident.home, identity.MODULE_DIR, "current.py")
        st, folder = os.lstat(copy), os.lstat(os.path.dirname(copy))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (ident.uid, 0o400)
        assert (folder.st_uid, stat.S_IMODE(folder.st_mode)) == (ident.uid, 0o700)
        assert Path(copy).read_bytes() == src.read_bytes()  # same bytes: same line numbers
        assert identity._owners[ident.uid] == str(src)  # attribution keeps the staged name
        assert ident.env()["PYTHONSAFEPATH"] == "1"
    finally:
        shutil.rmtree(ident.home)
