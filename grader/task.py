"""TaskSpec: everything about a task that is fixed before any candidate runs.

A task is a folder holding ``task.json`` (parsed into :class:`TaskSpec`) and
``reference.py`` (trusted). Its ``contract`` says how candidates are called: ``dps``
(kgrader's own, destination passing: ``launch(*inputs, *outputs)`` in the order
``tensors`` lists them, the reference defining the same entry point), ``module``
(KernelBench: the reference file defines ``Model``, ``get_inputs``, ``get_init_inputs``;
candidates ``ModelNew``) or ``gpumode`` (GPU MODE: ``ref_kernel``, ``generate_input``;
candidates ``custom_kernel``). For the last two the inputs come from the reference's own
generator and the candidate returns its outputs (:class:`ProblemSpec`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grader.costexpr import compile_expr, eval_expr
from grader.errors import PolicyError, TaskError
from grader.limits import Limits
from grader.scan.policy import load_policy
from grader.shapespec import GenerateSpec
from sandbox.contract import wire
from sandbox.contract.conventions import NATIVE, convention

DType = Literal["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]
DTYPE_BYTES: dict[str, int] = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "int8": 1, "int32": 4, "int64": 8, "uint8": 1, "bool": 1,
}
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InitSpec(_Frozen):
    """How the judge fills an input tensor (from a seed the candidate never sees)."""

    kind: Literal["normal", "uniform", "randint"] = "normal"
    mean: float = 0.0
    std: float = Field(1.0, gt=0)
    low: float = 0.0
    high: float = 1.0

    @model_validator(mode="after")
    def _bounds(self) -> InitSpec:
        if self.kind in ("uniform", "randint") and not self.high > self.low:
            raise ValueError("init.high must be greater than init.low")
        return self


class TensorSpec(_Frozen):
    """One argument of ``launch``: its role, dtype and shape in named dimensions."""

    name: Identifier
    role: Literal["input", "output"]
    dtype: DType | Identifier = Field(description="A dtype, or a dtype variable of "
                                                  "shapes.generate.dtypes.")
    shape: list[Identifier | Annotated[int, Field(ge=1)]] = Field(min_length=0, max_length=8)
    init: InitSpec = InitSpec()


# Dimension values (0 only where a generated dimension allows empty tensors; dtype
# variables bind their code in wire.DTYPE_CODES, 0 included).
ShapeBinding = dict[Identifier, Annotated[int, Field(ge=0, le=1 << 31)]]


class Shapes(_Frozen):
    """Dimension values: ``tune`` ones candidates may see, ``hidden`` ones only the verdict
    uses; ``generate`` draws more of both per evaluation (:mod:`grader.shapes`)."""

    tune: list[ShapeBinding] = Field(default_factory=list)
    hidden: list[ShapeBinding] = Field(default_factory=list)
    timed: ShapeBinding | None = Field(
        None, description="The shape the benchmark and accept stages time; None: the first "
                          "tune shape (a drawn one, for a generated task without fixed ones).")
    generate: GenerateSpec | None = None

    @field_validator("tune", "hidden", "timed", mode="before")
    @classmethod
    def _dtype_names(cls, v: Any) -> Any:
        """A dtype variable may be bound by name (``"T": "float16"``); it is stored as its code."""
        def one(b: Any) -> Any:
            if isinstance(b, dict):
                return {k: wire.DTYPE_CODES.index(x) if isinstance(x, str) and x in wire.DTYPE_CODES
                        else x for k, x in b.items()}
            return b
        return [one(b) for b in v] if isinstance(v, list) else one(v)

    @model_validator(mode="after")
    def _some(self) -> Shapes:
        if not self.tune and self.generate is None:
            raise ValueError("shapes need at least one tune shape or a generate section")
        return self


class ProblemSpec(_Frozen):
    """Names in a field task's reference file (``module`` and ``gpumode`` contracts)."""

    reference: Identifier = Field(description="The reference model class (module) or function.")
    inputs: Identifier = Field(description="The input generator: get_inputs / generate_input.")
    init: Identifier | None = Field(None, description="module: the constructor-arguments function.")
    checker: Identifier | None = Field(None, description="gpumode: check_implementation, also run.")
    seed_arg: Identifier | None = Field(None, description="gpumode: the generator argument the "
                                                          "judge fills with a secret seed.")
    fixed_args: dict[Identifier, str | int | float | bool | None] = Field(
        default_factory=dict, description="gpumode: generator arguments that are not dimensions.")
    scratch: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="gpumode: positions in the generated data the "
                                          "candidate may write (output buffers handed in).")
    strict: bool = Field(
        False, description="gpumode: kgrader's element-wise compare and dtype check on top of "
                           "check_implementation (off: the problem's checker decides values "
                           "and dtypes, kgrader checks only for untouched or NaN outputs).")
    varied: list[Identifier] = Field(
        default_factory=list, description="module: the size constants hidden shapes vary.")
    support_modules: dict[Identifier, Annotated[str, Field(max_length=1 << 20)]] = Field(
        default_factory=dict, description="Trusted helper modules by name (GPU MODE's utils, "
                                          "task), importable by the reference and candidates.")

    def to_wire(self) -> wire.ProblemWire:
        return wire.ProblemWire(
            reference=self.reference, inputs=self.inputs, init=self.init or "",
            checker=self.checker or "", seed_arg=self.seed_arg or "",
            fixed_args=dict(self.fixed_args), scratch=tuple(self.scratch),
            modules=dict(self.support_modules), strict=self.strict)


class CorrectnessSpec(_Frozen):
    seeds: list[int] = Field(min_length=1)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    by_dtype: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="Per output dtype, (atol, rtol) in place of atol/rtol "
        "(KernelBench: 1e-4 for float32, 1e-2 for float16 and bfloat16).")
    max_mismatch_fraction: float = Field(0.0, ge=0, le=1)
    timed_check_fraction: float = Field(
        1.0, gt=0, le=1, description="Share of timed calls whose outputs are re-checked."
    )

    @field_validator("by_dtype")
    @classmethod
    def _known_dtypes(cls, v: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for name, (atol, rtol) in v.items():
            if name not in wire.DTYPE_CODES:
                raise ValueError(f"by_dtype: unknown dtype {name!r} (one of {', '.join(wire.DTYPE_CODES)})")
            if atol < 0 or rtol < 0:
                raise ValueError(f"by_dtype[{name!r}]: tolerances must be >= 0")
        return v


class BenchmarkSpec(_Frozen):
    warmup: int = Field(10, ge=0, description="Discarded calls before timing.")
    warmup_ms: float = Field(0.0, ge=0, description="Minimum warm-up time per side.")
    samples: int = Field(25, ge=1, description="Timing blocks.")
    reps: int = Field(5, ge=1, description="Individually timed calls per block.")
    cache: Literal["cold", "hot"] = "cold"
    flush_mib: int | None = Field(None, ge=1, description="Cold-cache flush buffer; None: from device.")
    cuda_graph: bool = Field(False, description="Time by CUDA-graph replay (tiny calls only).")
    allow_tf32: bool = Field(False, description="Pinned torch TF32 flags for every side.")
    stop_noise: float | None = Field(
        None, gt=0, lt=1,
        description="A noise-based stopping rule (nvbench's relative-noise criterion) in place "
                    "of the fixed count: the benchmark stage ends once the median's 95% "
                    "interval lies within +/- this fraction of the median (after at least the "
                    "escape check's minimum of calls), and takes at most samples x reps calls. "
                    "Paired acceptance timing keeps the declared counts.")


class CostModel(_Frozen):
    """Bytes moved and flops done, as arithmetic on the dimension names."""

    bytes: str
    flops: str

    @field_validator("bytes", "flops")
    @classmethod
    def _parses(cls, expr: str) -> str:
        compile_expr(expr)
        return expr

    def evaluate(self, dims: dict[str, int]) -> tuple[float, float]:
        return eval_expr(self.bytes, dims), eval_expr(self.flops, dims)


class AcceptanceSpec(_Frozen):
    rule: Literal["seed", "controlled", "gain"] = Field(
        "seed", description="Which rule decides: seed (the classic median-of-ratios rule, false "
                            "accepts not controlled), controlled (sequential sign test that the "
                            "gain exceeds the margin), gain (sequential sign test that there is "
                            "a gain, the margin on the point estimate).")
    min_improvement_fraction: float = Field(0.01, ge=0, lt=1)
    min_pairs: int = Field(5, ge=1)
    min_positive_fraction: float = Field(0.6, ge=0, le=1)
    pairs: int = Field(30, ge=1, description="Pairs measured for the seed rule.")
    alpha: float = Field(0.01, gt=0, lt=0.5, description="Controlled rule: total false-accept rate.")
    looks: list[int] = Field(default_factory=lambda: [25, 50, 100, 200], min_length=1)
    calls_per_pair: int = Field(
        1, ge=1, le=64,
        description="Timed calls of each side in one pair (interleaved ABAB.. or BABA..), the "
                    "pair's time for a side being their median: fewer, less noisy pairs. "
                    "Pair counts (pairs, min_pairs, looks) stay counts of pairs.")
    pair_offset_us: float = Field(
        0.25, ge=0, le=1000,
        description="Allowance (us) for the offset a pair of runners carries for its life "
                    "(two runners of one source differ by ~0.09 us standard deviation on an "
                    "H200): every rule and the replicate ask for the margin plus this much of "
                    "the current's median time. Matters below ~30 us; 0 turns it off.")
    replicate_margin: float | None = Field(
        None, ge=0, lt=1,
        description="The independent replicate confirms an acceptance only with a speed-up "
                    "above 1 + replicate_margin; None: the task's min_improvement_fraction.")

    @property
    def veto_margin(self) -> float:
        return self.min_improvement_fraction if self.replicate_margin is None else self.replicate_margin

    def to_wire(self) -> wire.AcceptanceWire:
        return wire.AcceptanceWire(
            rule=self.rule, min_improvement_fraction=self.min_improvement_fraction,
            min_pairs=self.min_pairs, min_positive_fraction=self.min_positive_fraction,
            pairs=self.pairs, alpha=self.alpha, looks=tuple(sorted(self.looks)),
            replicate_margin=self.veto_margin, calls_per_pair=self.calls_per_pair,
            pair_offset_us=self.pair_offset_us)


class TaskSpec(_Frozen):
    """A task: fixed tensors, shapes, tolerances, protocol and limits."""

    name: Identifier
    description: str = ""
    tags: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.\-]*$", max_length=64)]] = Field(
        default_factory=list, max_length=16,
        description="Op family, e.g. ['reduction', 'softmax']; empty: the task name stands in.")
    entrypoint: Identifier = "launch"
    contract: wire.Contract = Field(NATIVE, description="How candidates are called: dps "
                                    "(launch into given outputs), module (KernelBench ModelNew) "
                                    "or gpumode (custom_kernel); the last two return outputs.")
    problem: ProblemSpec | None = None
    tensors: list[TensorSpec] = Field(default_factory=list, description="dps tasks only; the "
                                      "other contracts' tensors come from the generator.")
    shapes: Shapes
    correctness: CorrectnessSpec
    benchmark: BenchmarkSpec = BenchmarkSpec()
    cost_model: CostModel | None = None
    acceptance: AcceptanceSpec = AcceptanceSpec()
    limits: Limits = Limits()
    policy: str = "default"
    sanitize: Literal["none", "memcheck", "racecheck"] = Field(
        "none", description="Run the correctness stage under compute-sanitizer (GPU only).")
    roofline_floor_ms: float | None = Field(
        None, ge=0, description="Fixed floor; None: derived from the cost model and device peaks."
    )

    @model_validator(mode="after")
    def _consistent(self) -> TaskSpec:
        self._contract_fits()
        names = [t.name for t in self.tensors]
        if len(set(names)) != len(names):
            raise ValueError("tensor names must be unique")
        gen = self.shapes.generate
        dtype_vars = set(gen.dtypes) if gen is not None else set()
        for i, t in enumerate(self.tensors):
            if t.dtype not in DTYPE_BYTES and t.dtype not in dtype_vars:
                raise ValueError(f"tensors.{i}.dtype: {t.dtype!r} is neither a dtype "
                                 f"({', '.join(DTYPE_BYTES)}) nor a dtype variable of "
                                 "shapes.generate.dtypes")
        dims = {d for t in self.tensors for d in t.shape if isinstance(d, str)}
        dims |= {t.dtype for t in self.tensors if t.dtype in dtype_vars}
        if gen is not None and dims - set(gen.dims) - dtype_vars:
            raise ValueError(f"shapes.generate lacks dimension(s) "
                             f"{sorted(dims - set(gen.dims) - dtype_vars)}")
        timed = [self.shapes.timed] if self.shapes.timed is not None else []
        for kind, bindings in (("tune", self.shapes.tune), ("hidden", self.shapes.hidden),
                               ("timed", timed)):
            for i, b in enumerate(bindings):
                missing = dims - set(b)
                if missing:
                    raise ValueError(f"shapes.{kind}[{i}] lacks dimension(s) {sorted(missing)}")
                for k, v in b.items():
                    if k in dtype_vars and v >= len(wire.DTYPE_CODES):
                        raise ValueError(f"shapes.{kind}[{i}].{k}: {v} is no dtype")
                    if k not in dtype_vars and v < 1 and kind != "hidden":
                        raise ValueError(f"shapes.{kind}[{i}].{k}: tune and timed sizes are >= 1")
        if self.cost_model is not None:
            for b in self.shapes.tune + self.shapes.hidden + timed:
                self.cost_model.evaluate(b)
        return self

    def _contract_fits(self) -> None:
        conv = convention(self.contract)  # a value outside wire.Contract never gets here
        if not conv.takes_problem:
            if self.problem is not None:
                raise ValueError(f"a {self.contract} task takes no problem section")
            if not self.tensors:
                raise ValueError("tensors is missing or empty: a dps task lists its tensors, "
                                 "at least one with role 'output'")
            if not any(t.role == "output" for t in self.tensors):
                raise ValueError("at least one tensor must have role 'output'")
            return
        if self.problem is None:
            raise ValueError(f"a {self.contract} task needs a problem section")
        if self.tensors:
            raise ValueError(f"a {self.contract} task declares no tensors: its generator makes them")
        if conv.builds_entry and self.problem.init is None:
            raise ValueError(f"a {self.contract} task needs problem.init (get_init_inputs)")
        if self.benchmark.cuda_graph:
            raise ValueError("cuda_graph timing needs a dps task (outputs written, not returned)")
        if self.shapes.generate is not None and self.shapes.generate.dtypes:
            raise ValueError("dtype variables need a dps task")

    def timed_dims(self) -> dict[str, int]:
        """The shape the benchmark times (a generated task's shapes must be drawn first)."""
        if self.shapes.timed is not None:
            return dict(self.shapes.timed)
        if not self.shapes.tune:
            raise TaskError(f"task {self.name}: its shapes are generated and not drawn yet")
        return dict(self.shapes.tune[0])

    @property
    def inputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "input"]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.role == "output"]

    def concrete_shape(self, tensor: TensorSpec, dims: dict[str, int]) -> list[int]:
        return [d if isinstance(d, int) else dims[d] for d in tensor.shape]

    def to_wire(self, audit_ops: bool = False) -> wire.TaskWire:
        """What the judge is told: every default resolved here, none restated in the sandbox.

        ``audit_ops``: the task is kernel-only (its policy is ``triton-only`` or derives
        from it), so runners audit the torch ops of every launch.
        """
        c, b = self.correctness, self.benchmark
        if not self.shapes.tune:
            raise TaskError(f"task {self.name}: draw its generated shapes before sending it "
                            "(grader.shapes.resolve_shapes)")
        return wire.TaskWire(
            name=self.name, entrypoint=self.entrypoint,
            tensors=tuple(wire.TensorWire(name=t.name, role=t.role, dtype=t.dtype,
                                          shape=tuple(t.shape), init_kind=t.init.kind,
                                          mean=t.init.mean, std=t.init.std, low=t.init.low,
                                          high=t.init.high) for t in self.tensors),
            tune=tuple(dict(d) for d in self.shapes.tune),
            hidden=tuple(dict(d) for d in self.shapes.hidden),
            contract=self.contract,
            problem=self.problem.to_wire() if self.problem is not None else None,
            timed=dict(self.shapes.timed) if self.shapes.timed is not None else None,
            correctness=wire.CorrectnessWire(
                seeds=tuple(c.seeds), atol=c.atol, rtol=c.rtol,
                max_mismatch_fraction=c.max_mismatch_fraction,
                timed_check_fraction=c.timed_check_fraction,
                by_dtype=tuple({"dtype": k, "atol": float(v[0]), "rtol": float(v[1])}
                               for k, v in sorted(c.by_dtype.items()))),
            benchmark=wire.BenchmarkWire(
                warmup=b.warmup, warmup_ms=b.warmup_ms, samples=b.samples, reps=b.reps,
                cache=b.cache, flush_mib=b.flush_mib, cuda_graph=b.cuda_graph,
                allow_tf32=b.allow_tf32, stop_noise=b.stop_noise),
            acceptance=self.acceptance.to_wire(), audit_ops=audit_ops)


def spec_or_none(task: TaskSpec | Mapping[str, Any] | None) -> TaskSpec | None:
    """``task`` as a spec: itself, a task.json mapping parsed, else None (a mapping that is
    not a valid task: a report's facts then do without it)."""
    if isinstance(task, TaskSpec) or task is None:
        return task
    try:
        return TaskSpec.model_validate(dict(task))
    except ValidationError:
        return None


def load_task(task_dir: str | Path) -> tuple[TaskSpec, str]:
    """Parse ``task_dir/task.json`` and read ``reference.py``; raise :class:`TaskError`."""
    root = Path(task_dir)
    if not root.is_dir():
        raise TaskError(f"task folder not found: {root}")
    spec_path, ref_path = root / "task.json", root / "reference.py"
    for p in (spec_path, ref_path):
        if not p.is_file():
            raise TaskError(f"task folder {root} lacks {p.name}")
    try:
        raw = json.loads(spec_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise TaskError(f"{spec_path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise TaskError(f"{spec_path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as e:
        raise TaskError(f"{spec_path}: invalid task\n{format_validation_error(e)}") from None
    try:  # a task naming a policy that does not load is malformed: say so here, naming it
        load_policy(spec.policy)
    except PolicyError as e:
        raise TaskError(f"{spec_path}: its policy {spec.policy!r} cannot be used: {e.message}",
                        hint="name a shipped policy (kgrader policy list) or a policy file"
                        ) from None
    try:
        reference = ref_path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskError(f"{ref_path}: not UTF-8") from None
    return spec, reference


def format_validation_error(e: ValidationError) -> str:
    """One line per problem, naming the field path: ``tensors.0.dtype: Input should be ...``."""
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)
