"""One leaderboard evaluation, self-contained so that a Ray worker can run it.

A :class:`Job` carries the *contents* of the task (secret-seeded) and of the submission's
file, not paths: a worker on another node needs no shared file system. :func:`run_job`
writes them into a private temp folder, calls :func:`grader.evaluate.evaluate` with the
task's reference as ``current`` (so reference and submission are timed in the same
sandbox, interleaved), and returns a :class:`~grader.leaderboard.state.EvalRow` -- or an
infrastructure error, which the driver does not commit (the job is retried next run).

Speed-up of a submission over the reference, in order of preference:

1. ``replicate``: median(t_ref) / median(t_sub) from the judge's independent replicate
   (new runners, buffers, seeds), run when the submission looked faster;
2. ``pairs``: the median per-pair ratio t_ref/t_sub of the interleaved pairs, recovered
   exactly from the report's ``improvement_fraction`` = median of r = 1 - t_sub/t_ref
   (a median commutes with the monotone map r -> 1/(1-r); for an even number of pairs
   it is the map of the mid-point, a difference far below timing noise).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grader.errors import InfrastructureError, KgraderError, UsageError
from grader.evaluate import EvalRequest, Source, evaluate
from grader.leaderboard.integrity import violation
from grader.leaderboard.seeds import TaskPayload
from grader.leaderboard.state import EvalRow
from grader.report.model import Report
from grader.scan import check_source
from grader.scan.policy import Policy
from grader.task import TaskSpec
from sandbox.contract import codes

if TYPE_CHECKING:
    from grader.backends.gate import MeasureGate

# Policy for the reference check only: the reference is trusted code, and reference
# implementations use library calls that a task's candidate policy denies.
REFERENCE_POLICY = Policy(name="leaderboard-reference",
                          description="leaderboard reference check: the task's own trusted "
                                      "reference; denies nothing",
                          path="<memory>", chain=("leaderboard-reference",), promote_warnings=False,
                          native_sources=(), rules=())


@dataclass(frozen=True)
class Job:
    """What one evaluation needs, by value. ``round``: ``reference``, ``main`` or ``rerun``."""

    submission: str
    task: TaskPayload
    file_sha: str
    round: str
    source: str = field(repr=False)
    backend: str = "auto"
    device: str = "auto"
    policy: str | None = None
    limits: dict[str, float | int | None] = field(default_factory=dict)
    build_cache: bool = True  # off for a replay: an independent grade (grader.builds)
    # A re-run the host cannot time is "tied within noise" only on its last attempt; before
    # that it is retried like any evaluation the infrastructure spoiled (a loaded host's
    # timing_unreliable), so that a separable pair is not published as a tie.
    tie_final: bool = True

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.submission, self.task.name, self.file_sha, self.round)


@dataclass(frozen=True)
class JobOutcome:
    """A committed-to-be row, or an infrastructure error (never committed)."""

    row: EvalRow | None
    infra_error: str | None = None


def run_job(job: Job, gpu_ids: tuple[str, ...] = (), engine: str = "local",
            gate: MeasureGate | None = None, tie_ok: bool = False) -> JobOutcome:
    """Evaluate one job; never raises (a kgrader or machine fault becomes ``infra_error``).
    ``gate``: the GPU's measurement gate when evaluations prepare ahead (engine.py).
    ``tie_ok``: a correct evaluation the host could not time is a result ("tied within
    noise") in any round, as a re-run's always is (a replay checks the verdict)."""
    t0 = time.monotonic()
    try:
        spec = TaskSpec.model_validate_json(job.task.task_json)
        kw: dict[str, Any] = {}
        if job.round == "reference":
            kw["policy"] = REFERENCE_POLICY
            kw["stages"] = ("compile", "correctness")
            kw["candidate_trusted"] = True  # the task's own reference: no kernel-only audit
        else:
            kw["current"] = Source(name=f"{job.task.name}/reference.py", text=job.task.reference)
            kw["current_trusted"] = True  # the task's own reference: trusted, not scanned
            kw["policy"] = job.policy
            if job.round == "rerun":  # ranked entries: correctness again under the memory checker
                kw["sanitize"] = "default"
        try:
            limits = spec.limits.override(**dict(job.limits))
        except UsageError as e:  # the operator's limits, not the submission's fault
            return JobOutcome(None, f"{e.code}: {e}")
        req = EvalRequest(task=spec, reference=job.task.reference,
                          candidate=Source(name=f"{job.submission}/{job.task.name}.py",
                                           text=check_source(job.source)),
                          backend=job.backend, device=job.device,
                          limits=limits, gpu_ids=gpu_ids,
                          shape_seed=job.task.shape_seed, gate=gate,
                          build_cache=job.build_cache, **kw)
        report = evaluate(req)
    except InfrastructureError as e:
        return JobOutcome(None, f"{type(e).__name__}: {e}")
    except KgraderError as e:  # e.g. an unreadable submission file: the submission's fault
        return JobOutcome(_row(job, "failed", "scan", e.code, str(e), None, None, None,
                               None, time.monotonic() - t0, engine))
    except Exception as e:  # a kgrader bug must not end the batch
        return JobOutcome(None, f"internal error: {type(e).__name__}: {e}")
    infra = [e for e in report.errors if codes.retried(e.code, e.origin)]
    tied = ((job.round == "rerun" and job.tie_final) or tie_ok) and tied_within_noise(report)
    if infra and not tied:
        return JobOutcome(None, f"{infra[0].code}: {infra[0].message}")
    verdict, stage, code, message, speedup, src = classify_rerun(report) if tied \
        else classify(report)
    t_sub = report.timing.median_ms if report.timing else None
    report_json = json.dumps(redact_seeds(json.loads(report.model_dump_json()), job.task.seeds))
    return JobOutcome(_row(job, verdict, stage, code, message, speedup, src, t_sub, report_json,
                           time.monotonic() - t0, engine))


def _row(job: Job, verdict: str, stage: str | None, code: str | None, message: str,
         speedup: float | None, src: str | None, t_sub: float | None, report_json: str | None,
         wall_s: float, engine: str) -> EvalRow:
    return EvalRow(submission=job.submission, task=job.task.name, file_sha=job.file_sha,
                   round=job.round, verdict=verdict, stage=stage, code=code, message=message[:2000],
                   speedup=speedup, speedup_source=src, t_sub_ms=t_sub, report_json=report_json,
                   wall_s=round(wall_s, 3), engine=engine)


def classify(report: Report) -> tuple[str, str | None, str | None, str, float | None, str | None]:
    """``(verdict, stage, code, message, speedup, speedup_source)`` for one report.

    A rejection by the acceptance rule is *not* a failure here: the leaderboard ranks by
    speed-up, and a submission slower than the reference is still correct.
    """
    if report.errors:
        e = report.errors[0]
        bad = violation(report)
        if bad is not None and bad[0] != "below_roofline_floor":
            return ("disqualified", e.stage, bad[0],
                    f"integrity violation: {bad[1]}"[:2000], None, None)
        if any(x.code == "below_roofline_floor" for x in report.errors):
            return ("anomaly", "benchmark", "below_roofline_floor",
                    "faster than the task's roofline floor: an anomaly, never a record", None, None)
        return "failed", e.stage, e.code, e.message, None, None
    if report.correctness is None or not report.correctness.passed:
        return "failed", report.stage, "not_checked", "correctness was not established", None, None
    acc = report.acceptance
    if acc is None:
        return "ok", report.stage, None, "correct (no paired timing)", None, None
    if acc.replicate_speedup is not None and acc.replicate_speedup > 0:
        return "ok", report.stage, None, "correct", acc.replicate_speedup, "replicate"
    r = acc.improvement_fraction
    if r is not None and r < 1:
        return "ok", report.stage, None, "correct", 1.0 / (1.0 - r), "pairs"
    return "ok", report.stage, None, "correct (speed-up unmeasured)", None, None


TIED = "tied_within_noise"


def tied_within_noise(report: Report) -> bool:
    """Correct, and the host could not time it: every error is the infrastructure's
    ``timing_unreliable`` (a loaded or noisy host), after correctness passed. A re-run ends
    there: the entry is correct with no speed-up ("tied within noise": ranked, never left
    out of the ranking, and never above an entry whose speed-up was measured)."""
    return (bool(report.errors) and all(e.origin == "infrastructure"
                                        and e.code == "timing_unreliable" for e in report.errors)
            and report.correctness is not None and report.correctness.passed)


def classify_rerun(report: Report) -> tuple[str, str | None, str | None, str, float | None,
                                             str | None]:
    """:func:`classify` for a re-run that :func:`tied_within_noise`: correct, no speed-up."""
    e = report.errors[0]
    return ("ok", e.stage, TIED, "correct; tied within noise: the host could not time the "
            f"run, so no speed-up is claimed ({e.message[:300]})", None, None)


def redact_seeds(obj: Any, seeds: tuple[int, ...]) -> Any:
    """Replace every secret seed value in a JSON-like tree (ints, and digits in strings)."""
    secret = set(seeds)
    texts = [str(s) for s in seeds]

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, int) and not isinstance(x, bool) and x in secret:
            return None
        if isinstance(x, str):
            for t in texts:
                x = x.replace(t, "<secret seed>")
        return x

    return walk(obj)
