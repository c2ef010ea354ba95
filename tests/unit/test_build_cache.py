"""The host's build cache (grader.builds): keyed by source and environment, staged per
source, add-only, no links, least recently used removed first."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from grader import builds
from sandbox.contract import wire

ENV = builds.environment("bwrap", "cpu")


def _write(path: Path, data: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_keys_follow_the_source_and_the_environment() -> None:
    a = builds.plan({wire.CANDIDATE_NAME: "a", wire.CURRENT_NAME: "b", "reference.py": "r"}, ENV)
    assert set(a) == {wire.CANDIDATE_NAME, wire.CURRENT_NAME}  # untrusted sources only
    assert a[wire.CANDIDATE_NAME] != a[wire.CURRENT_NAME]
    same = builds.plan({wire.CURRENT_NAME: "a"}, ENV)[wire.CURRENT_NAME]
    assert same == a[wire.CANDIDATE_NAME]  # the same text is the same source, whatever its role
    other = builds.plan({wire.CANDIDATE_NAME: "a"}, builds.environment("docker", "cpu"))
    assert other[wire.CANDIDATE_NAME] != a[wire.CANDIDATE_NAME]


def test_off_and_a_named_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(builds.ENV, "off")
    assert builds.cache_root() is None
    monkeypatch.setenv(builds.ENV, str(tmp_path))
    assert builds.cache_root() == tmp_path


def test_each_source_is_staged_its_own_entry_only(tmp_path: Path) -> None:
    root, in_dir = tmp_path / "cache", tmp_path / "in"
    keys = builds.plan({wire.CANDIDATE_NAME: "cand", wire.CURRENT_NAME: "cur"}, ENV)
    _write(root / keys[wire.CANDIDATE_NAME] / "triton" / "k1" / "a.cubin", b"cand")
    _write(root / keys[wire.CURRENT_NAME] / "ext" / "h" / "m.so", b"cur")
    _write(root / "someone-else" / "triton" / "k2" / "b.cubin")
    assert builds.stage(in_dir, {wire.CANDIDATE_NAME: keys[wire.CANDIDATE_NAME]}, root) == 1
    staged = {str(p.relative_to(in_dir)) for p in in_dir.rglob("*") if p.is_file()}
    assert staged == {f"builds/{wire.CANDIDATE_NAME}/triton/k1/a.cubin"}


def test_keep_is_add_only_and_copies_no_link_or_device(tmp_path: Path) -> None:
    root, out = tmp_path / "cache", tmp_path / "out"
    key = builds.plan({wire.CANDIDATE_NAME: "cand"}, ENV)[wire.CANDIDATE_NAME]
    src = out / wire.BUILDS_NAME / wire.CANDIDATE_NAME / "triton"
    _write(src / "k" / "a.json", b"first")
    os.symlink("/etc/passwd", src / "k" / "link")
    os.mkfifo(src / "k" / "fifo")
    (src / "dirlink").symlink_to("/etc")
    assert builds.keep(out, {wire.CANDIDATE_NAME: key}, root) == 1
    assert (root / key / "triton" / "k" / "a.json").read_bytes() == b"first"
    assert not any(p.is_symlink() for p in (root / key).rglob("*"))
    assert sorted(p.name for p in (root / key / "triton").rglob("*")) == ["a.json", "k"]
    (src / "k" / "a.json").write_bytes(b"second")  # a later runner cannot replace a kept file
    assert builds.keep(out, {wire.CANDIDATE_NAME: key}, root) == 0
    assert (root / key / "triton" / "k" / "a.json").read_bytes() == b"first"


def test_the_least_recently_used_go_first(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    for i, name in enumerate(("old", "mid", "new")):
        _write(root / name / "ext" / "h" / "m.so", b"x" * (600 << 10))
        used = root / name / ".used"
        used.touch()
        os.utime(used, (time.time() - 100 + i, time.time() - 100 + i))
    assert builds.evict(root, limit_mib=1) == 2
    assert [p.name for p in root.iterdir()] == ["new"]
