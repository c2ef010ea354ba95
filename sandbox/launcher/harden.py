"""Process hardening steps taken by the judge and the runner before anything untrusted runs."""

from __future__ import annotations

import ctypes
import os
import resource

from sandbox.launcher.caps import libc

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38


def _prctl(option: int, arg: int) -> int:
    return int(libc().prctl(option, arg, 0, 0, 0))


def make_undumpable() -> None:
    """Forbid ptrace, /proc/PID/mem and /proc/PID/fd access by same-uid processes.

    Runners run under uids of their own (``sandbox.launcher.identity``); this still keeps a
    candidate's helper processes -- same uid as its runner -- out of the runner's memory and
    descriptors, and the judge's core out of any dump. Fails closed.
    """
    if _prctl(PR_SET_DUMPABLE, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class LockdownFailed(Exception):
    """The runner could not be confined; it must exit before importing anything untrusted."""


LOCKDOWN_EXIT = 97  # the runner's exit status when lock_down_runner fails (before any answer)


def lock_down_runner() -> None:
    """Confine the runner before the candidate is imported. Idempotent; fails closed.

    Not dumpable, then checks its identity (own uid, no capability, no_new_privs, private
    0700 HOME -- see ``sandbox.launcher.identity``), moves into HOME, then installs the seccomp
    filter (``sandbox.launcher.seccomp``) on every thread. ``sandbox.runner.boot`` calls it before
    torch is imported; ``sandbox.runner.main.main`` calls it again before serving.
    """
    from sandbox.launcher import identity, seccomp

    try:
        make_undumpable()
        identity.verify_runner()
        os.chdir(os.environ["HOME"])
        if not seccomp.installed():
            seccomp.install()
    except (OSError, KeyError, identity.IsolationUnavailable) as e:
        raise LockdownFailed(f"{type(e).__name__}: {e}") from None


def clean_env(device: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's whole environment: nothing inherited from the judge.

    ``extra`` (``RunnerIdentity.env()``) replaces HOME, TMPDIR and the caches with the
    runner's own 0700 folder.
    """
    env = {
        # The backend's PATH (the interpreter's scripts, the CUDA toolkit, the system's):
        # torch's load_inline needs ninja and nvcc from it. Absolute folders only.
        "PATH": ":".join(d for d in os.environ.get("PATH", "").split(":") if d.startswith("/"))
                or "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TRITON_CACHE_DIR": "/tmp/.triton",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/.inductor",
        # Compile in-process: inductor's worker pool would outlive the call and count as a
        # process the candidate spawned (runner_spawned_process).
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "LANG": "C.UTF-8",
    }
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    for key in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_PTXAS_PATH",
                "TRITON_LIBCUDA_PATH", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.update(extra or {})
    return env
