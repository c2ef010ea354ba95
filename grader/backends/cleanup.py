"""Owners of sandbox leftovers, and reclaiming the leftovers of owners that are gone.

Everything kgrader leaves on the host while an evaluation runs names the host process that
made it, as ``host:pid:start-time`` (a pid alone is reused; with its start time it is not):

* evaluation folders in the temp dir (``kgrader-eval-*``, ``kgrader-mode-*``, and the
  scratch mount points ``kgrader-scratch-*``) carry a marker file :data:`OWNER_FILE`
  written by :func:`mark_owner` right after the folder is made;
* each backend's own leftovers (containers, cgroups) carry the owner in a way the backend
  reads back itself (:meth:`~grader.backends.base.SandboxBackend.reclaim`).

A host process killed with ``SIGKILL`` runs no ``finally``: its folders (one may still
hold the judge's secret file), containers and cgroups stay. :func:`reclaim_orphans`
removes those whose owner no longer runs on this host and leaves the rest alone
(``kgrader sandbox cleanup``); :func:`sweep_orphans` is its cheap, stricter form that
every grading command runs when it starts. Both do the folders here and ask every
registered backend for its own. An interrupted process removes its own
(:mod:`grader.backends.stop`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.backends.base import Reclaimed
from grader.backends.owner import current_owner, owner_alive, owner_gone, owner_of
from grader.backends.registry import backend_classes
from grader.errors import HostDiskFullError
from grader.logs import get_logger

# The owner tokens live in grader.backends.owner (a leaf the docker backend imports too);
# they are re-exported here, beside the markers that carry them.
__all__ = [
    "FOLDER_PREFIXES",
    "OWNER_FILE",
    "CleanupReport",
    "current_owner",
    "group_of",
    "mark_kept",
    "mark_owner",
    "marked_here",
    "owner_alive",
    "owner_gone",
    "owner_of",
    "read_marker",
    "reclaim_folders",
    "reclaim_orphans",
    "remove_quietly",
    "set_owner_group",
    "sweep_orphans",
    "temp_base",
]

log = get_logger("kgrader.cleanup")

# Room an evaluation folder needs on the host: sealed sources, the secret, the judge's
# record (capped by limits.result_bytes) and the backend's own files.
MIN_FREE_BYTES = 32 << 20
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
TMP_HINT = "free space there, or set TMPDIR to a folder with room"


def temp_base() -> Path:
    """Where evaluation folders go, and where the sweep looks: ``$TMPDIR`` exactly when it
    is set (never Python's silent fall-back to ``/tmp`` when it is full or missing, which
    would put folders where the next command's sweep does not look), else the platform's
    temporary folder."""
    raw = os.environ.get("TMPDIR")
    return Path(raw) if raw else Path(tempfile.gettempdir())


def free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def require_room(base: Path) -> Path:
    """``base`` if an evaluation folder fits there, else :class:`HostDiskFullError`."""
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        raise HostDiskFullError(f"the temporary folder {base} is missing or not writable",
                                hint="set TMPDIR to a writable folder")
    free = free_bytes(base)
    if free is not None and free < MIN_FREE_BYTES:
        raise HostDiskFullError(f"the temporary folder {base} has {free >> 10} KiB free; an "
                                f"evaluation needs at least {MIN_FREE_BYTES >> 20} MiB",
                                hint=TMP_HINT)
    return base


def disk_full(e: OSError, where: Path) -> HostDiskFullError | None:
    """The typed error for an ``OSError`` that is the disk's (ENOSPC, EDQUOT), else None."""
    if e.errno not in DISK_ERRNOS:
        return None
    return HostDiskFullError(f"no room left in {where}: {e.strerror}", hint=TMP_HINT)
OWNER_FILE = ".kgrader-owner"
FOLDER_PREFIXES = ("kgrader-eval-", "kgrader-mode-", "kgrader-scratch-")
UNOWNED_AFTER_S = 24 * 3600.0
_MARKER_MAX = 4096
_marked: set[Path] = set()
_group: list[str] = []


def set_owner_group(group: str | None) -> None:
    """Name the run this process's next folders belong to (a Ray task's driver run), so
    that the run's stop can find them on a node after their owner was killed
    (:mod:`grader.leaderboard.ray_stop`); ``None``: no group."""
    _group[:] = [group] if group else []


def group_of(marker: dict[str, Any] | None) -> str | None:
    """The run a marker's folder belongs to, if one was named."""
    value = marker.get("group") if marker else None
    return value if isinstance(value, str) else None


def mark_owner(root: Path) -> None:
    """Record this process as the owner of the fresh folder ``root``.

    Call it right after creating the folder. The marker is made exclusively and never
    through a link; ``root`` must be a directory of this user that the sandbox cannot write.
    The folder is also remembered in memory, so that a stop can find it even after an
    interrupted removal took its marker (:func:`grader.backends.stop.reclaim_own`).
    """
    _marked.add(root)
    body: dict[str, Any] = {"owner": current_owner(), "keep": False}
    if _group:
        body["group"] = _group[0]
    _write_marker(root, body, exclusive=True)


def marked_here() -> frozenset[Path]:
    """The folders :func:`mark_owner` marked in this process (some may be gone)."""
    return frozenset(_marked)


def mark_kept(root: Path) -> None:
    """Mark ``root`` as kept on purpose (``--keep``): cleanup never removes it."""
    _write_marker(root, {"owner": current_owner(), "keep": True}, exclusive=False)


def _write_marker(root: Path, body: dict[str, Any], *, exclusive: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(root / OWNER_FILE, flags, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)


def read_marker(root: Path) -> dict[str, Any] | None:
    """The marker of ``root``, or ``None`` when it is absent or not one kgrader wrote."""
    try:
        fd = os.open(root / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(_MARKER_MAX + 1)
    try:
        body = json.loads(raw) if len(raw) <= _MARKER_MAX else None
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("owner"), str):
        return None
    return body


@dataclass(frozen=True)
class CleanupReport:
    """What :func:`reclaim_orphans` removed and what it left, by kind."""

    folders_removed: tuple[str, ...] = ()
    folders_kept: tuple[str, ...] = ()
    containers_removed: tuple[str, ...] = ()
    containers_kept: tuple[str, ...] = ()
    cgroups_removed: tuple[str, ...] = ()
    # The daemon backends' state (``checked``, ``unavailable: why``, ...), "; "-joined;
    # the key keeps the name of the one daemon backend there was when it was added.
    docker: str = "not checked"
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def removed(self) -> int:
        return len(self.folders_removed) + len(self.containers_removed) + len(self.cgroups_removed)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _folder_verdict(path: Path, include_live: bool, now: float) -> str:
    """``remove`` or why the folder stays (``live``, ``kept``, ``unowned``, ``foreign``)."""
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return "foreign"  # a link, a file, or another user's folder: never ours to delete
    marker = read_marker(path)
    if marker is None:
        # Folders made before markers existed (or in the instant before the marker): only
        # once they are older than any evaluation could run.
        return "remove" if now - st.st_mtime > UNOWNED_AFTER_S or include_live else "unowned"
    if marker.get("keep") is True:
        return "kept"
    if owner_alive(marker["owner"]) and not include_live:
        return "live"
    return "remove"


def reclaim_folders(
    temp_dir: Path | None = None, *, include_live: bool = False
) -> tuple[list[str], list[str], list[str]]:
    """``(removed, kept, errors)`` for evaluation folders in ``temp_dir`` (default: the
    temp dir)."""
    base = Path(temp_dir or temp_base())
    removed: list[str] = []
    kept: list[str] = []
    errors: list[str] = []
    now = time.time()
    try:
        entries = sorted(base.iterdir())
    except OSError as exc:
        return removed, kept, [f"cannot list {base}: {exc}"]
    for path in entries:
        if not path.name.startswith(FOLDER_PREFIXES):
            continue
        try:
            verdict = _folder_verdict(path, include_live, now)
        except OSError:
            continue  # vanished meanwhile
        if verdict != "remove":
            if verdict != "foreign":
                kept.append(f"{path} ({verdict})")
            continue
        try:
            # rmtree works through directory fds and never follows a link the sandbox
            # may have planted inside.
            shutil.rmtree(path)
            removed.append(str(path))
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    return removed, kept, errors


def _by_kind(results: list[tuple[type[Any], Reclaimed]],
             default: str) -> tuple[dict[str, Any], str]:
    """The report's fields from each backend's result: its leftovers under their kind;
    and the daemon backends' states, "; "-joined (``default`` when none said one)."""
    fields: dict[str, Any] = {"containers_removed": (), "containers_kept": (),
                              "cgroups_removed": ()}
    states = []
    for cls, r in results:
        kind = cls.capabilities.leftovers
        fields[f"{kind}_removed"] += r.removed
        if kind == "containers":
            fields["containers_kept"] += r.kept
        if r.state is not None:
            states.append(r.state)
    return fields, "; ".join(states) or default


def reclaim_orphans(
    *,
    temp_dir: Path | None = None,
    include_live: bool = False,
    daemons: bool = True,
    backends: bool = True,
) -> CleanupReport:
    """Remove the folders, containers and cgroups of kgrader processes that are gone.

    Anything whose owner still runs on this host is left alone unless ``include_live``.
    The folders are reclaimed here; each registered backend reclaims its own
    (``backends``: at all; ``daemons``: also those that need a daemon). A daemon is
    optional: without its SDK or a reachable daemon the report says so and the rest still
    happens. Never raises for a single item; its error is in the report.
    """
    folders_removed, folders_kept, errors = reclaim_folders(temp_dir, include_live=include_live)
    results = [(cls, cls.reclaim(include_live=include_live)) for cls in backend_classes()
               if backends and (daemons or not cls.capabilities.daemon)]
    fields, state = _by_kind(results, "not checked")
    report = CleanupReport(
        folders_removed=tuple(folders_removed),
        folders_kept=tuple(folders_kept),
        docker=state,
        errors=tuple(errors),
        **fields,
    )
    log.info("cleanup.done", folders=len(folders_removed),
             containers=len(report.containers_removed), cgroups=len(report.cgroups_removed),
             kept=len(folders_kept) + len(report.containers_kept), docker=report.docker,
             errors=len(errors))
    return report


def sweep_orphans(temp_dir: Path | None = None) -> CleanupReport:
    """The sweep every grading command runs when it starts (``run``, ``leaderboard run``,
    the agent tools, ``profile``): what killed kgrader processes of this host left.

    Cheap: one listing of the temp dir, and each registered backend's own sweep
    (:meth:`~grader.backends.base.SandboxBackend.sweep`: milliseconds; a daemon's
    containers are looked for in a background thread, only where one is configured, so a
    slow or absent daemon delays nothing). Safe: an item goes only when its owner is
    provably gone (:func:`owner_gone`); a live owner's, a kept, an unmarked, another
    user's or another host's item stays for ``kgrader sandbox cleanup``. Never raises.
    """
    base = Path(temp_dir or temp_base())
    removed: list[str] = []
    errors: list[str] = []
    try:
        entries = [p for p in base.iterdir() if p.name.startswith(FOLDER_PREFIXES)]
    except OSError as exc:
        entries, errors = [], [f"cannot list {base}: {exc}"]
    for path in entries:
        try:
            st = path.lstat()
            marker = read_marker(path) if stat.S_ISDIR(st.st_mode) else None
        except OSError:
            continue
        if st.st_uid != os.geteuid() or marker is None or marker.get("keep") is True \
                or not owner_gone(marker["owner"]):
            continue
        try:
            shutil.rmtree(path)
            removed.append(str(path))
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    results = []
    for cls in backend_classes():
        with contextlib.suppress(Exception):  # never raises
            results.append((cls, cls.sweep()))
    fields, state = _by_kind(results, "not configured")
    if removed or fields["cgroups_removed"] or errors:
        log.info("sweep.done", folders=len(removed), cgroups=len(fields["cgroups_removed"]),
                 errors=errors)
    return CleanupReport(folders_removed=tuple(removed), docker=state, errors=tuple(errors),
                         **fields)


def remove_quietly(path: Path) -> None:
    """Remove a folder this process made (best effort, for ``finally`` blocks)."""
    with contextlib.suppress(OSError):
        shutil.rmtree(path)
