"""The host's temporary folder: TMPDIR exactly, and a typed refusal when it cannot hold an
evaluation (the e2e proof on a real full tmpfs: tests/e2e/test_full_tmpdir.py)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from grader.backends import cleanup
from grader.errors import HostDiskFullError


def test_tmpdir_is_used_exactly_even_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "absent"))
    assert cleanup.temp_base() == tmp_path / "absent"  # no silent fall-back to /tmp
    with pytest.raises(HostDiskFullError, match="missing or not writable") as info:
        cleanup.require_room(cleanup.temp_base())
    assert info.value.code == "disk_full"


def test_a_folder_with_room_is_accepted(tmp_path: Path) -> None:
    assert cleanup.require_room(tmp_path) == tmp_path


def test_too_little_room_names_the_folder_and_the_figures(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cleanup, "free_bytes", lambda _p: 4096)
    with pytest.raises(HostDiskFullError, match=r"has 4 KiB free.*at least 32 MiB"):
        cleanup.require_room(tmp_path)


def test_only_the_disks_errors_become_disk_full(tmp_path: Path) -> None:
    err = cleanup.disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert err is not None and err.code == "disk_full" and str(tmp_path) in str(err)
    assert cleanup.disk_full(OSError(errno.EACCES, "Permission denied"), tmp_path) is None
