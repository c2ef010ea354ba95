"""TaskSpec: everything about a task that is fixed before any candidate runs.

A task is a folder holding ``task.json`` (parsed into :class:`TaskSpec`) and
``reference.py`` (trusted; defines the same entry point as candidates). Candidates use
destination-passing style: ``launch(*inputs, *outputs)`` in the order ``tensors`` lists
them.
"""

from __future__ import annotations

import ast
import json
import math
import operator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grader.errors import TaskError
from grader.limits import Limits
from sandbox import wire

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
    dtype: DType
    shape: list[Identifier | Annotated[int, Field(ge=1)]] = Field(min_length=0, max_length=8)
    init: InitSpec = InitSpec()


ShapeBinding = dict[Identifier, Annotated[int, Field(ge=1, le=1 << 31)]]


class Shapes(_Frozen):
    """Dimension values: ``tune`` ones candidates may see, ``hidden`` ones only the verdict uses."""

    tune: list[ShapeBinding] = Field(min_length=1)
    hidden: list[ShapeBinding] = Field(default_factory=list)


class CorrectnessSpec(_Frozen):
    seeds: list[int] = Field(min_length=1)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    max_mismatch_fraction: float = Field(0.0, ge=0, le=1)
    timed_check_fraction: float = Field(
        1.0, gt=0, le=1, description="Share of timed calls whose outputs are re-checked."
    )


class BenchmarkSpec(_Frozen):
    warmup: int = Field(10, ge=0, description="Discarded calls before timing.")
    warmup_ms: float = Field(0.0, ge=0, description="Minimum warm-up time per side.")
    samples: int = Field(25, ge=1, description="Timing blocks.")
    reps: int = Field(5, ge=1, description="Individually timed calls per block.")
    cache: Literal["cold", "hot"] = "cold"
    flush_mib: int | None = Field(None, ge=1, description="Cold-cache flush buffer; None: from device.")
    cuda_graph: bool = Field(False, description="Time by CUDA-graph replay (tiny calls only).")
    allow_tf32: bool = Field(False, description="Pinned torch TF32 flags for every side.")


class CostModel(_Frozen):
    """Bytes moved and flops done, as arithmetic on the dimension names."""

    bytes: str
    flops: str

    @field_validator("bytes", "flops")
    @classmethod
    def _parses(cls, expr: str) -> str:
        _compile_expr(expr)
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
            replicate_margin=self.veto_margin)


class TaskSpec(_Frozen):
    """A task: fixed tensors, shapes, tolerances, protocol and limits."""

    name: Identifier
    description: str = ""
    tags: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.\-]*$", max_length=64)]] = Field(
        default_factory=list, max_length=16,
        description="Op family, e.g. ['reduction', 'softmax']; empty: the task name stands in.")
    entrypoint: Identifier = "launch"
    tensors: list[TensorSpec] = Field(min_length=1)
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
        names = [t.name for t in self.tensors]
        if len(set(names)) != len(names):
            raise ValueError("tensor names must be unique")
        if not any(t.role == "output" for t in self.tensors):
            raise ValueError("at least one tensor must have role 'output'")
        dims = {d for t in self.tensors for d in t.shape if isinstance(d, str)}
        for kind, bindings in (("tune", self.shapes.tune), ("hidden", self.shapes.hidden)):
            for i, b in enumerate(bindings):
                missing = dims - set(b)
                if missing:
                    raise ValueError(f"shapes.{kind}[{i}] lacks dimension(s) {sorted(missing)}")
        if self.cost_model is not None:
            for b in self.shapes.tune + self.shapes.hidden:
                self.cost_model.evaluate(b)
        return self

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
        return wire.TaskWire(
            name=self.name, entrypoint=self.entrypoint,
            tensors=tuple(wire.TensorWire(name=t.name, role=t.role, dtype=t.dtype,
                                          shape=tuple(t.shape), init_kind=t.init.kind,
                                          mean=t.init.mean, std=t.init.std, low=t.init.low,
                                          high=t.init.high) for t in self.tensors),
            tune=tuple(dict(d) for d in self.shapes.tune),
            hidden=tuple(dict(d) for d in self.shapes.hidden),
            correctness=wire.CorrectnessWire(
                seeds=tuple(c.seeds), atol=c.atol, rtol=c.rtol,
                max_mismatch_fraction=c.max_mismatch_fraction,
                timed_check_fraction=c.timed_check_fraction),
            benchmark=wire.BenchmarkWire(
                warmup=b.warmup, warmup_ms=b.warmup_ms, samples=b.samples, reps=b.reps,
                cache=b.cache, flush_mib=b.flush_mib, cuda_graph=b.cuda_graph,
                allow_tf32=b.allow_tf32),
            acceptance=self.acceptance.to_wire(), audit_ops=audit_ops)


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


# --- cost-model expressions: a tiny, safe arithmetic evaluator ------------------------

_BINOPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_FUNCS: dict[str, Any] = {"log2": math.log2, "ceil": math.ceil, "max": max, "min": min}


def _compile_expr(expr: str) -> ast.expr:
    if len(expr) > 500:
        raise ValueError("expression longer than 500 characters")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {expr!r} ({e.msg})") from None
    for node in ast.walk(tree):
        ok = isinstance(node, ast.Expression | ast.BinOp | ast.UnaryOp | ast.Constant | ast.Name
                        | ast.Load | ast.USub | ast.UAdd | ast.Call | ast.operator)
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
            ok = False
        if not ok:
            raise ValueError(f"unsupported element {type(node).__name__} in {expr!r}")
    return tree.body


def eval_expr(expr: str, dims: dict[str, int]) -> float:
    """Evaluate a cost-model expression over dimension values."""

    def ev(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise ValueError(f"unknown dimension {node.id!r} in {expr!r}")
            return float(dims[node.id])
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            return float(_BINOPS[type(node.op)](ev(node.left), ev(node.right)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return float(_FUNCS[node.func.id](*[ev(a) for a in node.args]))
        raise ValueError(f"unsupported element in {expr!r}")

    return ev(_compile_expr(expr))
