"""Generated shape sets (grader/shapes.py): deterministic draws that always hold the edge cases."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from grader.shapes import bound_shape, draw, draw_shapes, named, resolve_shapes
from grader.shapespec import GenerateSpec
from grader.task import TaskSpec
from sandbox.contract.wire import DTYPE_CODES


def gen(**dims: Any) -> GenerateSpec:
    return GenerateSpec.model_validate({"dims": dims, "tune": 3, "hidden": 10})


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % f for f in range(2, math.isqrt(n) + 1))


TWO_DIMS = gen(M={"min": 1, "max": 300}, N={"min": 1, "max": 70000, "align": 128,
                                           "allow_zero": True})


def test_the_same_seed_draws_the_same_sets_and_another_seed_others() -> None:
    a, b, c = draw(TWO_DIMS, 7), draw(TWO_DIMS, 7), draw(TWO_DIMS, 8)
    assert a == b
    assert (a.tune, a.hidden) != (c.tune, c.hidden)


@pytest.mark.parametrize("seed", range(25))
def test_hidden_sets_hold_every_edge_case_in_every_dimension(seed: int) -> None:
    d = draw(TWO_DIMS, seed)
    for name in ("M", "N"):
        values = [h[name] for h in d.hidden]
        assert 1 in values
        assert any(is_prime(v) for v in values)
        assert any(v + 1 == 1 << v.bit_length() for v in values if v > 1)  # 2^k - 1
        assert any(v - 1 > 0 and (v - 1) & (v - 2) == 0 for v in values)  # 2^k + 1
    n_values = [h["N"] for h in d.hidden]
    assert 0 in n_values  # N allows empty tensors
    assert 0 not in [h["M"] for h in d.hidden]  # M does not
    assert any(v % 128 == 127 for v in n_values) and any(v % 128 == 1 and v > 1 for v in n_values)
    assert len(d.hidden) >= 10 and len(d.probes) == len(d.hidden)


@pytest.mark.parametrize("seed", range(25))
def test_one_hidden_shape_is_larger_than_every_tune_shape_in_each_dimension(seed: int) -> None:
    d = draw(TWO_DIMS, seed)
    assert any(all(h[n] > max(t[n] for t in d.tune) for n in ("M", "N")) for h in d.hidden)
    assert d.probes[0] == "larger than every tune shape"


@pytest.mark.parametrize("seed", range(25))
def test_draws_respect_ranges_divisibility_and_tune_alignment(seed: int) -> None:
    g = gen(K={"min": 16, "max": 4096, "multiple_of": 16, "align": 64}, B={"min": 3, "max": 9})
    d = draw(g, seed)
    for shape in d.tune + d.hidden:
        assert 16 <= shape["K"] <= 4096 and shape["K"] % 16 == 0
        assert 3 <= shape["B"] <= 9
    assert all(t["K"] % 64 == 0 for t in d.tune)
    assert any(h["K"] % 64 for h in d.hidden)  # hidden shapes leave the alignment


def test_the_larger_shape_also_exceeds_known_fixed_shapes() -> None:
    d = draw(gen(N={"min": 1, "max": 100000}), 3, seen=[{"N": 65536}])
    assert d.hidden[0]["N"] > 65536


def test_dtype_variables_cycle_through_their_choices() -> None:
    g = GenerateSpec.model_validate({"dims": {"N": {"max": 1000}},
                                     "dtypes": {"T": ["float16", "float32"]}, "tune": 2, "hidden": 8})
    d = draw(g, 1)
    assert {DTYPE_CODES[t["T"]] for t in d.tune} == {"float16", "float32"}
    assert {DTYPE_CODES[h["T"]] for h in d.hidden} == {"float16", "float32"}
    assert named(d.tune[0], {"T"})["T"] in ("float16", "float32")
    assert bound_shape(g) == {"N": 1000, "T": DTYPE_CODES.index("float32")}


@pytest.mark.parametrize("bad,msg", [
    ({"dims": {"N": {"min": 5, "max": 3}}}, "max is below min"),
    ({"dims": {"N": {"min": 1, "max": 10, "multiple_of": 16}}}, "no multiple of 16"),
    ({"dims": {"N": {"max": 10}}, "dtypes": {"N": ["float16"]}}, "both a dimension"),
    ({"dims": {"N": {"max": 10}}, "dtypes": {"T": []}}, "distinct choices"),
    ({"dims": {}}, "at least 1"),
])
def test_bad_generate_sections_are_refused_with_the_reason(bad: dict[str, Any], msg: str) -> None:
    with pytest.raises(ValidationError, match=msg):
        GenerateSpec.model_validate(bad)


def task(dtype: str = "T", **shapes: Any) -> TaskSpec:
    return TaskSpec.model_validate({
        "name": "t", "tensors": [{"name": "x", "role": "input", "dtype": dtype, "shape": ["N"]},
                                 {"name": "y", "role": "output", "dtype": dtype, "shape": ["N"]}],
        "shapes": shapes, "correctness": {"seeds": [1], "atol": 0, "rtol": 0},
        "cost_model": {"bytes": "2*N", "flops": "N"}})


GEN = {"dims": {"N": {"max": 5000, "allow_zero": True}}, "dtypes": {"T": ["float16", "float32"]}}


def test_a_generated_task_resolves_to_drawn_shapes_and_records_them() -> None:
    spec = task(generate=GEN, timed={"N": 4096, "T": "float32"})
    assert spec.shapes.timed == {"N": 4096, "T": DTYPE_CODES.index("float32")}
    resolved, sets = draw_shapes(spec, None)
    assert resolved.shapes.tune and resolved.shapes.hidden and sets is not None
    assert sets.seed == "secret" and sets.timed == {"N": 4096, "T": "float32"}
    assert all(isinstance(b["T"], str) for b in sets.tune + sets.hidden)
    assert resolved.to_wire().tune  # a drawn task crosses to the judge
    again, _ = resolve_shapes(spec, 99)
    assert again == resolve_shapes(spec, 99)[0]
    assert draw_shapes(spec, 99)[1].seed == "leaderboard"  # type: ignore[union-attr]


def test_an_undrawn_generated_task_is_never_sent_to_the_judge() -> None:
    spec = task(generate=GEN)
    with pytest.raises(Exception, match="draw its generated shapes"):
        spec.to_wire()


def test_a_task_with_fixed_shapes_only_is_left_alone() -> None:
    spec = task("float16", tune=[{"N": 64}], hidden=[{"N": 0}])
    assert resolve_shapes(spec, 1) == (spec, None)
    assert draw_shapes(spec, None) == (spec, None)


@pytest.mark.parametrize("dtype,shapes,msg", [
    ("float16", {"tune": []}, "at least one tune shape or a generate section"),
    ("float16", {"tune": [{"N": 0}]}, "tune and timed sizes are >= 1"),
    ("T", {"tune": [{"N": 4, "T": 42}], "generate": GEN}, "is no dtype"),
    ("T", {"tune": [{"N": 4}]}, "is neither a dtype"),
    ("T", {"generate": {"dims": {"M": {"max": 4}}, "dtypes": {"T": ["float16"]}}},
     "generate lacks dimension"),
])
def test_inconsistent_shapes_are_refused(dtype: str, shapes: dict[str, Any], msg: str) -> None:
    with pytest.raises(ValidationError, match=msg):
        task(dtype, **shapes)


def test_a_leaderboard_secret_fixes_the_draw_for_every_submission(tmp_path: Any) -> None:
    from grader.leaderboard.seeds import Secret, task_payload
    from grader.tasks.scaffold import scaffold

    folder = scaffold("demo", tmp_path)
    secret = Secret(b"k" * 32, "test")
    a, b = task_payload(folder, secret), task_payload(folder, secret)
    assert a.shape_seed is not None and a.shape_seed == b.shape_seed
    assert task_payload(folder, Secret(b"j" * 32, "test")).shape_seed != a.shape_seed
    examples = Path(__file__).resolve().parents[2] / "examples"
    assert task_payload(examples / "vector_add_small", secret).shape_seed is None
