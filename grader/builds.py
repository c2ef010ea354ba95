"""Compile once per source: the host's cache of what each source's runners built.

A source's Triton kernels and ``load_inline`` extensions are built by its first runner and
kept here, under the hash of the source's text and of the sandbox's environment (backend,
device, the versions of Python, torch, Triton and kgrader): the candidate's replicate, the
same file graded again and a leaderboard's current best, re-timed for every submission, load
them instead of compiling again (an inline CUDA build is ~25 s a runner on an H200).

Who can reach what: the host stages a source's entry, and only that source's, in
``/kg/in/builds/<source name>/``, sealed for the judge's uid like the source; the judge copies
it into that source's runners alone (``sandbox.launcher.builds``), and copies back out what
they built that was not staged in; :func:`keep` adds it to that source's entry and to no
other. So an entry holds only what runners of the same source text wrote: a candidate can
plant a build only for itself (what it could have built anyway), never for another source.
Entries are add-only (a file kept is never replaced), read as data (regular files only, no
link followed, capped in count and bytes), and the least recently used are removed past
:data:`DEFAULT_MIB`. ``KGRADER_BUILD_CACHE`` names the folder, or ``off``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import stat
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from grader import __version__
from grader.logs import get_logger
from sandbox.contract import wire

log = get_logger()

ENV = "KGRADER_BUILD_CACHE"
SIZE_ENV = "KGRADER_BUILD_CACHE_MIB"
DEFAULT_MIB = 8192
MAX_FILES = 4096  # per source entry
MAX_FILE_BYTES = 256 << 20
MAX_ENTRY_BYTES = 1 << 30
PARTS = ("triton", "ext")  # sandbox.launcher.builds.PARTS
_USED = ".used"  # an entry's last use (mtime)


def cache_root() -> Path | None:
    """The cache folder, or None when ``KGRADER_BUILD_CACHE=off``."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in ("off", "0", "none", "false"):
        return None
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kgrader" / "builds"


@functools.cache
def _versions() -> str:
    out = []
    for dist in ("torch", "triton"):
        try:
            out.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist}=none")
    return ",".join(out)


def environment(backend: str, device: str) -> str:
    """What a build depends on besides its source, as the host can tell without importing
    torch: the backend (docker's image has its own torch), the device, Python's, torch's,
    Triton's and kgrader's versions. Triton's keys and the runner's own keys for
    extensions (``sandbox.runner.extcache``) add the compiler target."""
    return f"{backend}|{device}|{sys.version.split()[0]}|{_versions()}|kgrader={__version__}"


def plan(files: Mapping[str, str], env: str) -> dict[str, str]:
    """Source name -> entry key for the untrusted sources among ``files`` (the candidate, the
    current best): the hash of the environment and the source's text."""
    return {name: hashlib.sha256(f"{env}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
            for name, text in files.items()
            if name in (wire.CANDIDATE_NAME, wire.CURRENT_NAME)}


def _files(top: Path) -> list[tuple[str, int]]:
    """(relative path, size) of the regular files under ``top``, never through a link."""
    out: list[tuple[str, int]] = []
    total = 0
    for folder, dirs, names in os.walk(top, followlinks=False):
        dirs[:] = [d for d in dirs if stat.S_ISDIR(os.lstat(os.path.join(folder, d)).st_mode)]
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES or name.startswith(".kg"):
                continue
            total += st.st_size
            if len(out) >= MAX_FILES or total > MAX_ENTRY_BYTES:
                return out
            out.append((os.path.relpath(path, top), st.st_size))
    return out


def _copy_file(src: Path, dest: Path) -> bool:
    """Copy a regular file without following a link at either end; add-only (False when
    ``dest`` exists)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".kg-{os.getpid()}-{time.monotonic_ns()}"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600)
        try:
            with os.fdopen(os.dup(fd), "rb") as f_in, os.fdopen(out, "wb") as f_out:
                shutil.copyfileobj(f_in, f_out, 1 << 20)
            os.link(tmp, dest)  # add-only: an existing file is never replaced
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    finally:
        os.close(fd)


def stage(in_dir: Path, keys: Mapping[str, str], root: Path | None) -> int:
    """Copy each source's entry into ``in_dir/builds/<name>/`` (before the sources are
    sealed); the files staged."""
    if root is None:
        return 0
    n = 0
    for name, key in keys.items():
        entry = root / key
        if not entry.is_dir() or entry.is_symlink():
            continue
        with contextlib.suppress(OSError):
            (entry / _USED).touch()
        for part in PARTS:
            top = entry / part
            if not top.is_dir():
                continue
            for rel, _ in _files(top):
                n += _copy_file(top / rel, in_dir / wire.BUILDS_NAME / name / part / rel)
    return n


def keep(out_dir: Path, keys: Mapping[str, str], root: Path | None) -> int:
    """Add what each source's runners copied out (``out_dir/builds/<name>/``) to that
    source's entry; the files added. Never raises: a cache that cannot be written is
    logged and the grade goes on."""
    if root is None:
        return 0
    added = 0
    try:
        for name, key in keys.items():
            src = out_dir / wire.BUILDS_NAME / name
            if not src.is_dir() or src.is_symlink():
                continue
            entry = root / key
            for part in PARTS:
                top = src / part
                if top.is_dir() and not top.is_symlink():
                    for rel, _ in _files(top):
                        added += _copy_file(top / rel, entry / part / rel)
            with contextlib.suppress(OSError):
                (entry / _USED).touch()
        if added:
            evict(root)
    except OSError as e:
        log.warning("build_cache_unwritable", root=str(root), error=str(e))
    return added


def evict(root: Path, limit_mib: int | None = None) -> int:
    """Remove the least recently used entries until the cache holds at most ``limit_mib``
    (``KGRADER_BUILD_CACHE_MIB``, default :data:`DEFAULT_MIB`); the entries removed."""
    if limit_mib is None:
        try:
            limit_mib = int(os.environ.get(SIZE_ENV, DEFAULT_MIB))
        except ValueError:
            limit_mib = DEFAULT_MIB
    entries = []
    total = 0
    for entry in root.iterdir():
        if not entry.is_dir() or entry.is_symlink():
            continue
        size = sum(s for _, s in _files(entry))
        used = entry / _USED
        entries.append((used.stat().st_mtime if used.exists() else 0.0, size, entry))
        total += size
    removed = 0
    for _, size, entry in sorted(entries):
        if total <= limit_mib << 20:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        removed += 1
    return removed
