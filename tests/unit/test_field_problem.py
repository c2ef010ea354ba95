"""The judge's field problems and the runner's returned-output contract, in process.

These exercise sandbox/problem/field.py, sandbox/problem/pytree.py and sandbox/runner/returned.py directly on
the CPU (no sandbox; the in-process problems are what the problem process runs): the end-to-end grading is in tests/e2e/test_field_tasks.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from grader.formats.gpumode import importer as gpumode
from grader.formats.kernelbench import importer as kernelbench
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import TaskWire
from sandbox.judge.outputs import sanity_bound
from sandbox.problem import buffers
from sandbox.problem.base import DpsProblem
from sandbox.problem.field import GpumodeProblem, local_problem
from sandbox.problem.pytree import UnsupportedValue, flatten, rebuild
from sandbox.problem.tensors import layout, poison, total_bytes, view
from sandbox.runner.returned import Returned

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "field"


def kb_task(name: str) -> tuple[TaskWire, str]:
    t = kernelbench.import_problem(EXAMPLES / "kernelbench" / "problems" / name)
    return t.spec.to_wire(), t.reference


def gm_task(name: str) -> tuple[TaskWire, str]:
    t = gpumode.import_problem(EXAMPLES / "gpumode" / name)
    return t.spec.to_wire(), t.reference


def test_argument_structures_cross_as_json_templates_with_tensor_holes() -> None:
    a, b = torch.ones(2), torch.zeros(3)
    data = (a, {"w": b, "cfg": [1, 2.5, "x", None, True, torch.float16]}, float("nan"))
    template, tensors = flatten(data)
    assert tensors == [a, b]
    back = rebuild(template, [a + 1, b + 1])
    assert back[0].tolist() == [2, 2] and back[1]["w"].tolist() == [1, 1, 1]
    assert back[1]["cfg"] == [1, 2.5, "x", None, True, torch.float16] and back[2] != back[2]
    with pytest.raises(UnsupportedValue, match="object"):
        flatten((object(),))
    with pytest.raises(UnsupportedValue, match="non-string keys"):
        flatten({1: a})


def test_a_kernelbench_problem_lays_out_generator_tensors_and_matches_its_model() -> None:
    task, ref = kb_task("5_Linear_GELU.py")
    problem = local_problem(task, ref, "cpu", random.Random(3).getrandbits(31))
    slots = problem.layout(task.tune[0])
    assert [(s.name, s.role, s.shape) for s in slots] == [("in0", "input", (32, 256)),
                                                          ("out0", "output", (32, 128))]
    x1, x2, x3 = (problem.inputs(slots, s)["in0"] for s in (5, 5, 6))
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)
    out = problem.reference(slots, {"in0": x1})["out0"]
    setup = problem.runner_setup()
    assert setup["contract"] == "module" and rebuild(setup["init"], []) == [256, 128]
    torch.manual_seed(setup["init_seed"])  # the runner's way: the same seed, the same weights
    model = torch.nn.Linear(256, 128)
    assert torch.allclose(out, torch.nn.functional.gelu(model(x1)), atol=1e-6)
    hidden = problem.layout(task.hidden[0])
    assert hidden[0].shape == (33, 256) and problem.call_slots(hidden) == hidden[:1]
    assert problem.call_data(hidden)["star"] is True


def test_init_inputs_that_depend_on_a_varied_constant_are_the_tasks_fault() -> None:
    task, ref = kb_task("4_LayerNorm.py")
    problem = local_problem(task, ref, "cpu", random.Random(1).getrandbits(31))
    with pytest.raises(StageFailure) as e:
        problem.layout({"batch_size": 64, "hidden": 1000})
    assert e.value.error.origin == "infrastructure" and "get_init_inputs depends" in e.value.error.message


def test_a_gpumode_problem_exempts_output_buffers_and_runs_its_checker() -> None:
    task, ref = gm_task("linear")
    problem = local_problem(task, ref, "cpu", random.Random(2).getrandbits(31))
    slots = problem.layout(task.tune[0])
    assert [s.name for s in slots] == ["in0", "in1", "in2", "in3", "out0"]
    assert problem.scratch == {"in3"}
    inputs = problem.inputs(slots, 7)
    expected = problem.reference(slots, inputs)
    assert problem.verify(slots, inputs, expected) is None
    wrong = {"out0": expected["out0"] + 1}
    assert "mismatched" in (problem.verify(slots, inputs, wrong) or "")
    assert problem.call_data(slots)["star"] is False


def test_a_reference_file_without_its_names_is_the_tasks_fault() -> None:
    task, _ = gm_task("vectorsum")
    with pytest.raises(StageFailure, match="defines no callable 'check_implementation'") as e:
        local_problem(task, "def ref_kernel(d):\n    return d\ndef generate_input(size, seed):\n"
                     "    return None\n", "cpu", random.Random(0).getrandbits(31))
    assert e.value.error.origin == "infrastructure"


def test_a_generator_whose_structure_changes_with_the_seed_is_refused() -> None:
    task, _ = gm_task("vectorsum")
    ref = ("import torch\ndef ref_kernel(d):\n    return d[0].sum()\n"
           "def generate_input(size, seed):\n"
           "    return (torch.ones(size), seed % 2)\n"
           "def check_implementation(data, output):\n    return True, ''\n")
    problem = local_problem(task, ref, "cpu", random.Random(4).getrandbits(31))
    slots = problem.layout(task.tune[0])
    with pytest.raises(StageFailure, match="another structure"):
        for seed in range(4):
            problem.inputs(slots, seed)


def test_dtype_variables_and_empty_tensors_lay_out() -> None:
    from grader.task import TaskSpec

    spec = TaskSpec.model_validate({
        "name": "t", "tensors": [{"name": "x", "role": "input", "dtype": "T", "shape": ["N"]},
                                 {"name": "y", "role": "output", "dtype": "T", "shape": ["N"]}],
        "shapes": {"tune": [{"N": 5, "T": "bfloat16"}], "hidden": [{"N": 0, "T": "float32"}],
                   "generate": {"dims": {"N": {"max": 9}}, "dtypes": {"T": ["bfloat16", "float32"]}}},
        "correctness": {"seeds": [1], "atol": 0, "rtol": 0}})
    task = spec.to_wire()
    problem = DpsProblem(task, "def launch(x, y):\n    y.copy_(x)\n", "cpu")
    slots = problem.layout(task.tune[0])
    assert [s.dtype for s in slots] == ["bfloat16", "bfloat16"]
    empty = layout(task.tensors, task.hidden[0])
    base = torch.zeros(total_bytes(empty), dtype=torch.uint8)
    assert view(base, empty[0]).shape == (0,) and empty[0].dtype == "float32"
    out = problem.reference(empty, problem.inputs(empty, 1))
    assert out["y"].shape == (0,)


def returned_after(value: object) -> Returned:
    r = Returned({"contract": "gpumode"}, "cpu")
    call = r.bind(lambda data: value, {"template": {"list": []}, "star": False}, [])
    call()
    return r


def test_collect_copies_plain_returned_tensors_into_the_output_slots() -> None:
    out = torch.full((2, 3), float("nan"))
    assert returned_after(torch.ones(2, 3)).collect([out]) is None
    assert torch.equal(out, torch.ones(2, 3))


@pytest.mark.parametrize("value,needle", [
    ((torch.ones(2, 3), torch.ones(2, 3)), "returned 2 tensor(s); the task expects 1"),
    (torch.ones(3, 2), "is (3, 2) float32; the reference's is (2, 3) float32"),
    (torch.ones(2, 3, dtype=torch.float64), "float64"),
    (None, "is a NoneType"),
    (torch.nn.Parameter(torch.ones(2, 3)), "not a plain torch.Tensor"),
])
def test_collect_refuses_the_wrong_count_shape_dtype_or_kind(value: object, needle: str) -> None:
    reply = returned_after(value).collect([torch.empty(2, 3)])
    assert reply is not None and reply["error"]["code"] == "output_shape_mismatch"
    assert needle in reply["error"]["message"]


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def test_collect_refuses_while_a_torch_mode_is_left_active() -> None:
    r = returned_after(torch.ones(2, 3))
    out = torch.empty(2, 3)
    mode = PassThrough()
    mode.__enter__()
    try:
        reply = r.collect([out])
    finally:
        mode.__exit__(None, None, None)
    assert reply is not None and reply["error"]["code"] == "mode_left_active"


# ---- the judge's side of the problem process: what it believes of the layout -----------
def test_the_judge_refuses_a_layout_the_problem_process_should_not_have_sent() -> None:
    from sandbox.problem.host import _tensor_wires

    good = [{"name": "in0", "role": "input", "dtype": "float32", "shape": [4, 8]},
            {"name": "out0", "role": "output", "dtype": "float16", "shape": [4]}]
    wires = _tensor_wires(good)
    assert [(w.name, w.role, w.dtype, w.shape) for w in wires] == [
        ("in0", "input", "float32", (4, 8)), ("out0", "output", "float16", (4,))]
    bad = [
        ("not a list", "tensors"),
        ([], "tensors"),
        ([{**good[0], "name": "../x"}, good[1]], "tensor name"),
        ([{**good[0], "dtype": "complex64"}, good[1]], "dtype"),
        ([{**good[0], "role": "scratch"}, good[1]], "role"),
        ([{**good[0], "shape": [4, -1]}, good[1]], "shape"),
        ([{**good[0], "shape": [4, True]}, good[1]], "shape"),
        ([{**good[0], "shape": [1 << 20, 1 << 20]}, good[1]], "elements"),
        ([good[0], {**good[1], "name": "in0"}], "two tensors of one name"),
        ([good[0]], "no output"),
    ]
    for raw, why in bad:
        with pytest.raises(StageFailure, match=why) as e:
            _tensor_wires(raw)
        assert (e.value.error.code, e.value.error.origin) == ("reference_failed", "infrastructure")


# ---- output buffers by behaviour (sandbox/problem/buffers.py) ------------------------------------

def _classify(fn: Callable[..., Any], tensors: list[torch.Tensor],
              guessed: frozenset[int] = frozenset()) -> tuple[str, ...]:
    return buffers.classify(tensors, lambda ts: fn(*ts), set(guessed)).how


def test_a_buffer_the_reference_writes_is_writable_whatever_made_it() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    c = torch.empty(4, 4).contiguous()

    def ref(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        c[...] = a + b
        return c
    assert _classify(ref, [a, b, c]) == (buffers.READ, buffers.READ, buffers.WRITTEN)


def test_inputs_made_by_empty_then_filled_in_place_are_read_only() -> None:
    a, b = torch.empty(3, 5).uniform_(), torch.empty(5, 2).uniform_()
    assert _classify(lambda x, y: x @ y, [a, b]) == (buffers.READ, buffers.READ)


def test_a_handed_buffer_the_reference_never_reads_is_writable() -> None:
    x, out = torch.randn(64), torch.empty(64)
    how = _classify(lambda v, o: torch.cumsum(v.double(), 0), [x, out])
    assert how == (buffers.READ, buffers.UNREAD)


def test_integer_and_nan_holding_inputs_are_still_read_only() -> None:
    """NaN in an input is not a write (bytes are compared), and an index tensor whose
    perturbation makes the reference raise is read."""
    x = torch.tensor([1.0, float("nan"), 3.0])
    idx = torch.tensor([2, 0, 1])
    how = _classify(lambda v, i: v[i] * 2, [x, idx])
    assert how == (buffers.READ, buffers.READ)
    table = torch.arange(3.0)
    assert _classify(lambda t, i: t[i], [table, torch.tensor([0, 1, 2])])[1] == buffers.READ


def test_a_nondeterministic_reference_falls_back_to_the_syntactic_guess() -> None:
    x, out = torch.randn(8), torch.empty(8)
    how = _classify(lambda v, o: v + torch.rand(8), [x, out], guessed=frozenset({1}))
    assert how == (buffers.INPUT_GUESSED, buffers.GUESSED)


def test_a_gpumode_problem_reports_how_it_classified_each_generated_tensor() -> None:
    for name, scratch, note in (("vectoradd_out", {"in2"}, "in2: " + buffers.WRITTEN),
                                ("prefixsum", {"in1"}, "in1: " + buffers.UNREAD),
                                ("histogram", {"in1"}, "in1: " + buffers.WRITTEN),
                                ("matmul", set(), "in1: " + buffers.READ)):
        task, ref = gm_task(name)
        problem = local_problem(task, ref, "cpu", random.Random(3).getrandbits(31))
        problem.layout(task.tune[0])
        assert isinstance(problem, GpumodeProblem) and problem.scratch == scratch, name
        assert any(note in n for n in problem.notes), name


def test_a_generator_that_needs_cuda_on_the_cpu_names_the_device_and_the_hint() -> None:
    task, _ = gm_task("vectoradd_out")
    ref = ("import torch\ndef ref_kernel(d):\n    return d[0]\n"
           "def generate_input(size, seed):\n    g = torch.Generator(device='cuda')\n"
           "    return (torch.randn(size, generator=g, device='cuda'),)\n"
           "def check_implementation(d, o):\n    return True, ''\n")
    problem = local_problem(task, ref, "cpu", 1)
    if torch.cuda.is_available():  # pragma: no cover - a GPU host runs it as it is
        pytest.skip("CUDA is available here")
    with pytest.raises(StageFailure) as e:
        problem.layout(task.tune[0])
    err = e.value.error
    assert (err.code, err.origin) == ("needs_cuda", "infrastructure")
    assert "--device cuda" in err.message and "runs on the CPU" in err.message


def test_returned_float_outputs_of_another_dtype_are_cast_only_when_the_checker_decides() -> None:
    out = [torch.full((4,), float("nan"), dtype=torch.float64)]
    for cast, ok in ((True, True), (False, False)):
        r = Returned({"contract": "gpumode", "cast_floats": cast}, "cpu")
        r.last = [torch.arange(4, dtype=torch.float32)]
        reply = r.collect(out)
        assert (reply is None) is ok
        if ok:
            assert out[0].tolist() == [0.0, 1.0, 2.0, 3.0]
        else:
            assert reply is not None and reply["error"]["code"] == "output_shape_mismatch"
    r = Returned({"contract": "gpumode", "cast_floats": True}, "cpu")
    r.last = [torch.arange(4, dtype=torch.int64)]  # never float <-> integer
    assert r.collect(out) is not None


def test_the_sanity_bound_fails_untouched_and_nan_outputs_and_passes_the_rest() -> None:
    """Where check_implementation decides, kgrader keeps only this bound (judge side)."""
    task, _ = gm_task("prefixsum")
    ev: Any = SimpleNamespace(task=task, _track=lambda *a: None)
    exp = {"out0": torch.arange(6, dtype=torch.float64)}

    def bound(got: torch.Tensor) -> str | None:
        try:
            sanity_bound(ev, {"out0": got}, exp, "correctness", {"dims": {"size": 6}})
        except StageFailure as e:
            return e.error.code
        return None
    poisoned = torch.empty(6, dtype=torch.float64)
    poison(poisoned)
    assert bound(poisoned) == "output_untouched"
    assert bound(torch.tensor([0, 1, float("nan"), 3, 4, 5], dtype=torch.float64)) == "wrong_values"
    assert bound(exp["out0"] + 0.5) is None  # values are the checker's to judge
    ints = torch.empty(4, dtype=torch.int32)
    poison(ints)
    with pytest.raises(StageFailure, match="left unwritten"):
        sanity_bound(ev, {"h": ints}, {"h": torch.zeros(4, dtype=torch.int32)}, "correctness", {})
