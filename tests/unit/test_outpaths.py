"""Output paths are proven writable by a real write (not by permission bits), leave
nothing behind, and a result whose destination failed is kept in a named fallback file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grader.outpaths import (
    PROBE_PREFIX,
    UNSAVED_ENV,
    OutputPathError,
    check_output_dir,
    check_output_file,
    save_unsaved,
    unsaved_folders,
)


@pytest.mark.parametrize("path", ["/proc/kgrader-nope", "/proc/kgrader-nope/deeper",
                                  "/sys/kgrader-nope"])
def test_a_folder_the_kernel_refuses_is_refused_before_any_work(path: str) -> None:
    # root passes os.access on /proc and /sys; only a real mkdir shows they refuse
    with pytest.raises(OutputPathError, match=r"--out .*cannot create the folder"):
        check_output_dir(path, "--out")


def test_a_file_in_a_folder_the_kernel_refuses_is_refused() -> None:
    with pytest.raises(OutputPathError, match=r"--state /proc/kgrader\.sqlite: cannot write"):
        check_output_file("/proc/kgrader.sqlite", "--state")
    with pytest.raises(OutputPathError, match="cannot"):
        check_output_file("/proc/version", "--state")  # exists, not a place to write


def test_the_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    check_output_dir(tmp_path / "a" / "b" / "c", "--out")
    check_output_file(tmp_path / "x" / "y" / "s.sqlite", "--state")
    existing = tmp_path / "here"
    existing.mkdir()
    check_output_dir(existing, "--records")
    state = tmp_path / "state.sqlite"
    state.write_bytes(b"keep me")
    before = state.stat()
    check_output_file(state, "--state")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here", "state.sqlite"]
    assert list(existing.iterdir()) == []
    assert state.read_bytes() == b"keep me"
    assert state.stat().st_mtime_ns == before.st_mtime_ns


def test_a_probe_that_fails_removes_the_folders_it_made(tmp_path: Path) -> None:
    # a name longer than the file system takes: the folders are made, the file is not
    long = tmp_path / "made" / ("n" * 300)
    with pytest.raises(OutputPathError, match="cannot"):
        check_output_file(long, "--state")
    assert not (tmp_path / "made").exists()
    assert not any(p.name.startswith(PROBE_PREFIX) for p in tmp_path.rglob("*"))


def test_save_unsaved_keeps_the_data_in_a_named_file(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSAVED_ENV, str(tmp_path / "unsaved"))
    data = json.dumps({"ok": True}).encode()
    kept = save_unsaved(data, "report")
    assert kept is not None and kept.parent == tmp_path / "unsaved"
    assert kept.name.startswith("kgrader-report-") and kept.suffix == ".json"
    assert kept.read_bytes() == data
    assert oct(kept.stat().st_mode & 0o777) == oct(0o600)


def test_save_unsaved_falls_through_to_the_next_folder(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSAVED_ENV, "/proc/kgrader-nope")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert unsaved_folders() == [Path("/proc/kgrader-nope"),
                                 tmp_path / "cache" / "kgrader" / "unsaved", tmp_path]
    kept = save_unsaved(b"{}", "report")
    assert kept is not None and kept.parent == tmp_path / "cache" / "kgrader" / "unsaved"
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/kgrader-nope")
    kept = save_unsaved(b"{}", "report2")
    assert kept is not None and kept.parent == tmp_path  # the current folder, last
    assert os.path.isfile(kept)
