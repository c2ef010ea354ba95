"""Per-dtype tolerances: KernelBench's own (1e-4 for float32, 1e-2 for float16/bfloat16), from
the host's task model through the wire to the judge's lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.formats.kernelbench.importer import import_problem
from grader.task import CorrectnessSpec

ROOT = Path(__file__).resolve().parents[2]


def test_a_kernelbench_import_carries_kernelbenchs_tolerances_by_dtype() -> None:
    task = import_problem(ROOT / "examples/field/kernelbench/problems/1_ReLU.py")
    c = task.spec.to_wire().correctness
    assert c.tolerance("float32") == (1e-4, 1e-4)
    assert c.tolerance("float16") == (1e-2, 1e-2) and c.tolerance("bfloat16") == (1e-2, 1e-2)
    assert task.spec.limits.compile_s >= 600  # a load_inline build compiles torch's headers


def test_unknown_dtypes_and_negative_tolerances_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        CorrectnessSpec(seeds=[1], atol=0, rtol=0, by_dtype={"float13": (1e-3, 1e-3)})
    with pytest.raises(ValueError, match=">= 0"):
        CorrectnessSpec(seeds=[1], atol=0, rtol=0, by_dtype={"float32": (-1.0, 1e-3)})


def test_an_input_holding_nan_is_not_mutated_when_its_bytes_are_unchanged() -> None:
    import torch

    from sandbox.problem.tensors import same_bytes

    x = torch.tensor([[1.0, float("nan")], [3.0, 4.0]])
    assert same_bytes(x, x.clone()) and not torch.equal(x, x.clone())
    assert not same_bytes(x, torch.zeros(2, 2)) and same_bytes(torch.tensor(float("nan")), torch.tensor(float("nan")))
