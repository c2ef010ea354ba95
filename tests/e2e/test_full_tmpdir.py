"""A full host disk is the host's fault, reported as such, and loses nothing.

``TMPDIR`` is a small tmpfs of the test's own (root mounts it; skipped where mount is
refused). Full before the run: ``kgrader run`` refuses at once with ``disk_full``, exit 2,
and creates nothing (never Python's silent fall-back to ``/tmp``). Filled while the judge
works: the judge cannot write its record, and the report says ``disk_full`` (origin
infrastructure, exit 2), not the candidate's ``judge_died``; the folder is removed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_clean_stops import DEVICE, EXAMPLE, RUNTIME_ONLY, _start, _started, _wait

pytestmark = pytest.mark.bwrap
# The example's good kernel, slow to import: the judge waits while the disk fills.
SLOW_IMPORT = "import time\ntime.sleep(6)\n" + (EXAMPLE / "candidates" / "good.py").read_text()


@pytest.fixture
def small_tmp(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "tmp"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> None:
    """Leave no free page: megabytes, then pages, unbuffered."""
    with (mnt / "filler").open("wb", buffering=0) as f:
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            try:
                while True:
                    f.write(chunk)
            except OSError:
                continue


def _run(cand: Path, tmpdir: Path) -> subprocess.Popen[str]:
    return _start(["run", str(EXAMPLE), str(cand), "--backend", "bwrap", "--device", DEVICE,
                   "--policy", str(RUNTIME_ONLY), "--json"], tmpdir)


def test_full_tmpdir_before_the_run_is_refused_at_once(small_tmp: Path) -> None:
    _fill(small_tmp)
    proc = _run(EXAMPLE / "candidates" / "good.py", small_tmp)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-2000:]
    assert "Traceback" not in err
    doc = json.loads(out)
    assert (doc["error"]["code"], doc["error"]["origin"]) == ("disk_full", "infrastructure"), doc
    assert str(small_tmp) in doc["error"]["message"]
    assert sorted(p.name for p in small_tmp.iterdir()) == ["filler"]


def test_tmpdir_filled_while_the_judge_works_is_the_hosts_fault(small_tmp: Path,
                                                                  tmp_path: Path) -> None:
    cand = tmp_path / "slow_import.py"
    cand.write_text(SLOW_IMPORT)
    proc = _run(cand, small_tmp)
    # Once the judge has consumed (and unlinked) its secret: that frees its pages, which
    # would otherwise hold the record.
    _wait("the judge", lambda: bool(_started(small_tmp, proc.pid)), proc)
    _fill(small_tmp)  # the runner still sleeps in its import; the record is not written yet
    free = shutil.disk_usage(small_tmp).free
    assert free < 8192, free
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    codes = [(e["stage"], e["code"], e["origin"]) for e in report["errors"]]
    assert codes == [("sandbox", "disk_full", "infrastructure")], report["errors"]
    assert sorted(p.name for p in small_tmp.iterdir()) == ["filler"]
