"""Helpers of the conformance suite: running candidates and argv in a backend, and proving
the host was not harmed (sentinel unchanged, no leftover sandbox process or container,
loopback still answers).

Leftover detection is scoped to this test run, because other sandboxes (other engineers,
CI jobs) may legitimately be alive as uid 65534 at the same time: a sandbox process is
ours when its mount table mentions the test's unique work directory (every backend binds
``/kg/in`` and ``/kg/out`` from there), or when it runs as a sandbox uid and descends from
this pytest process.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.backends.base import SANDBOX_GID, SANDBOX_UID, SandboxOutcome, SandboxSpec
from grader.backends.conformance.host import (
    Sentinel,
    loopback_answers,
    sandbox_processes,
)
from grader.backends.conformance.standin import launch_argv
from grader.backends.registry import backend_names
from grader.evaluate import EvalRequest, evaluate
from grader.limits import Limits
from grader.report.model import Report

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CANDIDATES = HERE / "candidates"
EXAMPLE = REPO / "examples" / "vector_add_small"
GOOD = EXAMPLE / "candidates" / "good.py"
WRONG = EXAMPLE / "candidates" / "wrong.py"
BROKEN = EXAMPLE / "candidates" / "broken.py"


def _task_with_default_policy() -> Path:
    """vector_add_small under the ``default`` policy: the conformance candidates compute
    with torch on purpose (they probe the sandbox, not kernel-writing), and a
    ``triton-only`` task would stop them at its runtime op audit before any limit fires."""
    import atexit
    import json
    import shutil
    import tempfile

    dst = Path(tempfile.mkdtemp(prefix="kgrader-conformance-task-")) / "vector_add_small"
    atexit.register(shutil.rmtree, dst.parent, True)  # every pytest run left one in /tmp
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("candidates"))
    spec = json.loads((dst / "task.json").read_text())
    spec["policy"] = "default"
    (dst / "task.json").write_text(json.dumps(spec))
    return dst


TASK = _task_with_default_policy()
RUNTIME_ONLY = REPO / "tests" / "policies" / "runtime-only.toml"
# Every backend the registry knows when the suite is collected (an added one included).
BACKENDS = backend_names()
# Generous: other work may share the 2 cores; only the timeout tests use small limits.
SLOW_OK = {"compile_s": 180, "run_s": 180}


def backend_object(name: str) -> Any:
    from grader.backends.select import select_backend

    return select_backend(name, "cpu")


# --------------------------------------------------------------------------- host state


def our_containers() -> list[Any]:
    """Containers labelled ``kgrader=1`` that this pytest process created (its owner label)."""
    from grader.backends.cleanup import current_owner
    from grader.backends.docker.prereqs import client

    flt = {"label": ["kgrader=1", f"kgrader.owner={current_owner()}"]}
    return list(client().containers.list(all=True, filters=flt, ignore_removed=True))


@dataclass
class Host:
    """One test's view of the host: its unique work dir and the checks run after the attack."""

    backend: str
    sentinel: Sentinel
    work: Path
    marker: str = field(init=False)
    before: tuple[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.marker = self.work.name
        self.before = self.sentinel.digest()

    def leftovers(self, settle_s: float = 15.0) -> list[str]:
        """Sandbox processes (and our containers) still alive after ``settle_s`` seconds."""
        deadline = time.monotonic() + settle_s
        while True:
            procs = [
                f"pid={p.pid} {' '.join(p.cmdline())[:120]}"
                for p in sandbox_processes(self.marker)
                if p.is_running()
            ]
            if self.backend == "docker":
                procs += [f"container {c.name} ({c.status})" for c in our_containers()]
            if not procs or time.monotonic() > deadline:
                return procs
            time.sleep(0.25)

    def assert_unharmed(self) -> None:
        assert self.sentinel.digest() == self.before, "the host sentinel file changed"
        assert self.sentinel.path.read_text() == self.sentinel.content
        left = self.leftovers()
        assert not left, f"sandbox processes/containers outlived the run: {left}"
        assert loopback_answers(), "the host's loopback no longer answers"

    # ---------------------------------------------------------------- running things

    def candidate(self, template: str, **params: Any) -> Path:
        """Write ``candidates/<template>.py`` with its ``PARAMS = {...}`` line filled in."""
        src = (CANDIDATES / f"{template}.py").read_text()
        lines = [
            f"PARAMS = {json.dumps(params)}" if ln.startswith("PARAMS = ") else ln
            for ln in src.splitlines()
        ]
        assert any(ln.startswith("PARAMS = ") for ln in src.splitlines()), template
        path = self.work / "candidates" / f"{template}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    def evaluate(
        self,
        candidate: Path | str,
        *,
        limits: dict[str, Any] | None = None,
        stages: tuple[str, ...] = ("compile", "correctness"),
        shape_kinds: tuple[str, ...] = ("tune",),
    ) -> Report:
        path = candidate if isinstance(candidate, Path) else CANDIDATES / f"{candidate}.py"
        req = EvalRequest.from_paths(task_dir=TASK,
            candidate=path,
            backend=self.backend,
            device="cpu",
            policy=str(RUNTIME_ONLY),
            limits={**SLOW_OK, **(limits or {})},
            stages=stages,
            shape_kinds=shape_kinds,
            work_dir=self.work / "evals",
        )
        return evaluate(req)

    def run_argv(
        self, code: str, *, raw: bool = False, **limit_kw: Any
    ) -> tuple[SandboxOutcome, Path]:
        """Run ``python3 -c code`` under the backend (no judge) as the judge's uid, after the
        launcher stand-in; ``raw``: as the sandbox's first process itself (uid 0 with the
        launch capabilities). Returns the outcome and the host side of ``/kg/out``."""
        root = self.work / f"argv-{uuid.uuid4().hex[:8]}"
        in_dir, out_dir = root / "in", root / "out"
        in_dir.mkdir(parents=True)
        out_dir.mkdir()
        root.chmod(0o755)
        in_dir.chmod(0o755)
        (in_dir / "candidate.py").write_text("x = 1\n")
        (in_dir / "candidate.py").chmod(0o444)
        if os.geteuid() == 0:
            os.chown(out_dir, SANDBOX_UID, SANDBOX_GID)
        out_dir.chmod(0o700)
        limits = Limits(compile_s=20, run_s=20, memory_mib=512, pids=64, tmpfs_mib=64)
        limits = limits.override(**limit_kw)
        argv = ("python3", "-c", code)
        spec = SandboxSpec(
            in_dir=in_dir,
            out_dir=out_dir,
            argv=argv if raw else launch_argv(argv),
            limits=limits,
            label=f"conf-{uuid.uuid4().hex[:8]}",
        )
        return backend_object(self.backend).run(spec), out_dir


def probe_line(report: Report) -> dict[str, Any]:
    """The ``KGPROBE {json}`` line a probe candidate printed on stderr."""
    assert report.sandbox is not None
    for line in reversed(report.sandbox.stderr_tail.splitlines()):
        if line.startswith("KGPROBE "):
            return json.loads(line[len("KGPROBE ") :])  # type: ignore[no-any-return]
    raise AssertionError(f"no probe output; report: {report.model_dump_json()[:3000]}")


def describe(report: Report) -> str:
    """A short diagnostic for assertion messages."""
    sb = report.sandbox
    return (
        f"ok={report.ok} stage={report.stage} errors="
        f"{[(e.stage, e.code, e.message[:200]) for e in report.errors]} "
        f"sandbox=({sb and (sb.limit_fired, sb.exit_code, sb.signal, sb.timed_out, sb.wall_s)})"
        f" stderr_tail={sb and sb.stderr_tail[-600:]!r}"
    )
