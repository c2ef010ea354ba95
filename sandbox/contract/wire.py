"""The one contract between the host and the judge: what goes in, what comes out.

Both sides import this module (the sandbox depends on the standard library, torch and
Triton only, so it is plain frozen dataclasses). The host builds a :class:`JudgeRequest`
from its pydantic task model with every default already resolved, writes it as the
judge's secret file, and reads back a :class:`Record`. Each end checks
:data:`WIRE_VERSION`: a mismatch is an infrastructure error, never a verdict.

Parsing is strict on both ends: unknown keys, missing keys and wrong types raise
:class:`WireFormatError`. The host additionally validates the record through pydantic
(``grader.report.record``), which reuses these classes as its schema.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from sandbox.contract.wire_diagnostics import DiagnosticsRecord as DiagnosticsRecord
from sandbox.contract.wire_diagnostics import FindingRecord as FindingRecord
from sandbox.contract.wire_diagnostics import KernelRecord as KernelRecord
from sandbox.contract.wire_diagnostics import ProfileRecord as ProfileRecord
from sandbox.contract.wire_diagnostics import ProfileWire as ProfileWire
from sandbox.contract.wire_diagnostics import SanitizerRecord as SanitizerRecord
from sandbox.contract.wire_diagnostics import SanitizeTool as SanitizeTool
from sandbox.contract.wire_diagnostics import SanitizeWire as SanitizeWire
from sandbox.contract.wire_progress import MAX_PROGRESS_LINE as MAX_PROGRESS_LINE
from sandbox.contract.wire_progress import PROGRESS_NAME as PROGRESS_NAME
from sandbox.contract.wire_progress import PROGRESS_STEPS as PROGRESS_STEPS
from sandbox.contract.wire_progress import ProgressEvent as ProgressEvent
from sandbox.contract.wire_progress import progress_line as progress_line
from sandbox.contract.wire_progress import read_progress_line as read_progress_line
from sandbox.contract.wire_timing import AcceptanceRecord as AcceptanceRecord
from sandbox.contract.wire_timing import PairsRecord as PairsRecord
from sandbox.contract.wire_timing import TimingRecord as TimingRecord

WIRE_VERSION = 4  # 4: TimingRecord.requested_calls/stopped_by, BenchmarkWire.stop_noise

# ---- the fixed layout every backend provides ------------------------------------------
HARNESS_MOUNT = "/kg/harness"
IN_MOUNT = "/kg/in"
OUT_MOUNT = "/kg/out"
SCRATCH_MOUNT = "/tmp"
RESULT_NAME = "result.json"
SECRET_NAME = ".judge-secret.json"
BUILDS_NAME = "builds"  # in /kg/in and /kg/out: each source's builds (grader.builds)
GATE_NAME = ".gate"  # the measurement gate's FIFO (grader.backends.gate), read once, unlinked
TETHER_ENV = "KGRADER_TETHER"  # "stdin": the host holds it open (sandbox.judge.main.tether)
# "1" in the host's environment: the judge runs under cProfile, its hot spots in stderr
PROFILE_ENV = "KGRADER_JUDGE_PROFILE"
EXIT_HOST_GONE = 75  # the judge's exit status when its tether closed (no record written)
CANDIDATE_NAME, CURRENT_NAME = "candidate.py", "current.py"
JUDGE_UID = JUDGE_GID = 65534


Device = Literal["cpu", "cuda", "rocm"]
Mode = Literal["evaluate", "measure_peak", "calibrate", "profile", "check"]
StageName = Literal["compile", "correctness", "benchmark"]
ShapeKind = Literal["tune", "hidden"]
Origin = Literal["candidate", "infrastructure"]
# Stages a judge error can name. ``integrity`` is the candidate breaking the harness
# itself (killing the judge, forging or flooding the record, tampering with its folder).
ErrorStage = Literal["sandbox", "compile", "correctness", "benchmark", "accept", "integrity"]
# How a candidate is called (grader/task.py TaskSpec.contract; sandbox/problem/field.py).
Contract = Literal["dps", "module", "gpumode"]
# A generated task's dtype variable is bound to an index into this tuple.
DTYPE_CODES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64", "int8", "int32",
                                "int64", "uint8", "bool")


class WireFormatError(ValueError):
    """Bytes that do not match this contract (or another contract version)."""


# ---- host -> judge -------------------------------------------------------------------
@dataclass(frozen=True)
class TensorWire:
    name: str
    role: Literal["input", "output"]
    dtype: str
    shape: tuple[str | int, ...]
    init_kind: Literal["normal", "uniform", "randint"] = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class CorrectnessWire:
    seeds: tuple[int, ...]
    atol: float
    rtol: float
    max_mismatch_fraction: float
    timed_check_fraction: float
    by_dtype: tuple[dict[str, Any], ...] = ()  # {"dtype", "atol", "rtol"}: per output dtype

    def tolerance(self, dtype: str) -> tuple[float, float]:
        """(atol, rtol) for an output of ``dtype`` (a DTYPE_CODES name)."""
        for t in self.by_dtype:
            if t.get("dtype") == dtype:
                return float(t["atol"]), float(t["rtol"])
        return self.atol, self.rtol


@dataclass(frozen=True)
class BenchmarkWire:
    warmup: int
    warmup_ms: float
    samples: int
    reps: int
    cache: Literal["cold", "hot"]
    flush_mib: int | None
    cuda_graph: bool
    allow_tf32: bool
    stop_noise: float | None = None  # end once the median's 95% interval is within +/- this


@dataclass(frozen=True)
class AcceptanceWire:
    rule: Literal["seed", "controlled", "gain"]
    min_improvement_fraction: float
    min_pairs: int
    min_positive_fraction: float
    pairs: int
    alpha: float
    looks: tuple[int, ...]
    replicate_margin: float = 0.0
    calls_per_pair: int = 1
    pair_offset_us: float = 0.0


@dataclass(frozen=True)
class ProblemWire:
    """Names in a field task's trusted reference; fields as ``grader.task.ProblemSpec``
    ("" for none; ``modules`` is ``support_modules``)."""

    reference: str
    inputs: str
    init: str = ""
    checker: str = ""
    seed_arg: str = ""
    fixed_args: dict[str, Any] = field(default_factory=dict)
    scratch: tuple[int, ...] = ()
    modules: dict[str, str] = field(default_factory=dict)
    strict: bool = False


@dataclass(frozen=True)
class TaskWire:
    name: str
    entrypoint: str
    tensors: tuple[TensorWire, ...]
    tune: tuple[dict[str, int], ...]
    hidden: tuple[dict[str, int], ...]
    correctness: CorrectnessWire
    benchmark: BenchmarkWire
    acceptance: AcceptanceWire
    # Kernel-only task: runners record the torch ops of each launch; compute ones fail it.
    audit_ops: bool = False
    contract: Contract = "dps"
    problem: ProblemWire | None = None
    # The shape the benchmark and accept stages time; None: the first tune shape.
    timed: dict[str, int] | None = None


@dataclass(frozen=True)
class LimitsWire:
    """The limits the judge itself keeps (the backend enforces the rest from outside)."""

    compile_s: float
    run_s: float
    gpu_memory_mib: int | None
    memory_mib: int | None = None  # the sandbox's memory limit (the backend enforces it)


@dataclass(frozen=True)
class CalibrateWire:
    """``calibrate`` mode: many acceptance decisions per scenario in one sandbox."""

    scenarios: tuple[dict[str, Any], ...]
    decisions: int
    pairs: int


@dataclass(frozen=True)
class JudgeRequest:
    """Everything the judge is told. Written by the host as the secret file."""

    wire_version: int
    key: str
    mode: Mode
    device: Device
    limits: LimitsWire
    phase_seed: int
    task: TaskWire | None = None
    reference: str = ""
    candidate: str | None = None
    current: str | None = None
    stages: tuple[StageName, ...] = ("compile", "correctness", "benchmark")
    shape_kinds: tuple[ShapeKind, ...] = ("tune", "hidden")
    floor_ms: float | None = None
    # Trusted modules (a task's own reference as the current best, or checked as the
    # candidate in a leaderboard's reference round) are exempt from the kernel-only audit.
    trusted_candidate: bool = False
    trusted_current: bool = False
    quick: bool = False
    calibrate: CalibrateWire | None = None
    sanitize: SanitizeWire | None = None
    profile: ProfileWire | None = None
    gated: bool = False  # wait at GATE_NAME before touching the device
    # A warm sandbox (grader.pool): the candidate is staged into /kg/in only when the host
    # opens the gate; runners start ahead without their module and get it at the grant.
    warm: bool = False
    # The host keeps each source's builds (grader.builds): closing runners copy what they
    # built to /kg/out/builds/<source name>/ (sandbox.launcher.builds).
    builds: bool = False


# ---- judge -> host -------------------------------------------------------------------
@dataclass(frozen=True)
class ErrorWire:
    """One failure, with whose fault it is decided where it was created."""

    stage: ErrorStage
    code: str
    message: str
    origin: Origin
    line: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    # Raised at or after the first call of untrusted code on a hidden shape (TaintRecord):
    # its message, detail and figures may carry the shape. True unless the judge, where it
    # records the error and knows the time, says otherwise (fail closed).
    after_hidden: bool = True


# The record's sections whose figures runners' outputs and times determine.
TaintSection = Literal["correctness", "timing", "acceptance", "diagnostics"]


@dataclass(frozen=True)
class TaintRecord:
    """The judge's mark, by time: once a runner of untrusted code (the candidate, the
    current best) has been called on a hidden shape, every figure its outputs or its times
    determine may encode that shape (it chooses what it writes and how long it takes).
    ``hidden_phase``: the phase of that first call (``correctness``, ``racecheck``, ...),
    None when no runner was called on a hidden shape; ``sections``: the record's sections
    holding figures from calls at or after it; ``phases``: the names in ``Record.phases``
    measured (or measured again) at or after it. The host withholds these from every copy a
    candidate reads; it never works out taint itself (``grader.grading.redact``)."""

    hidden_phase: str | None = None
    sections: tuple[TaintSection, ...] = ()
    phases: tuple[str, ...] = ()


@dataclass(frozen=True)
class CorrectnessRecord:
    passed: bool = False
    checks: int = 0
    shapes_checked: tuple[dict[str, int], ...] = ()
    seeds: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    first_bad: dict[str, Any] | None = None


@dataclass(frozen=True)
class Record:
    """The judge's one result record (authenticated by the host before it is parsed)."""

    wire_version: int
    stage: ErrorStage | None
    errors: tuple[ErrorWire, ...]
    warnings: tuple[str, ...]
    device: str
    environment: dict[str, Any]
    compile_s: float | None = None
    correctness: CorrectnessRecord | None = None
    timing: TimingRecord | None = None
    acceptance: AcceptanceRecord | None = None
    peaks: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    diagnostics: DiagnosticsRecord | None = None
    # Where the time went, in seconds (diagnostics only, never a verdict): the judge's own
    # phases and each runner's start-up; wall-clock start and end of the judge (epoch s)
    # let the host add sandbox set-up and teardown.
    phases: dict[str, float] = field(default_factory=dict)
    judge_started: float | None = None
    judge_finished: float | None = None
    # ``check`` mode: what the trusted reference did on every shape (sandbox.judge.task_check).
    check: dict[str, Any] | None = None
    # None: the judge wrote no mark (a set-up failure before any runner started); the host
    # then treats every figure as tainted.
    taint: TaintRecord | None = None


# ---- (de)serialisation ---------------------------------------------------------------
def dumps(obj: Any) -> str:
    """Canonical JSON of a wire dataclass (sorted keys, no NaN)."""
    return json.dumps(dataclasses.asdict(obj), sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def request_from_json(text: str | bytes) -> JudgeRequest:
    """Parse the judge's request strictly; a version mismatch is a :class:`WireFormatError`."""
    req: JudgeRequest = _parse(JudgeRequest, text, "request", "from the host, the judge")
    return req


def record_from_json(text: str | bytes) -> Record:
    """Parse a record strictly (the host reads it only after its MAC verified)."""
    rec: Record = _parse(Record, text, "record", "in the record, the host")
    return rec


def _parse(cls: type[Any], text: str | bytes, what: str, sides: str) -> Any:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise WireFormatError(f"{what} is not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise WireFormatError(f"{what} is not an object")
    if raw.get("wire_version") != WIRE_VERSION:
        raise WireFormatError(f"wire version {raw.get('wire_version')!r} {sides} speaks "
                              f"{WIRE_VERSION}: host and harness are out of step")
    return _build(cls, raw, what)


def _build(cls: type[Any], raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise WireFormatError(f"{where}: expected an object for {cls.__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(raw) - set(fields)
    if unknown:
        raise WireFormatError(f"{where}: unknown key(s) {sorted(unknown)} in {cls.__name__}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise WireFormatError(f"{where}: {cls.__name__} lacks {name!r}")
            continue
        kwargs[name] = _coerce(hints[name], raw[name], f"{where}.{name}")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except WireFormatError:
                continue
        raise WireFormatError(f"{where}: {value!r:.80} matches none of {args}")
    if origin is Literal:
        if value not in args:
            raise WireFormatError(f"{where}: {value!r:.80} is not one of {args}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise WireFormatError(f"{where}: expected a list")
        item = args[0] if args else Any
        return tuple(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise WireFormatError(f"{where}: expected an object")
        vt = args[1] if len(args) == 2 else Any
        return {k: _coerce(vt, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise WireFormatError(f"{where}: expected true/false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WireFormatError(f"{where}: expected an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WireFormatError(f"{where}: expected a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise WireFormatError(f"{where}: expected a string")
        return value
    raise WireFormatError(f"{where}: unsupported type {tp!r}")  # pragma: no cover
