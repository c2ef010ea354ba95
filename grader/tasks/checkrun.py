"""The judge's ``check`` mode, run once, with every way it can end said exactly.

A check of a big problem meets the sandbox's limits: the memory limit (the problem's
tensors and the judge's copies of them), or the wall limit. The sandbox then leaves no
record, and the only honest message is the host's own account: which limit fired, its
figure, how long the run lasted, and the last step the judge logged on stderr (the
judge writes one ``kgrader-check:`` line per step; :mod:`sandbox.judge.task_check`). The
log is the sandbox's text, shown as such, never a verdict. A problem that needs CUDA on
a CPU host is the device's fault, with the ``--device cuda`` hint.
"""

from __future__ import annotations

from grader.backends.base import SandboxOutcome
from grader.backends.select import select_backend
from grader.errors import InfrastructureError, UsageError
from grader.judgecall import judge_run, read_record
from grader.limits import Limits
from grader.report.record import ResultProblem
from sandbox.contract import text, wire

STEP = "kgrader-check: "
NEEDS_CUDA_HINT = ("the problem makes or checks its tensors on CUDA: import or check it with "
                   "--device cuda on a GPU host")


class CheckLimitError(UsageError):
    """The check ran into a limit of the sandbox the caller can raise (``code``: which)."""

    code = "check_limit"


class NeedsDeviceError(InfrastructureError):
    """The problem needs a device this host or this ``--device`` does not give it."""

    code = "needs_device"


def run_check_mode(request: wire.JudgeRequest, limits: Limits, backend: str) -> wire.Record:
    """The verified record of one ``check`` run; a typed error when there is none."""
    be = select_backend(backend, request.device)
    with judge_run(request, {}, be, limits, prefix="kgrader-mode-") as run:
        try:
            record = read_record(run.staged, limits)
        except ResultProblem as p:
            raise no_record(p, run.outcome, limits) from None
    fired = run.outcome.limit_fired
    if record.errors and fired in ("memory_limit", "pids_limit"):
        # The judge survived and reported, but a limit killed one of the check's processes
        # (the kernel's OOM killer picks the largest: under load often the problem process,
        # whose death the judge can only call reference_failed). The limit is the cause.
        figure, hint = limit_figure(fired, limits)
        e = record.errors[0]
        raise CheckLimitError(f"task check stopped by the sandbox's {figure} after "
                              f"{run.outcome.wall_s:.1f} s: it killed a process of the check, "
                              f"and the judge then reported {e.code}: "
                              f"{text.clean(e.message, 300)}", hint=hint)
    return record


def last_step(stderr: bytes) -> str | None:
    """The last step the judge logged (sandbox text: cleaned, capped)."""
    for line in reversed(stderr.decode("utf-8", "replace").splitlines()):
        if line.startswith(STEP):
            return text.clean(line[len(STEP):], 300)
    return None


def limit_figure(fired: str, limits: Limits) -> tuple[str, str]:
    """The limit that fired with its figure, and how to raise it."""
    if fired == "memory_limit":
        return (f"memory limit {limits.memory_mib} MiB",
                f"give it more with --memory-mib (more than {limits.memory_mib}); on import "
                "the task keeps the figure for later checks and runs")
    if fired == "gpu_memory_limit":
        return (f"GPU memory limit {limits.gpu_memory_mib} MiB",
                "raise limits.gpu_memory_mib in task.json")
    if fired == "timeout":
        return (f"wall limit {limits.wall_s:.0f} s (3 x compile_s {limits.compile_s:g} + "
                f"4 x run_s {limits.run_s:g} + 30)", "raise limits.run_s in task.json")
    if fired == "pids_limit":
        return f"process and thread limit {limits.pids}", "raise limits.pids in task.json"
    return fired, "see the sandbox's limits in task.json"


def no_record(p: ResultProblem, outcome: SandboxOutcome, limits: Limits) -> Exception:
    """Why the check left no verified record, as a typed error."""
    step = last_step(outcome.stderr)
    where = f"; the judge's last logged step: {step}" if step else \
        "; the judge had logged no step yet (it was starting: Python, torch, the problem process)"
    if outcome.limit_fired is not None and not p.authentic:
        figure, hint = limit_figure(outcome.limit_fired, limits)
        return CheckLimitError(f"task check stopped by the sandbox's {figure} after "
                               f"{outcome.wall_s:.1f} s{where}", hint=hint)
    tail = text.clean(outcome.stderr[-800:].decode("utf-8", "replace"), 800)
    return InfrastructureError(f"judge mode check produced no verified result ({p.code}; exit "
                               f"{outcome.exit_code}, signal {outcome.signal}){where}; stderr: "
                               f"{tail}")
