"""``self_check(name)``: run a registered backend through the checks every backend must
pass, and prove the host unharmed afterwards. An outside backend runs it after one
registry line (:func:`grader.backends.registry.register_backend`)::

    from grader.backends.conformance.selfcheck import self_check
    assert self_check("mybackend") == []

Each check runs a ``python3 -c`` snippet through the launcher stand-in
(:mod:`.standin`), so it runs as the judge's uid without a judge. What it checks: the
privilege contract (the stand-in refuses to run otherwise), the outcome names its backend,
only loopback networking, a host file outside every mount unreadable, nothing writable
outside the scratch and ``/kg/out``, the scratch writable, the memory and pids limits
reported as such, the output capped, and the backend's class-level lifecycle (its
capabilities, its sweep and reclaim answer without raising). ``thorough`` adds the
backend's own wall clock (about 40 s). The evaluation-level suite (candidates, verdicts)
lives in ``tests/conformance/``.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.backends.base import (
    SANDBOX_GID,
    SANDBOX_UID,
    Capabilities,
    Reclaimed,
    SandboxBackend,
    SandboxOutcome,
    SandboxSpec,
)
from grader.backends.conformance.host import Sentinel, loopback_answers, sandbox_processes
from grader.backends.conformance.standin import launch_argv
from grader.backends.owner import current_owner
from grader.backends.registry import backend_class
from grader.limits import Limits

PROBE = r"""
import json, os, socket, sys
out = {"uid": os.getuid(), "nets": sorted(n for _, n in socket.if_nameindex())}
try:
    open(sys.argv[1]).read(); out["host_file"] = "read"
except OSError as e:
    out["host_file"] = type(e).__name__
writable = []
for d in ("/usr", "/etc", "/kg/in", "/kg/harness", "/"):
    try:
        with open(os.path.join(d, "kgrader-selfcheck"), "w") as f:
            f.write("x")
        writable.append(d)
    except OSError:
        pass
out["writable"] = writable
with open("/tmp/kgrader-selfcheck", "w") as f:
    f.write("x")
out["tmp"] = open("/tmp/kgrader-selfcheck").read()
print("KGCHECK " + json.dumps(out), flush=True)
"""
MEMORY_BOMB = "b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n"
# A stubborn fork bomb, as real ones are: a refused fork is retried, not a reason to exit
# (a backend that samples its refused forks, as docker's watcher does, must get to see one).
FORK_BOMB = ("import os, time\nend = time.time() + 20\nwhile time.time() < end:\n"
             "    try:\n        pid = os.fork()\n    except OSError:\n"
             "        time.sleep(0.01)\n        continue\n"
             "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n")
FLOOD = "import sys\nfor _ in range(4096):\n    sys.stdout.write('x' * 4096)\n"
HANG = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(3600)\n"


@dataclass
class _Run:
    backend: SandboxBackend
    work: Path

    def __call__(self, code: str, *args: str, **limit_kw: float) -> SandboxOutcome:
        root = self.work / f"run-{uuid.uuid4().hex[:8]}"
        in_dir, out_dir = root / "in", root / "out"
        in_dir.mkdir(parents=True)
        out_dir.mkdir()
        for d in (root, in_dir):
            d.chmod(0o755)
        (in_dir / "candidate.py").write_text("x = 1\n")
        if os.geteuid() == 0:
            os.chown(out_dir, SANDBOX_UID, SANDBOX_GID)
        out_dir.chmod(0o700)
        limits = Limits(compile_s=20, run_s=20, memory_mib=512, pids=64, tmpfs_mib=64)
        spec = SandboxSpec(in_dir=in_dir, out_dir=out_dir,
                           argv=launch_argv(("python3", "-c", code, *args)),
                           limits=limits.override(**limit_kw),
                           label=f"selfcheck-{uuid.uuid4().hex[:8]}")
        return self.backend.run(spec)


def _probe(out: SandboxOutcome) -> dict[str, object]:
    for line in out.stdout.decode(errors="replace").splitlines():
        if line.startswith("KGCHECK "):
            return json.loads(line[len("KGCHECK "):])  # type: ignore[no-any-return]
    raise AssertionError(f"no probe output: exit {out.exit_code}, stderr "
                         f"{out.stderr[-400:].decode(errors='replace')!r}")


def _checks(name: str, run: _Run, sentinel: Sentinel,
            thorough: bool) -> list[tuple[str, Callable[[], None]]]:
    def isolation() -> None:
        out = run(PROBE, str(sentinel.path))
        assert out.backend == name, f"the outcome names backend {out.backend!r}"
        assert out.exit_code == 0, f"the probe exited {out.exit_code}: {out.stderr[-400:]!r}"
        p = _probe(out)
        assert p["uid"] == SANDBOX_UID, f"the snippet ran as uid {p['uid']}"
        assert p["nets"] == ["lo"], f"network interfaces {p['nets']}"
        assert p["host_file"] != "read", "a host file outside every mount was readable"
        assert p["writable"] == [], f"writable outside the scratch: {p['writable']}"
        assert p["tmp"] == "x", "the scratch /tmp is not writable"

    def memory() -> None:
        out = run(MEMORY_BOMB, memory_mib=256)
        assert out.limit_fired == "memory_limit", f"a memory bomb ended with {out.limit_fired}"

    def pids() -> None:
        out = run(FORK_BOMB, pids=32)
        assert out.limit_fired == "pids_limit", f"a fork bomb ended with {out.limit_fired}"

    def output() -> None:
        out = run(FLOOD, output_bytes=64 << 10)
        assert out.output_truncated, "16 MiB of stdout was not capped"
        assert len(out.stdout) + len(out.stderr) <= 64 << 10, "more output kept than the cap"

    def wall() -> None:
        out = run(HANG, compile_s=1, run_s=1)
        assert out.limit_fired == "timeout", f"a hang ended with {out.limit_fired}"

    def lifecycle() -> None:
        cls = type(run.backend)
        assert isinstance(cls.capabilities, Capabilities), "capabilities is not Capabilities"
        assert isinstance(cls.sweep(), Reclaimed), "sweep() did not return Reclaimed"
        assert isinstance(cls.reclaim(), Reclaimed), "reclaim() did not return Reclaimed"
        assert isinstance(cls.kill_own(current_owner()), int), "kill_own() is not a count"
        assert isinstance(cls.fingerprint("cpu"), dict), "fingerprint() is not a mapping"

    checks = [("isolation", isolation), ("memory limit", memory), ("pids limit", pids),
              ("output cap", output), ("lifecycle", lifecycle)]
    return checks + ([("wall limit", wall)] if thorough else [])


def self_check(name: str, *, thorough: bool = False, work_dir: Path | None = None) -> list[str]:
    """Run backend ``name`` (from the registry, on ``cpu``) through the checks; return
    one line per failure (empty: it conforms). Raises
    :class:`~grader.errors.SandboxUnavailableError` when the backend is unusable here."""
    backend = backend_class(name)()
    backend.check_available("cpu")
    with tempfile.TemporaryDirectory(prefix="kgrader-selfcheck-", dir=work_dir) as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        work = base / f"kgsc-{uuid.uuid4().hex[:16]}"
        work.mkdir()
        sentinel = Sentinel.create(base)
        before = sentinel.digest()
        failures = []
        for check, fn in _checks(name, _Run(backend, work), sentinel, thorough):
            try:
                fn()
            except AssertionError as exc:
                failures.append(f"{check}: {exc}")
        failures += [f"host: {line}" for line in _host_harmed(sentinel, before, work.name)]
    return failures


def _host_harmed(sentinel: Sentinel, before: tuple[str, int], marker: str) -> list[str]:
    """What the runs left on the host: the sentinel changed, processes alive, no loopback."""
    out = []
    if sentinel.digest() != before or sentinel.path.read_text() != sentinel.content:
        out.append("the host sentinel file changed")
    left = [p.pid for p in sandbox_processes(marker) if p.is_running()]
    if left:
        out.append(f"sandbox processes outlived their runs: {left}")
    if not loopback_answers():
        out.append("the host's loopback no longer answers")
    return out
