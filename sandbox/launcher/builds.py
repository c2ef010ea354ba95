"""Compile once per source, inside the sandbox: a runner's builds in and out.

The host keeps what a source's runners built (``grader.builds``: Triton's kernel cache and
the products of torch's ``load_inline``), keyed by the hash of that source's text, and
stages the entry of each source it grades in ``/kg/in/builds/<source name>/``, sealed for
the judge's uid like the source itself. When the judge installs a source's module in a
runner's private folder, :func:`restore` copies that source's entry in, as files of the
runner's own uid: ``triton/`` into the runner's Triton cache, ``ext/`` into
``builds/ext`` (``sandbox.runner.extcache``). No runner can reach another source's entry:
only the judge reads ``/kg/in``, and it copies a source's entry into that source's runners
alone. When a runner closes (its processes dead), :func:`export` copies what it built and
was not staged in to ``/kg/out/builds/<source name>/``, where the host adds it to that
source's entry (and to no other). What is copied out is the runner's product, read as data:
regular files only, never through a link, capped in count and bytes; a file that cannot
be copied is skipped (a build is an optimisation, never a verdict).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from sandbox.contract.wire import BUILDS_NAME, IN_MOUNT, OUT_MOUNT
from sandbox.launcher.identity import RunnerIdentity, as_fs_identity

# Parts of an entry, and where each lies in a runner's private folder.
PARTS = {"triton": "triton", "ext": os.path.join("builds", "ext")}
MAX_FILES = 4096  # per source, staged in or copied out
MAX_FILE_BYTES = 256 << 20
MAX_BYTES = 1 << 30  # per source copied out of one sandbox
_CHUNK = 1 << 20

_export = False
_sent: dict[str, int] = {}  # source name -> bytes copied out so far in this sandbox
_written: set[str] = set()  # every path the judge created under /kg/out/builds
_files: dict[str, int] = {}  # source name -> files copied out so far


def configure(export: bool) -> None:
    """Whether closing runners copy their builds out (the request's ``builds``)."""
    global _export
    _export = export


def _walk(top: str) -> list[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every regular file under ``top``, never through a link;
    at most :data:`MAX_FILES`."""
    out: list[tuple[str, os.stat_result]] = []
    for folder, dirs, files in os.walk(top, followlinks=False):
        dirs[:] = [d for d in dirs if stat.S_ISDIR(os.lstat(os.path.join(folder, d)).st_mode)]
        for name in files:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
                    out.append((os.path.relpath(path, top), st))
            if len(out) >= MAX_FILES:
                return out
    return out


def _read(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` (no link followed), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while chunk := os.read(fd, _CHUNK):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _write(top: str, rel: str, data: bytes, mode: int) -> bool:
    """Create ``top/rel`` exclusively (folders 0700 on the way, never through a link)."""
    parts = rel.split(os.sep)
    if any(p in ("", ".", "..") for p in parts):
        return False
    folder = top
    for p in parts[:-1]:
        folder = os.path.join(folder, p)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return False
    try:
        fd = os.open(os.path.join(top, rel),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
        return False
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return True


def _parents(path: str) -> list[str]:
    """The folders between ``/kg/out`` and ``path``."""
    out, top = [], os.path.join(OUT_MOUNT, BUILDS_NAME)
    while (path := os.path.dirname(path)).startswith(top):
        out.append(path)
    return out


def _makedirs(folder: str) -> None:
    os.makedirs(folder, 0o700, exist_ok=True)
    _written.update([folder, *_parents(folder)])


def only_ours() -> bool:
    """Whether ``/kg/out/builds`` holds nothing but what :func:`export` wrote: every entry
    one the judge created, a folder or a regular file of its uid, no link. The judge's check
    of its output folder (``sandbox.judge.main``) counts anything else as planted."""
    top = os.path.join(OUT_MOUNT, BUILDS_NAME)
    me = os.geteuid()
    for folder, dirs, files in os.walk(top, followlinks=False):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                return False
            if path not in _written or st.st_uid != me or \
                    not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                return False
    st = os.lstat(top)
    return bool(_written) and stat.S_ISDIR(st.st_mode) and st.st_uid == me


def staged_dir(module: str) -> str:
    return os.path.join(IN_MOUNT, BUILDS_NAME, os.path.basename(module))


def restore(ident: RunnerIdentity, module: str) -> int:
    """Copy the staged entry of ``module``'s source (if any) into the runner's folder as
    the runner's own files; the number of files copied. Best effort: a file that cannot
    be copied is built again by the runner."""
    src = staged_dir(module)
    if not os.path.isdir(src):
        return 0
    n = 0
    for part, dest in PARTS.items():
        top = os.path.join(src, part)
        if not os.path.isdir(top):
            continue
        for rel, _ in _walk(top):
            data = _read(os.path.join(top, rel), MAX_FILE_BYTES)
            if data is None:
                continue
            with contextlib.suppress(OSError), as_fs_identity(ident.uid, ident.gid):
                os.makedirs(os.path.join(ident.home, dest), 0o700, exist_ok=True)
                n += _write(os.path.join(ident.home, dest), rel, data, 0o600)
    return n


def export(ident: RunnerIdentity, module: str) -> int:
    """Copy what the (dead) runner built and was not staged in to
    ``/kg/out/builds/<source name>/``, where the request asks for it; the files copied."""
    if not _export:
        return 0
    name = os.path.basename(module)
    staged, out = staged_dir(module), os.path.join(OUT_MOUNT, BUILDS_NAME, name)
    n = 0
    for part, src in PARTS.items():
        with contextlib.suppress(OSError), as_fs_identity(ident.uid, ident.gid):
            found = _walk(os.path.join(ident.home, src))
        for rel, st in found:
            if os.path.lexists(os.path.join(staged, part, rel)):
                continue
            if _files.get(name, 0) >= MAX_FILES or _sent.get(name, 0) + st.st_size > MAX_BYTES:
                return n
            with contextlib.suppress(OSError), as_fs_identity(ident.uid, ident.gid):
                data = _read(os.path.join(ident.home, src, rel), MAX_FILE_BYTES)
            if data is None:
                continue
            with contextlib.suppress(OSError):
                _makedirs(os.path.join(out, part))
                if _write(os.path.join(out, part), rel, data, 0o600):
                    _written.add(os.path.join(out, part, rel))
                    _written.update(_parents(os.path.join(out, part, rel)))
                    n += 1
                    _files[name] = _files.get(name, 0) + 1
                    _sent[name] = _sent.get(name, 0) + len(data)
    return n
