"""Direct checks of the example tasks in ``examples/`` (not of the grader).

Each example ships a reference and five candidates whose fate is fixed: ``good`` and
``slow`` are correct, ``wrong`` is wrong on every shape, ``no_mask`` is right on the tune
shapes but not on a hidden one, ``broken`` fails at import on a known line. These tests
run the candidates in this process under Triton's interpreter (no GPU) and compare with
the reference, so a drifting example is caught before the grader's own tests rely on it.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import traceback
from functools import cache
from pathlib import Path
from types import ModuleType

# Triton reads this when a kernel is decorated: set it before any candidate is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from grader.task import TaskSpec, load_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALL = ["vector_add", "vector_add_small", "softmax", "matmul"]
CPU_FEASIBLE = ["vector_add_small", "softmax", "matmul"]
CANDIDATES = ["good", "wrong", "no_mask", "broken", "slow"]
DEVICE = "cpu" if os.environ["TRITON_INTERPRET"] == "1" else "cuda"

# What ``broken.py`` raises at import, and a fragment of the line it must point at.
BROKEN = {
    "vector_add": (SyntaxError, "-> None\n"),
    "vector_add_small": (NameError, "@trition.jit"),
    "softmax": (NameError, "BLOCK: tl.constexpr"),
    "matmul": (SyntaxError, "acc += tl.dot(a, b\n"),
}
# torch names a correct candidate may use: allocation and views only (the policy denies
# torch compute ops); ``torch.Tensor`` appears in annotations.
TORCH_ALLOWED = {"Tensor", "empty", "empty_like", "float16", "float32"}


@cache
def spec_of(example: str) -> TaskSpec:
    return load_task(EXAMPLES / example)[0]


@cache
def module(example: str, name: str) -> ModuleType:
    folder = EXAMPLES / example
    path = folder / "reference.py" if name == "reference" else folder / "candidates" / f"{name}.py"
    mod_name = f"kgrader_example_{example}_{name}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # inspect.getsource (used by triton.jit) looks here
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[mod_name]
        raise
    return mod


def make_inputs(spec: TaskSpec, dims: dict[str, int], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for t in spec.inputs:
        shape = spec.concrete_shape(t, dims)
        dtype = getattr(torch, t.dtype)
        if t.init.kind == "normal":
            x = torch.randn(shape, generator=gen, dtype=torch.float32) * t.init.std + t.init.mean
        elif t.init.kind == "uniform":
            x = torch.rand(shape, generator=gen, dtype=torch.float32) * (t.init.high - t.init.low) + t.init.low
        else:
            x = torch.randint(int(t.init.low), int(t.init.high), shape, generator=gen)
        tensors.append(x.to(dtype).to(DEVICE).contiguous())
    return tensors


def run(example: str, name: str, dims: dict[str, int], seed: int) -> list[torch.Tensor]:
    """Call ``launch(*inputs, *outputs)`` with outputs poisoned with NaN, as the judge does."""
    spec = spec_of(example)
    inputs = make_inputs(spec, dims, seed)
    outputs = [
        torch.full(spec.concrete_shape(t, dims), float("nan"), dtype=getattr(torch, t.dtype), device=DEVICE)
        for t in spec.outputs
    ]
    ret = getattr(module(example, name), spec.entrypoint)(*inputs, *outputs)
    assert ret is None, f"{example}/{name}: launch must return nothing"
    return outputs


def matches(example: str, name: str, dims: dict[str, int], seed: int) -> bool:
    spec = spec_of(example)
    got = run(example, name, dims, seed)
    want = run(example, "reference", dims, seed)
    tol = spec.correctness
    return all(torch.allclose(g, w, atol=tol.atol, rtol=tol.rtol) for g, w in zip(got, want, strict=True))


def shapes(example: str, kind: str) -> list[dict[str, int]]:
    return list(getattr(spec_of(example).shapes, kind))


# --- task.json ---------------------------------------------------------------------------


@pytest.mark.parametrize("example", ALL)
def test_task_json_validates_and_every_candidate_file_exists(example: str) -> None:
    spec = spec_of(example)
    assert spec.name == example
    assert spec.policy == "triton-only"
    assert spec.shapes.hidden, "every example needs hidden shapes"
    for name in CANDIDATES:
        assert (EXAMPLES / example / "candidates" / f"{name}.py").is_file()


def test_vector_add_keeps_the_classic_configuration() -> None:
    spec = spec_of("vector_add")
    assert [(t.name, t.role, t.dtype, t.shape) for t in spec.tensors] == [
        ("x", "input", "float16", ["M", "N"]),
        ("y", "input", "float16", ["M", "N"]),
        ("out", "output", "float16", ["M", "N"]),
    ]
    assert spec.shapes.tune == [{"M": 4096, "N": 2048}]
    assert spec.correctness.seeds == [17, 29]
    assert (spec.correctness.atol, spec.correctness.rtol) == (0.001, 0.001)
    b = spec.benchmark
    assert (b.warmup, b.samples, b.reps, b.cache) == (10, 25, 5, "cold")
    a = spec.acceptance
    assert (a.min_improvement_fraction, a.min_pairs, a.min_positive_fraction) == (0.01, 5, 0.6)
    assert spec.cost_model is not None
    assert (spec.cost_model.bytes, spec.cost_model.flops) == ("6*M*N", "M*N")
    assert spec.cost_model.evaluate({"M": 4096, "N": 2048}) == (6 * 4096 * 2048, 4096 * 2048)


@pytest.mark.parametrize("example", ["vector_add", "vector_add_small"])
def test_vector_add_hidden_shapes_are_not_block_multiples(example: str) -> None:
    # no_mask drops the last numel % BLOCK elements: it must be exact on tune shapes and
    # leave a tail on every hidden one. Pure arithmetic: the GPU-sized task is checked too.
    block = 1024
    assert all(d["M"] * d["N"] % block == 0 for d in shapes(example, "tune"))
    assert all(d["M"] * d["N"] % block != 0 for d in shapes(example, "hidden"))


# --- candidates, run for real under the interpreter ------------------------------------


@pytest.mark.parametrize("example", CPU_FEASIBLE)
def test_good_matches_reference_on_every_shape_and_seed(example: str) -> None:
    for dims in shapes(example, "tune") + shapes(example, "hidden"):
        for seed in spec_of(example).correctness.seeds:
            assert matches(example, "good", dims, seed), (dims, seed)


@pytest.mark.parametrize("example", CPU_FEASIBLE)
def test_slow_matches_reference_on_every_shape(example: str) -> None:
    seed = spec_of(example).correctness.seeds[0]
    for dims in shapes(example, "tune") + shapes(example, "hidden"):
        assert matches(example, "slow", dims, seed), dims


@pytest.mark.parametrize("example", CPU_FEASIBLE)
def test_wrong_mismatches_on_every_shape(example: str) -> None:
    seed = spec_of(example).correctness.seeds[0]
    for dims in shapes(example, "tune") + shapes(example, "hidden"):
        assert not matches(example, "wrong", dims, seed), dims


@pytest.mark.parametrize("example", CPU_FEASIBLE)
def test_no_mask_passes_tune_shapes_and_fails_every_hidden_shape(example: str) -> None:
    for dims in shapes(example, "tune"):
        for seed in spec_of(example).correctness.seeds:
            assert matches(example, "no_mask", dims, seed), (dims, seed)
    seed = spec_of(example).correctness.seeds[0]
    for dims in shapes(example, "hidden"):
        # Designed to stay in bounds: the tail is left unwritten (NaN poison), no crash.
        out = run(example, "no_mask", dims, seed)
        assert any(o.isnan().any() for o in out), dims
        assert not matches(example, "no_mask", dims, seed), dims


@pytest.mark.parametrize("example", ALL)
def test_broken_fails_at_import_on_the_expected_line(example: str) -> None:
    exc_type, fragment = BROKEN[example]
    path = EXAMPLES / example / "candidates" / "broken.py"
    source = path.read_text(encoding="utf-8")
    expected_line = source[: source.index(fragment)].count("\n") + 1
    with pytest.raises(exc_type) as info:
        module(example, "broken")
    err = info.value
    if isinstance(err, SyntaxError):
        line = err.lineno
    else:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
        line = frames[-1].lineno
    assert line == expected_line


@pytest.mark.parametrize("example", ALL)
@pytest.mark.parametrize("name", ["good", "slow"])
def test_correct_candidates_use_torch_only_for_allocation_and_views(example: str, name: str) -> None:
    tree = ast.parse((EXAMPLES / example / "candidates" / f"{name}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        assert not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            assert node.attr in TORCH_ALLOWED, f"torch.{node.attr} at line {node.lineno}"
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("torch"), f"from {node.module} import ..."
    jitted = [
        f for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and any(ast.unparse(d) == "triton.jit" for d in f.decorator_list)
    ]
    assert jitted, "a correct candidate must launch a @triton.jit kernel"


@pytest.mark.parametrize("example", ALL)
def test_hidden_shapes_include_one_larger_than_tune_in_every_dimension(example: str) -> None:
    # A kernel with a hard-coded grid and no mask writes past its output only when a
    # shape grows; sizes off the usual block multiples catch tails.
    spec = spec_of(example)
    tune = spec.shapes.tune
    larger = [h for h in spec.shapes.hidden
              if all(all(h[d] > t[d] for d in t) for t in tune)]
    assert larger, f"{example}: no hidden shape larger than every tune shape in every dimension"
    assert any(all(v % 16 and v % 128 for v in h.values()) for h in spec.shapes.hidden), (
        f"{example}: no hidden shape off the multiples of 16 and 128")
