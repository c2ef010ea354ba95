"""One judge call: stage the files, write the secret, run the judge once, read the record.

The single copy of the host's side of the secret protocol. ``kgrader run``
(:mod:`grader.evaluate`) and every judge mode (``check``: :mod:`grader.tasks.check`,
``profile``: :mod:`grader.diagnostics.run`, ``measure_peak``: :mod:`grader.measure.peaks`,
``calibrate``: ``bench/calibration.py``) go through it, so every sandbox run gets the same
guarantees: a private folder this process owns, sources only the judge's uid can read, a
fresh HMAC key in a secret file created exclusively and never through a link, the request's
limits the ones the backend enforces, and a record read without trusting it
(:func:`grader.report.record.read_result`).

The steps are separate (:func:`stage`, :func:`launch`, :func:`read_record`,
:func:`discard`) for callers that schedule them apart; :func:`judge_run` is the whole call
with its clean-up, and :func:`run_judge_mode` a judge mode's call that must yield a verified
record or raise :class:`InfrastructureError`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader import builds as build_cache
from grader.backends.base import SandboxBackend, SandboxOutcome, SandboxSpec
from grader.backends.cleanup import disk_full, mark_kept, mark_owner, require_room, temp_base
from grader.backends.gate import MeasureGate, Turn, make_fifo
from grader.backends.progress import JudgeProgress, make_progress_fifo
from grader.backends.select import detect_device, select_backend
from grader.backends.stop import ensure_running
from grader.errors import HostDiskFullError, InfrastructureError, UsageError
from grader.limits import Limits
from grader.logs import relay
from grader.report.record import ResultProblem, read_result
from sandbox.contract import wire

JUDGE_ARGV = ("python3", "-m", "sandbox.launcher.launch")  # the launcher execs the judge
# A judge mode's limits when its caller names none (measure_peak's calibration).
MODE_LIMITS = Limits(compile_s=60, run_s=600, memory_mib=8192)


@dataclass(frozen=True)
class Staged:
    """A staged evaluation folder: ``root`` holds ``in/`` and ``out/``; ``key`` is the
    HMAC key written into the secret, the only way to tell the judge's record from a forgery."""

    root: Path
    in_dir: Path
    out_dir: Path
    key: bytes


@dataclass(frozen=True)
class JudgeRun:
    """A finished sandbox run: its folder, what the backend saw, and when it was launched
    (``time.time()`` just before the backend started, to frame the judge's phases)."""

    staged: Staged
    outcome: SandboxOutcome
    launched: float


def make_eval_dirs(parent: Path | None, prefix: str) -> tuple[Path, Path, Path]:
    """A private evaluation folder: ``in/`` (sources, sealed by :func:`seal_inputs`) and
    ``out/`` (0700). The root keeps ``mkdtemp``'s 0700 for its whole life: the backends
    bind ``in/`` and ``out/`` themselves, so no sandbox uid resolves a path through it, and
    what a SIGKILL leaves is its owner's alone."""
    ensure_running()  # a process told to stop starts no new sandbox (grader.backends.stop)
    base = parent if parent is not None else temp_base()
    try:
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=require_room(base)))
    except OSError as e:
        raise disk_full(e, base) or HostDiskFullError(
            f"cannot make an evaluation folder in {base}: {e}",
            hint="set TMPDIR (or the work folder) to a writable folder") from None
    try:
        mark_owner(root)  # lets the next kgrader process reclaim it if this one is killed
        in_dir, out_dir = root / "in", root / "out"
        in_dir.mkdir(mode=0o755)
        out_dir.mkdir(mode=0o700)
    except OSError as e:
        shutil.rmtree(root, ignore_errors=True)
        raise disk_full(e, base) or e from None
    return root, in_dir, out_dir


def seal_inputs(in_dir: Path) -> None:
    """Make ``in/`` and every source in it the judge's alone: 0400 files in a 0700 folder,
    owned by the judge's uid. A runner can then open no side's source, not even list them;
    the judge copies each runner's own module into that runner's private folder
    (``sandbox.launcher.identity.install_module``), and refuses a source others could read. The
    docker backend binds ``in/`` unchanged, so the uid is the same number inside.

    Raises :class:`InfrastructureError` where the host cannot give the files away (not
    root, or a file system refusing chown): a world-readable source would let the
    candidate read the current best's, which on a leaderboard is someone else's kernel.
    """
    if os.geteuid() != 0:
        raise InfrastructureError(
            "kgrader must run as root to stage sources for the judge's uid "
            f"{wire.JUDGE_UID} alone: otherwise every runner could read every side's source")
    try:
        for p in in_dir.iterdir():
            if p.is_dir() and not p.is_symlink():  # the sources' builds (grader.builds)
                _seal_tree(p)
                continue
            os.chown(p, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
            p.chmod(0o400)
        os.chown(in_dir, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
        in_dir.chmod(0o700)
    except OSError as e:
        raise InfrastructureError(f"cannot stage the sources in {in_dir} for the judge's uid "
                                  f"{wire.JUDGE_UID} alone: {e}") from None


def _seal_tree(top: Path) -> None:
    """A staged folder the judge's alone: folders 0500, files 0400, owned by its uid."""
    for folder, dirs, files in os.walk(top, topdown=False, followlinks=False):
        for name in files:
            path = os.path.join(folder, name)
            os.chown(path, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
            if not os.path.islink(path):
                os.chmod(path, 0o400)
        for name in dirs:
            path = os.path.join(folder, name)
            os.chown(path, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
            if not os.path.islink(path):
                os.chmod(path, 0o500)
    os.chown(top, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
    top.chmod(0o500)


def write_secret(out_dir: Path, request: wire.JudgeRequest) -> None:
    """The judge's request file: created exclusively, never through a link, owned by the
    judge's uid so it can read and delete it before any runner starts."""
    sp = out_dir / wire.SECRET_NAME
    fd = os.open(sp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(wire.dumps(request))
    if os.geteuid() == 0:
        os.chown(sp, wire.JUDGE_UID, wire.JUDGE_GID)
        os.chown(out_dir, wire.JUDGE_UID, wire.JUDGE_GID)


def limits_wire(limits: Limits) -> wire.LimitsWire:
    return wire.LimitsWire(compile_s=limits.compile_s, run_s=limits.run_s,
                           gpu_memory_mib=limits.gpu_memory_mib, memory_mib=limits.memory_mib)


def resolve_device(device: str) -> wire.Device:
    """``auto`` detected on this host; any other name checked (a :class:`UsageError`)."""
    dev = detect_device() if device == "auto" else device
    if dev not in ("cpu", "cuda", "rocm"):
        raise UsageError(f"unknown device {device!r} (auto, cpu, cuda, rocm)")
    return dev  # type: ignore[return-value]


def stage(request: wire.JudgeRequest, files: Mapping[str, str], limits: Limits, *,
          work_dir: Path | None = None, prefix: str = "kgrader-eval-",
          gated: bool = False, builds: Mapping[str, str] | None = None) -> Staged:
    """Stage one judge call: ``files`` sealed in ``in/``, the secret in ``out/``.

    ``request`` carries no key: a fresh one is made here, and its limits and ``gated`` are
    set from ``limits`` and ``gated``, so the judge is told what the backend enforces.
    Nothing is left behind when staging fails.
    """
    root, in_dir, out_dir = make_eval_dirs(work_dir, prefix)
    try:
        for name, text in files.items():
            (in_dir / name).write_text(text, encoding="utf-8")
        if builds:  # each source's kept builds (grader.builds), its own alone
            build_cache.stage(in_dir, builds, build_cache.cache_root())
        seal_inputs(in_dir)
        key = secrets.token_bytes(32)
        write_secret(out_dir, dataclasses.replace(request, key=key.hex(), gated=gated,
                                                  limits=limits_wire(limits)))
        if gated:
            make_fifo(out_dir)
        make_progress_fifo(out_dir)  # the judge's live steps (grader.backends.progress)
    except OSError as e:
        shutil.rmtree(root, ignore_errors=True)
        raise disk_full(e, root.parent) or e from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Staged(root, in_dir, out_dir, key)


def launch(staged: Staged, backend: SandboxBackend, limits: Limits, device: wire.Device, *,
           gpu_ids: tuple[str, ...] = (), gate: MeasureGate | Turn | None = None,
           progress: JudgeProgress | None = None,
           cancel: threading.Event | None = None) -> JudgeRun:
    """Run the judge once on a staged folder (``gate``: only if :func:`stage` was ``gated``;
    a :class:`Turn` of the caller's own, such as a warm sandbox's in :mod:`grader.pool`, is
    used as it is). The judge's steps reach this thread's step listeners (:mod:`grader.logs`)
    as they happen; a caller that passes its own ``progress`` reader owns it (and closes it)."""
    launched = time.time()
    turn = gate if isinstance(gate, Turn) or gate is None else \
        Turn(gate, staged.out_dir / wire.GATE_NAME)
    feed = progress if progress is not None else \
        JudgeProgress.open(staged.out_dir, staged.key, relay())
    try:
        outcome = backend.run(SandboxSpec(in_dir=staged.in_dir, out_dir=staged.out_dir,
                                          argv=JUDGE_ARGV, limits=limits, device=device,
                                          gpu_ids=gpu_ids, label=uuid.uuid4().hex[:12],
                                          gate=turn, cancel=cancel))
    finally:
        if progress is None and feed is not None:
            feed.close()
    return JudgeRun(staged, outcome, launched)


def read_record(staged: Staged, limits: Limits) -> wire.Record:
    """The judge's verified record; raises :class:`ResultProblem` when there is none."""
    return read_result(staged.out_dir / wire.RESULT_NAME, staged.key, limits.result_bytes)


def discard(staged: Staged, *, keep: bool = False) -> None:
    """Remove the folder, or mark it kept on purpose (cleanup then leaves it)."""
    if keep:
        mark_kept(staged.root)
    else:
        shutil.rmtree(staged.root, ignore_errors=True)


@contextmanager
def judge_run(request: wire.JudgeRequest, files: Mapping[str, str], backend: SandboxBackend,
              limits: Limits, *, gpu_ids: tuple[str, ...] = (), gate: MeasureGate | None = None,
              work_dir: Path | None = None, prefix: str = "kgrader-eval-",
              keep: bool = False, cancel: threading.Event | None = None) -> Iterator[JudgeRun]:
    """Stage, launch and yield the finished run; the folder goes when the block ends. With
    ``request.builds``, each source's kept builds are staged in and what its runners built
    is kept afterwards (:mod:`grader.builds`)."""
    keys = build_cache.plan(files, build_cache.environment(backend.name, request.device)) \
        if request.builds else {}
    staged = stage(request, files, limits, work_dir=work_dir, prefix=prefix,
                   gated=gate is not None, builds=keys)
    try:
        yield launch(staged, backend, limits, request.device, gpu_ids=gpu_ids, gate=gate,
                     cancel=cancel)
        build_cache.keep(staged.out_dir, keys, build_cache.cache_root())
    finally:
        discard(staged, keep=keep)


def mode_request(mode: wire.Mode, device: str, **fields: object) -> wire.JudgeRequest:
    """A keyless request for :func:`run_judge_mode` (the key and limits are filled there)."""
    return wire.JudgeRequest(wire_version=wire.WIRE_VERSION, key="", mode=mode,
                             device=resolve_device(device),
                             limits=wire.LimitsWire(compile_s=60, run_s=600, gpu_memory_mib=None),
                             phase_seed=secrets.randbits(62), **fields)  # type: ignore[arg-type]


def run_judge_mode(request: wire.JudgeRequest, files: dict[str, str], *, backend: str = "auto",
                   limits: Limits | None = None, gpu_ids: tuple[str, ...] = ()) -> wire.Record:
    """Run the judge in a mode of its own (``check``, ``profile``, ``measure_peak``,
    ``calibrate``) and return its verified record.

    ``files`` land in ``/kg/in``, the judge's alone (:func:`seal_inputs`). Raises
    :class:`InfrastructureError` when the sandbox produces no verified record.
    """
    lim = limits or MODE_LIMITS
    be = select_backend(backend, request.device)
    with judge_run(request, files, be, lim, gpu_ids=gpu_ids, prefix="kgrader-mode-") as run:
        try:
            return read_record(run.staged, lim)
        except ResultProblem as p:
            raise InfrastructureError(
                f"judge mode {request.mode} produced no verified result ({p.code}); stderr: "
                f"{run.outcome.stderr[-800:].decode('utf-8', 'replace')}") from None
