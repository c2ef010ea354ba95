"""One principal per runner: uids, private folders, credential checks and process counts.

The judge (uid 65534, holding only CAP_SETUID/CAP_SETGID, see ``sandbox.launcher.launch``) starts
every runner -- candidate, current best, replicate -- under its own uid and gid from
65500..65531, never reused within one sandbox. Two runners of one uid would be one attacker
(signals, ptrace, ``/proc/PID`` reads); with distinct uids the kernel refuses all of that,
hidepid hides the other's processes, and each runner's HOME/TMPDIR/caches are 0700 folders
of its own. Sources are staged for the judge alone; each runner imports a private copy of
its own module from its HOME (:func:`install_module`), so no runner can open another
side's source. Without CAP_SETUID the judge cannot do this, and it refuses to start any runner
(``runner_isolation_unavailable``, an infrastructure error): even a single runner shares the
judge's uid then, and could read or signal the judge. Stdlib only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sandbox.launcher import caps
from sandbox.launcher.launch import DEVICE_GIDS_ENV, JUDGE_GID, JUDGE_UID, STATUS_ENV, device_gids

RUNNER_IDS = range(65500, 65532)
ISOLATION_CODE = "runner_isolation_unavailable"
_SPAWN = caps.mask(caps.CAP_SETUID, caps.CAP_SETGID)


class IsolationUnavailable(Exception):
    """Runners cannot be given their own identity here: an infrastructure fault, never a pass."""

    code = ISOLATION_CODE


@dataclass(frozen=True)
class RunnerIdentity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    def env(self) -> dict[str, str]:
        """What the runner's environment says about where it may write."""
        h = self.home
        return {"HOME": h, "TMPDIR": f"{h}/tmp", "TRITON_CACHE_DIR": f"{h}/triton",
                "TORCHINDUCTOR_CACHE_DIR": f"{h}/inductor", "XDG_CACHE_HOME": f"{h}/cache",
                "USER": f"kgrader-runner-{self.uid}", "LOGNAME": f"kgrader-runner-{self.uid}",
                # No working folder on sys.path: the runner starts in the shared /tmp, where
                # another runner could plant a module (``triton/``, ``sandbox/``) that this
                # runner would import before its own harness and run as its uid.
                "PYTHONSAFEPATH": "1"}


_unused = iter(RUNNER_IDS)
_owners: dict[int, str] = {}  # runner uid -> the module its runner hosts (for attribution)


def require_spawn_caps() -> None:
    """The calling thread can switch a child's uid and gid, or IsolationUnavailable."""
    have = caps.get().effective
    if have & _SPAWN != _SPAWN:
        raise IsolationUnavailable(
            f"the judge lacks CAP_SETUID/CAP_SETGID (effective set {have:#x}), so it cannot run "
            "each runner under its own uid; two runners of one uid could signal, pause or read "
            "each other and the judge. The sandbox must start through `python3 -m sandbox.launcher.launch`")


@contextlib.contextmanager
def _as_fs_identity(uid: int, gid: int) -> Iterator[None]:
    """Switch this thread's fsuid/fsgid (per thread, unlike setuid) for file creation."""
    libc = caps.libc()
    old_gid, old_uid = libc.setfsgid(gid), libc.setfsuid(uid)
    try:
        if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
            raise IsolationUnavailable(f"setfsuid/setfsgid({uid}, {gid}) was refused")
        yield
    finally:
        libc.setfsuid(old_uid)
        libc.setfsgid(old_gid)


@contextlib.contextmanager
def as_file_owner(path: str) -> Iterator[None]:
    """Open or unlink ``path`` (not following a final link) with the file system identity
    of the runner that owns it -- a diagnostics tool's log, written under the runner's uid
    and mode 0600 (runner umask) -- so that the judge reads what that runner could read
    and nothing more. A file of any other owner is opened as the judge itself.
    """
    st = os.lstat(path)
    if st.st_uid in _owners and st.st_uid != os.geteuid():
        with _as_fs_identity(st.st_uid, st.st_uid):
            yield
    else:
        yield


as_fs_identity = _as_fs_identity  # for sandbox.launcher.builds


def _private_dir(uid: int, gid: int) -> str:
    """A fresh 0700 folder owned by the runner, at an unguessable name (no squatting)."""
    home = os.path.join(tempfile.gettempdir(), f"kgrader-runner-{uid}-{secrets.token_hex(8)}")
    try:
        with _as_fs_identity(uid, gid):
            os.mkdir(home, 0o700)
            for sub in ("tmp", "triton", "inductor", "cache"):
                os.mkdir(os.path.join(home, sub), 0o700)
    except OSError as e:
        raise IsolationUnavailable(f"cannot create the runner's private folder {home}: {e}") from None
    st = os.lstat(home)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or stat.S_IMODE(st.st_mode) != 0o700:
        raise IsolationUnavailable(f"{home} is not a 0700 folder owned by uid {uid}")
    return home


MODULE_DIR = "src"  # under the runner's HOME: the private copy of the module it hosts


def _read_staged(path: str) -> bytes:
    """A module's bytes as the host staged them: a plain file of the judge's own uid that
    no other uid may read (``grader.evaluate`` stages every source 0400 under the judge's
    uid), or IsolationUnavailable -- a source any runner could open would let one side
    read another's kernel (the current best is someone else's on a leaderboard)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise IsolationUnavailable(f"cannot open the module {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IsolationUnavailable(f"the module {path} is not a plain file")
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise IsolationUnavailable(
                f"the module {path} (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):#o}) is "
                f"readable beyond the judge's uid {os.geteuid()}: the host must stage every "
                "source 0400 under the judge's uid, or one runner could read another's source")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def install_module(ident: RunnerIdentity, path: str) -> str:
    """Copy the module ``path`` into the runner's private folder; the copy's path.

    The runner imports this copy (same bytes, so line numbers hold) and can open no other
    side's file: the staged sources are the judge's alone (:func:`_read_staged`), and the
    copy lies in a 0700 folder of the runner's uid, written under that uid's file system
    identity (the judge cannot enter the folder otherwise, and gains no other access)."""
    data = _read_staged(path)
    folder = os.path.join(ident.home, MODULE_DIR)
    copy = os.path.join(folder, os.path.basename(path))
    try:
        with _as_fs_identity(ident.uid, ident.gid):
            os.mkdir(folder, 0o700)
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o400)
            try:
                os.fchmod(fd, 0o400)  # whatever the judge's umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
    except OSError as e:
        raise IsolationUnavailable(f"cannot copy {path} into the runner's folder: {e}") from None
    return copy


def runner_ids_left() -> int:
    """How many more runners this sandbox can start (each takes a uid of its own)."""
    return len(RUNNER_IDS) - len(_owners)


def new_runner_identity(owner: str) -> RunnerIdentity:
    """The next unused runner uid/gid with its private folder, for the module ``owner``."""
    require_spawn_caps()
    uid = next(_unused, None)
    if uid is None:
        raise IsolationUnavailable(f"all {len(RUNNER_IDS)} runner uids of this sandbox are used")
    _owners[uid] = owner
    try:
        extra = device_gids(os.environ.get(DEVICE_GIDS_ENV))
    except Exception as e:  # a LaunchError: a bad gid list from the backend
        raise IsolationUnavailable(str(e)) from None
    return RunnerIdentity(uid, uid, (uid, *extra), _private_dir(uid, uid))


def prepare_fork() -> None:
    """Empty this thread's inheritable and ambient sets, so the child's exec gains nothing.

    A runner (no file capabilities, a uid other than 0) gets, across execve, exactly its
    ambient set -- which the launcher filled on the judge. Effective and permitted stay:
    the judge still needs them for the next runner.
    """
    have = caps.get()
    caps.set_sets(have.effective, have.permitted, 0)
    caps.clear_ambient()


def spawn_cwd(ident: RunnerIdentity) -> str:
    """The child's working folder at exec: ``Popen`` changes directory before it switches
    uid, and the judge cannot enter the runner's 0700 HOME, so the runner moves there itself
    (``harden.lock_down_runner``)."""
    return os.path.dirname(ident.home)


def kill_all(ident: RunnerIdentity, timeout: float = 10.0) -> None:
    """SIGKILL every process of the runner's uid, whatever session or group it moved to.

    The judge has no CAP_KILL; a short-lived process under the runner's uid calls
    ``kill(-1, SIGKILL)``, which the kernel delivers to every process that uid may signal
    (in this pid namespace) except itself: the runner and everything it started.
    """
    prepare_fork()
    # On failure the caller still kills the runner's process group and waits for it.
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([sys.executable, "-I", "-S", "-c", "import os; os.kill(-1, 9)"],
                       env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout, check=False,
                       user=ident.uid, group=ident.gid, extra_groups=[], cwd="/")


def remove_home(ident: RunnerIdentity) -> None:
    """Remove the dead runner's private folder, best effort, as its uid (the judge cannot
    enter it), never following a link (``rmtree`` walks by descriptor): it frees a sandbox's
    tmpfs for the next runner, and leaves nothing in the host's /tmp outside one. What the
    runner made unremovable stays for the sandbox's own teardown."""
    with contextlib.suppress(OSError, IsolationUnavailable), _as_fs_identity(ident.uid, ident.gid):
        shutil.rmtree(ident.home, ignore_errors=True)


@dataclass(frozen=True)
class ExtraProcess:
    pid: int
    uid: int
    name: str
    owner: str  # the module whose runner had this uid ("" when unknown)


def _runner_processes() -> list[tuple[int, int, str]]:
    """(pid, uid, name) of every visible process with any runner uid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = caps.status(f"/proc/{entry}/status")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited meanwhile
        uids = caps.status_ids(st, "Uid")
        hit = [u for u in uids if u in RUNNER_IDS]
        if hit:
            out.append((int(entry), hit[0], st.get("Name", "?")))
    return out


def extra_runner_processes(expected: Mapping[int, int],
                           harness_uids: frozenset[int] = frozenset()) -> list[ExtraProcess]:
    """Processes under runner uids other than the live runners themselves.

    ``expected`` maps each live runner's pid to its uid. Any other process under a runner
    uid -- a helper, a grandchild in its own session, a zombie, a leftover of a closed
    runner -- is a process the candidate (or the current best) started that can run during
    timing. ``harness_uids``: uids of runners started ahead that have loaded no module yet
    (``sandbox.judge.prestart``): what runs under them is the harness's own start-up (torch's
    import runs ``ldconfig``), never candidate code. Raises IsolationUnavailable when a
    live runner is not visible: the count would be blind.
    """
    seen = _runner_processes()
    pids = {pid for pid, _, _ in seen}
    for pid in expected:
        if pid not in pids and _exists(pid):
            raise IsolationUnavailable(f"the judge cannot see runner pid {pid} in /proc: "
                                       "process counts would be blind")
    return [ExtraProcess(pid, uid, name, _owners.get(uid, "")) for pid, uid, name in seen
            if expected.get(pid) != uid and uid not in harness_uids]


def check_runner_processes(expected: Mapping[int, int]) -> str | None:
    """None when each runner uid owns only its runner, else a message naming the others."""
    extra = extra_runner_processes(expected)
    return describe(extra) if extra else None


def describe(extra: list[ExtraProcess]) -> str:
    shown = ", ".join(f"pid {e.pid} uid {e.uid} ({e.name}, runner of {e.owner or '?'})"
                      for e in extra[:5])
    return (f"{len(extra)} process(es) under runner uids besides the runners themselves: {shown}; "
            "a runner may own only its one process during timing")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another uid: alive but not ours to signal
    return True


def launch_status() -> dict[str, object] | None:
    """What ``sandbox.launcher.launch`` did, or None when the judge was not started through it."""
    raw = os.environ.get(STATUS_ENV)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return {"error": f"unreadable {STATUS_ENV}"}
    return value if isinstance(value, dict) else {"error": f"unreadable {STATUS_ENV}"}


def launch_warnings() -> list[str]:
    """Warnings for the record: what part of the isolation did not hold in this sandbox."""
    st = launch_status()
    if st is None:
        return ["isolation: the judge was not started through sandbox.launcher.launch; runners cannot "
                "get their own uids and the run fails closed"]
    proc = st.get("proc")
    if isinstance(proc, dict) and proc.get("hidden") is not True:
        return ["isolation: /proc could not be remounted with hidepid "
                f"({'; '.join(str(r) for r in proc.get('refused', []))[:400]}); runners can list "
                "other processes, but distinct uids and the seccomp filter still stop signals, "
                "ptrace and /proc/PID/mem reads"]
    return []


def launch_enforcement() -> dict[str, str]:
    """Lines for the record's ``enforcement``: how runners were kept apart in this sandbox."""
    st = launch_status() or {}
    proc = st.get("proc") if isinstance(st.get("proc"), dict) else {}
    assert isinstance(proc, dict)
    return {
        "runner_identity": f"one uid per runner from {RUNNER_IDS.start}..{RUNNER_IDS.stop - 1}, "
                           "no capabilities, no_new_privs, private 0700 HOME/TMPDIR"
                           if st else "unavailable (judge not started through sandbox.launcher.launch)",
        "process_visibility": f"/proc {proc.get('how')}" if proc.get("hidden")
                              else "all processes visible (hidepid refused)",
        "runner_seccomp": "deny-list: ptrace, process_vm_*, foreign signals, namespaces, mounts, "
                          "bpf, perf, io_uring, keyrings (sandbox/launcher/seccomp.py)",
        "judge_bounding_set": str(st.get("bounding_set", "unknown")),
    }


# ---- runner side ------------------------------------------------------------------------
def verify_runner() -> None:
    """In the runner, before anything untrusted: the identity the judge meant to give it.

    Raises IsolationUnavailable when the runner shares an identity with the judge, holds any
    capability, lacks no_new_privs, has its working folder on ``sys.path``, or its HOME is
    not its own 0700 folder.
    """
    st = caps.status("/proc/self/status")
    uids, gids = caps.status_ids(st, "Uid"), caps.status_ids(st, "Gid")
    groups = caps.status_ids(st, "Groups")
    if len(set(uids)) != 1 or uids[0] not in RUNNER_IDS:
        raise IsolationUnavailable(f"runner uids {uids} are not one runner uid")
    if len(set(gids)) != 1 or gids[0] == JUDGE_GID or JUDGE_GID in groups or uids[0] == JUDGE_UID:
        raise IsolationUnavailable(f"runner gids {gids} / groups {groups} overlap the judge's")
    for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        if caps.status_mask(st, key) != 0:
            raise IsolationUnavailable(f"runner holds capabilities: {key}={st.get(key)}")
    if st.get("NoNewPrivs") != "1":
        raise IsolationUnavailable("runner lacks no_new_privs")
    if not sys.flags.safe_path:
        raise IsolationUnavailable("the runner's working folder is on sys.path (PYTHONSAFEPATH "
                                   "unset): a module planted in /tmp would be imported")
    home = os.environ.get("HOME", "")
    try:
        hs = os.lstat(home)
    except OSError as e:
        raise IsolationUnavailable(f"runner HOME {home!r}: {os.strerror(e.errno or errno.ENOENT)}") from None
    if not stat.S_ISDIR(hs.st_mode) or hs.st_uid != uids[0] or stat.S_IMODE(hs.st_mode) != 0o700:
        raise IsolationUnavailable(f"runner HOME {home!r} is not a 0700 folder of uid {uids[0]}")


__all__ = [
    "ExtraProcess", "IsolationUnavailable", "RunnerIdentity", "as_file_owner",
    "check_runner_processes", "describe", "extra_runner_processes", "install_module", "kill_all",
    "launch_enforcement", "launch_status", "launch_warnings", "new_runner_identity",
    "prepare_fork", "remove_home", "require_spawn_caps", "runner_ids_left", "spawn_cwd",
    "verify_runner",
]
