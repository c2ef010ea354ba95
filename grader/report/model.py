"""The report: the one place the JSON shape of an evaluation is defined.

Rules the model enforces or documents:

* a stage that was not reached is absent (``None``), never zero;
* a field that could not be measured is ``None`` and its reason is in ``unmeasured``;
* every error says whose fault it is (``origin``): the candidate's, or the
  infrastructure's (kgrader, the machine, the task's own reference). Exit codes, the
  leaderboard and the agent tools derive from ``origin`` alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grader.backends.enforcement import Enforcement
from grader.limits import LimitName, Limits
from grader.report.diagnostics_model import Diagnostics
from sandbox.contract import codes

SCHEMA_VERSION = "2.2"  # 2.2: TimingStats.requested_calls; 2.1: taint, withheld, ReportError.after_hidden

Stage = Literal["scan", "sandbox", "compile", "correctness", "benchmark", "accept", "integrity"]
STAGE_ORDER: tuple[Stage, ...] = ("scan", "sandbox", "compile", "correctness", "benchmark", "accept",
                                  "integrity")
Origin = Literal["candidate", "infrastructure"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReportError(_Model):
    """One failure: which stage, a stable machine code, whose fault, and words for a person.

    ``integrity`` is the stage of a candidate that attacked the harness itself (killed
    the judge, forged or flooded the record, tampered with the judge's folder).
    """

    stage: Stage
    code: str = Field(pattern=r"^[a-z][a-z0-9_.\-]*$", max_length=64, json_schema_extra={
        "description": "One of the catalogue's codes (docs/errors.md, sandbox/contract/codes.py); "
                       "in the scan stage, the id of the rule that denied the source.",
        "anyOf": [{"enum": list(codes.report_codes())}, {"pattern": codes.RULE_ID}]})
    origin: Origin
    message: str = Field(max_length=4000)
    line: int | None = None
    col: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    after_hidden: bool | None = Field(
        None, description="The judge's mark: raised at or after the first call of untrusted code "
                          "on a hidden shape (its text and figures may carry the shape). None: "
                          "the host's own error, or no mark.")


class Taint(_Model):
    """The judge's mark, by time (``sandbox.contract.wire.TaintRecord``): from the first call
    of untrusted code on a hidden shape on, what its outputs and times determine."""

    hidden_phase: str | None = Field(description="The phase of that first call; None: no runner "
                                                 "was called on a hidden shape.")
    sections: list[Literal["correctness", "timing", "acceptance", "diagnostics"]] = Field(
        default_factory=list, description="Sections holding figures from calls at or after it.")
    phases: list[str] = Field(default_factory=list,
                              description="The judge's phases measured at or after it.")


class Finding(_Model):
    """One static-scan finding."""

    rule: str
    severity: Literal["deny", "warn"]
    message: str
    line: int | None = None
    col: int | None = None
    snippet: str = ""
    file: str | None = None
    threat: str | None = Field(
        None, description="The threat family the rule stops, one line (the policy rule's "
                          "`threat`; the allow-list's and the parser's findings have their "
                          "own). None in reports written before it existed.")


class ScanSummary(_Model):
    policy: str
    denied: bool
    findings: list[Finding] = Field(default_factory=list)


class BadElement(_Model):
    """The first element that failed a check."""

    tensor: str
    index: list[int]
    expected: float | None
    actual: float | None
    dims: dict[str, int]
    seed: int | None
    shape_kind: Literal["tune", "hidden"] | None = None
    phase: str = "correctness"


class CorrectnessResult(_Model):
    passed: bool
    checks: int = Field(ge=0, description="Checked calls.")
    shapes_checked: list[dict[str, int]] = Field(default_factory=list)
    seeds: int = Field(0, ge=0, description="Seeds used per shape (values stay secret).")
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    first_bad: BadElement | None = None


class TimingStats(_Model):
    samples: int = Field(ge=0)
    mean_ms: float | None = Field(description="None in a candidate's copy: withheld.")
    median_ms: float
    p95_ms: float | None = Field(description="None in a candidate's copy: withheld.")
    std_ms: float | None = Field(description="None in a candidate's copy: withheld.")
    min_ms: float | None = Field(description="None in a candidate's copy: withheld.")
    cv: float | None = Field(description="None in a candidate's copy: withheld.")
    bandwidth_gbps: float | None = None
    tflops: float | None = None
    device: str
    clock: Literal["cuda_event", "perf_counter"]
    mode: Literal["events", "cuda_graph", "perf_counter"] = Field(
        description="How each sample was taken: CUDA events around one launch, CUDA-graph "
                    "replay, or the judge's own clock (CPU).")
    cache: Literal["cold", "hot"]
    launch_lead_us: float = Field(
        0.0, description="CUDA: device time (a sleep kernel after the flush) queued before each "
                         "start event, so that the call's launch is queued before timing "
                         "starts and host launch latency is not timed.")
    dims: dict[str, int] = Field(default_factory=dict)
    checked_calls: int = 0
    requested_calls: int | None = Field(
        None, description="The timed calls the task's protocol asks for (samples x reps); more "
                          "than `samples` when the stage's budget would have run out first and "
                          "the stage ended with the samples it had (a wider interval, never a "
                          "timeout of the kernel). None in reports of older harnesses.")
    stopped_by: Literal["count", "budget", "noise"] | None = Field(
        None, description="What ended the timed calls: the declared count, the stage's budget "
                          "(fewer samples, a warning says so), or the task's noise-based "
                          "stopping rule (`benchmark.stop_noise`). None in older reports.")
    check_policy: str = "all"
    flagged_samples: int = 0
    roofline_floor_ms: float | None = None
    device_state: list[dict[str, Any]] = Field(
        default_factory=list, description="NVML clocks, power, temperature, throttle reasons per block.")
    escape: dict[str, float] = Field(
        default_factory=dict,
        description="The escape check's numbers: hidden_ms (judge-clock time the timed region "
                    "did not see, per call), budget_ms, and on CUDA tail_hidden_ms/tail_budget_ms.")
    unmeasured: dict[str, str] = Field(default_factory=dict)
    clocks: dict[str, list[float]] = Field(
        default_factory=dict,
        description="Raw per-call figures behind the escape check, in call order: samples_ms "
                    "(the deciding times), judge_ms (the judge's round trip of each timed "
                    "call) and noop_overhead_ms (each interleaved empty call's round trip "
                    "less its own events); on the CPU also wait_ms and noop_wait_ms (the part "
                    "of each timed and empty call's round trip its threads spent waiting for a "
                    "CPU, taken off before the time is computed).")


class RuleOutcome(_Model):
    rule: Literal["seed", "controlled", "gain"]
    accepted: bool
    reason: str
    numbers: dict[str, Any] = Field(default_factory=dict)


class AcceptanceResult(_Model):
    accepted: bool
    rule: Literal["seed", "controlled", "gain"]
    improvement_fraction: float | None
    pairs: int
    positive_fraction: float | None
    reason: str
    rules: list[RuleOutcome] = Field(default_factory=list)
    replicate_speedup: float | None = None
    unmeasured: dict[str, str] = Field(default_factory=dict)


class SandboxInfo(_Model):
    backend: str
    limits: Limits
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    oom_killed: bool = False
    limit_fired: LimitName | None = None
    wall_s: float | None = None
    output_truncated: bool = False
    stdout_tail: str = ""
    stderr_tail: str = ""
    enforcement: Enforcement | None = Field(
        None, description="How each limit was enforced, the same keys on every backend."
    )
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="Seconds per phase: scan, sandbox_setup (launch to judge start), "
                    "judge_ready (judge start to torch imported and reference loaded), "
                    "runnerN_ready / _import / _setup per runner started, runnerN_handover (the "
                    "judge waiting for it and handing over buffers) and _load (importing the "
                    "module), compile (compile_inputs, compile_first_call: JIT and autotuning), "
                    "correctness, "
                    "benchmark, accept, close (the judge closing its runners and the problem "
                    "process), teardown (judge's record to sandbox gone), total; "
                    "<stage>_prepare / _send / _wait / _check / _empty, where a stage's "
                    "calls spent the judge's time (inputs and reference; inputs in, poison "
                    "and guards; the runner's answer; the checks after it; the interleaved "
                    "empty calls); with "
                    "a measurement gate (leaderboard --prepare-ahead) also gate_wait, the "
                    "judge waiting for its turn at the device: judge_ready leaves it out, "
                    "runnerN_ready (from the runner's start) includes it. Not phases but "
                    "seconds too: between_calls_cpu_max and inputs_write_cpu_max, the most "
                    "CPU any runner used between its reply and the next call, and while the "
                    "judge wrote a call's inputs (the judge's idle check).")


class CandidateInfo(_Model):
    path: str
    sha256: str
    bytes: int


class ShapeSets(_Model):
    """The shapes a generated-shape task drew for this evaluation (``shapes.generate``)."""

    seed: Literal["secret", "leaderboard"] = Field(
        description="secret: fresh per evaluation; leaderboard: from the operator's secret "
                    "(the seed itself is never reported).")
    tune: list[dict[str, int | str]] = Field(default_factory=list)
    hidden: list[dict[str, int | str]] = Field(default_factory=list)
    hidden_probes: list[str] = Field(default_factory=list,
                                     description="What each drawn hidden shape probes.")
    timed: dict[str, int | str] = Field(default_factory=dict)


class Report(_Model):
    """One evaluation's verdict. ``kgrader schema`` prints its JSON Schema."""

    schema_version: str = SCHEMA_VERSION
    kgrader_version: str = ""
    ok: bool
    stage: Stage | None = Field(description="The last stage reached.")
    errors: list[ReportError] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    task: str | None = None
    candidate: CandidateInfo | None = None
    current: CandidateInfo | None = None
    device: str | None = None
    scan: ScanSummary | None = None
    correctness: CorrectnessResult | None = None
    timing: TimingStats | None = None
    timing_current: TimingStats | None = None
    acceptance: AcceptanceResult | None = None
    sandbox: SandboxInfo | None = None
    diagnostics: Diagnostics | None = Field(None, description="Memory checker (--sanitize).")
    environment: dict[str, Any] = Field(default_factory=dict)
    shapes: ShapeSets | None = Field(None, description="Drawn shape sets (generated tasks only).")
    taint: Taint | None = Field(None, description="The judge's taint mark; None: the judge wrote "
                                                  "none (every figure is then treated as tainted).")
    withheld: dict[str, str] = Field(
        default_factory=dict, description="A candidate's copy only (grader.grading.redact): each "
                                          "figure withheld or coarsened, by path, and why.")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def failed_stage(self) -> Stage | None:
        return self.errors[0].stage if self.errors else None

    def error_codes(self) -> list[str]:
        return [e.code for e in self.errors]

    def infrastructure_failed(self) -> bool:
        """Whether kgrader or the machine, not the candidate, stopped this evaluation."""
        return any(e.origin == "infrastructure" for e in self.errors)


def report_json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema()
    schema["$id"] = f"urn:kgrader:report:{SCHEMA_VERSION}"
    schema["title"] = "kgrader report"
    return schema
