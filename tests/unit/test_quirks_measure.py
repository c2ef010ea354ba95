"""The check mode's measurements behind the quirk report (sandbox/judge/task_check.py),
on real tensors: no sandbox, no problem process."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sandbox.judge import task_check
from sandbox.problem.tensors import compare


def tol(atol: float, rtol: float, frac: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(tolerance=lambda dtype: (atol, rtol), max_mismatch_fraction=frac)


def test_a_zero_output_is_constant_and_passes_as_zeros() -> None:
    fig = task_check._output_figures("out0", torch.zeros(3, 5), tol(1e-4, 1e-4))
    assert fig["constant"] and fig["value"] == 0.0 and fig["zeros_pass"]


def test_an_output_below_the_tolerance_lets_zeros_pass_and_a_real_one_does_not() -> None:
    tiny = torch.full((64,), 6e-5) + torch.linspace(0, 1e-6, 64)
    fig = task_check._output_figures("out0", tiny, tol(1e-4, 1e-4))
    assert not fig["constant"] and fig["zeros_pass"] and abs(fig["max_abs"] - 6.1e-5) < 1e-6
    assert not task_check._output_figures("out0", torch.randn(64), tol(1e-4, 1e-4))["zeros_pass"]


def test_nan_is_never_near_zero_nor_constant() -> None:
    fig = task_check._output_figures("out0", torch.tensor([0.0, float("nan")]), tol(1e-4, 1e-4))
    assert not fig["constant"] and not fig["zeros_pass"] and fig["max_abs"] == 0.0


def test_the_chunked_comparison_agrees_with_the_whole_one(monkeypatch: object) -> None:
    task_check.CHUNK = 7  # many chunks of a small tensor
    try:
        e = torch.randn(5, 9, dtype=torch.float64)
        a = e.to(torch.float32)
        a[3, 4] += 1.0
        whole = compare(a.to(torch.float64), e, 1e-4, 1e-4, 0.0)
        part = task_check._chunked(a, e, 1e-4, 1e-4, 0.0, None)
        assert part["ok"] is whole.ok is False
        assert part["mismatch_fraction"] == whole.mismatch_fraction
        assert part["max_abs"] == whole.max_abs and part["max_rel"] == whole.max_rel
        assert part["first_bad"]["index"] == [3, 4] == whole.first_bad["index"]  # type: ignore[index]
    finally:
        task_check.CHUNK = 1 << 22


def test_a_float16_output_is_judged_against_float64_rounded_to_float16() -> None:
    wide = torch.randn(256, dtype=torch.float64) * 100
    got = wide.to(torch.float16)  # the correctly rounded answer: the best float16 can do
    rep = task_check._against_float64({"o": got}, {"o": wide}, tol(1e-2, 1e-2))
    # passes with no mismatch at all; the figures are those against the unrounded values
    assert rep["ok"] and rep["rounded"] == ["float16"] and rep["mismatch_fraction"] == 0.0
    assert rep["max_abs"] > 0.0


def test_a_tolerance_finer_than_one_float16_step_fails() -> None:
    y = torch.randn(1000).half()
    assert task_check._finer_than_dtype(y, 1e-6, 1e-6) > 0.9
    assert task_check._finer_than_dtype(y, 1e-2, 1e-2) == 0.0  # KernelBench's float16 one
    rep = task_check._against_float64({"o": y}, {"o": y.double()}, tol(1e-6, 1e-6))
    assert not rep["ok"] and rep["finer_than_dtype"]["dtype"] == "float16"


def test_plain_values_in_the_argument_template_are_counted() -> None:
    template = {"list": [{"tensor": 0}, {"value": 2.0}, {"tuple": [{"value": 3}, {"dtype": "float16"}]}]}
    assert task_check._plain_values({"template": template, "star": True}) == 3
    assert task_check._plain_values(None) == 0


def test_a_scalar_output_is_not_a_constant_output() -> None:
    # vectorsum's reference returns one number: one value everywhere, trivially
    assert not task_check._output_figures("out0", torch.tensor(3.5), tol(1e-4, 1e-4))["constant"]
