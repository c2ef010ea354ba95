"""Quirks of field problems (grader/formats/quirks.py) and how a check that meets a sandbox
limit is explained (grader/tasks/checkrun.py): pure logic, no sandbox."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.backends.base import SandboxOutcome
from grader.cli.tasks import register
from grader.errors import InfrastructureError, UsageError
from grader.formats import quirks
from grader.formats.kernelbench import importer as kernelbench
from grader.limits import Limits
from grader.report.record import ResultProblem
from grader.tasks import checkrun

DATA = Path(__file__).resolve().parents[1] / "data" / "field"
KB = DATA / "kernelbench"


def codes(found: list[quirks.Quirk]) -> list[str]:
    return [q.code for q in found]


@pytest.mark.parametrize(("src", "value"), [
    ("2048 * 2", 4096), ("16 * 1024", 16384), ("1 << 20", 1 << 20), ("4096 // 2 + 1", 2049),
    ("2 ** 12", 4096), ("batch * 4", 64)])
def test_int_expressions_of_literals_and_known_sizes_evaluate(src: str, value: int) -> None:
    assert quirks.int_expr(ast.parse(src, mode="eval").body, {"batch": 16}) == value


@pytest.mark.parametrize("src", ["2.5 * 2", "unknown * 2", "f(3)", "2 ** 1000", "1 << 100",
                                 "4 // 0", "'a' * 3"])
def test_anything_else_is_not_a_size(src: str) -> None:
    assert quirks.int_expr(ast.parse(src, mode="eval").body, {}) is None


def test_a_product_is_a_size_constant_and_hidden_shapes_vary_it() -> None:
    tree = ast.parse((DATA / "kernelbench_big" / "1_Big_ReLU.py").read_text())
    assert kernelbench.sizes(tree) == {"batch_size": (18432, "1024 * 18"), "dim": (4096, None)}
    dims, varied = kernelbench.plan(tree)
    assert dims == {"batch_size": 18432, "dim": 4096} and varied == ["batch_size", "dim"]
    task = kernelbench.import_problem(DATA / "kernelbench_big" / "1_Big_ReLU.py")
    assert task.spec.shapes.hidden, "a product size gets hidden shapes like a literal one"
    assert [(q.code, q.found) for q in task.quirks] == [
        ("size_product", "batch_size = 1024 * 18 (= 18432)")]
    assert "hidden shapes vary it" in task.quirks[0].action


def test_live_dropout_through_get_init_inputs_and_train_mode_batchnorm_are_named() -> None:
    task = kernelbench.import_problem(KB / "10_Linear_BatchNorm_Dropout_Scale.py")
    by = {q.code: q for q in task.quirks}
    assert set(by) == {"size_product", "live_dropout", "train_batchnorm"}
    assert "p=0.2" in by["live_dropout"].found  # dropout_p, bound from get_init_inputs
    assert "batch statistics" in by["train_batchnorm"].action
    assert all(q.source == "static" for q in task.quirks)


@pytest.mark.parametrize("body", [
    "self.d = nn.Dropout(0.0)",
    "self.d = nn.Dropout(0.5); self.eval()",
    "self.d = lambda x: F.dropout(x, 0.3, training=False)",
    "self.d = lambda x: F.alpha_dropout(x, 0.3)",
])
def test_dead_dropout_is_not_a_quirk(body: str) -> None:
    src = f"class Model:\n    def __init__(self):\n        {body}\n"
    assert quirks.kernelbench_model(ast.parse(src)) == []


def test_functional_dropout_defaults_to_training() -> None:
    src = "class Model:\n    def forward(self, x):\n        return F.dropout(x, p=0.1)\n"
    assert codes(quirks.kernelbench_model(ast.parse(src))) == ["live_dropout"]


def shape(**extra: object) -> dict[str, object]:
    return {"kind": "tune", "dims": {"N": 8}, **extra}


def test_measured_figures_become_quirks_with_what_kgrader_does() -> None:
    shapes = [
        shape(outputs=[{"name": "out0", "dtype": "float32", "constant": True, "value": 0.0}]),
        shape(outputs=[{"name": "out0", "dtype": "float16", "constant": False,
                        "zeros_pass": True, "max_abs": 6e-5}]),
        shape(rng_dependent=True, non_tensor_inputs=1,
              float64_skipped="the reference's output depends on torch's random state"),
    ]
    found = quirks.measured(shapes, 1e-4, 1e-4, {"float16": (1e-2, 1e-2)})
    assert codes(found) == ["zero_output", "tolerance_above_magnitude", "half_precision",
                            "rng_dependent", "non_tensor_inputs", "float64_skipped"]
    by = {q.code: q for q in found}
    assert "atol=0.01" in by["tolerance_above_magnitude"].found  # the dtype's own tolerance
    assert "rounded to float16" in by["half_precision"].action
    assert all(q.source == "measured" for q in found)
    const = quirks.measured([shape(outputs=[{"name": "y", "dtype": "float32", "constant": True,
                                             "value": 1.5}])], 1e-4, 1e-4, {})
    assert codes(const) == ["constant_output"]


def test_ordinary_outputs_have_no_quirks() -> None:
    shapes = [shape(outputs=[{"name": "out0", "dtype": "float32", "constant": False,
                              "zeros_pass": False, "max_abs": 3.2}], rng_dependent=False,
                    non_tensor_inputs=0)]
    assert quirks.measured(shapes, 1e-4, 1e-4, {}) == []


def outcome(fired: str | None, stderr: bytes = b"") -> SandboxOutcome:
    return SandboxOutcome(backend="bwrap", exit_code=None, signal=9, wall_s=12.34,
                          stderr=stderr, limit_fired=fired)  # type: ignore[arg-type]


def test_a_memory_limit_is_named_with_its_figure_and_the_judge_s_last_step() -> None:
    log = (b"kgrader-check: problem setup on cpu (memory limit 256 MiB)\n"
           b"noise from the problem\n"
           b"kgrader-check: tune {'batch_size': 18432}: layout\x1b[31m\n")
    err = checkrun.no_record(ResultProblem("result_missing", "none"), outcome("memory_limit", log),
                             Limits(memory_mib=256))
    assert isinstance(err, UsageError) and err.code == "check_limit"
    assert "memory limit 256 MiB" in err.message and "after 12.3 s" in err.message
    assert "tune {'batch_size': 18432}: layout" in err.message
    assert "\x1b" not in err.message  # the sandbox's text, cleaned
    assert err.hint is not None and "--memory-mib" in err.hint


def test_a_wall_limit_is_named_with_how_it_is_made() -> None:
    err = checkrun.no_record(ResultProblem("result_missing", "none"), outcome("timeout"),
                             Limits(compile_s=10, run_s=20))
    assert "wall limit 140 s (3 x compile_s 10 + 4 x run_s 20 + 30)" in str(err)


def test_no_record_without_a_limit_is_the_infrastructure_s_and_says_how_it_ended() -> None:
    err = checkrun.no_record(ResultProblem("result_missing", "none"), outcome(None, b"boom"),
                             Limits())
    assert isinstance(err, InfrastructureError)
    assert "signal 9" in err.message and "boom" in err.message


def cli_import(*args: str) -> tuple[int, dict[str, object]]:
    @click.group()
    def cli() -> None:
        pass

    register(cli)
    result = CliRunner().invoke(cli, ["task", "import", "kernelbench", *args, "--no-verify",
                                      "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_import_json_lists_each_task_with_its_quirks_and_records_the_memory_limit(
        tmp_path: Path) -> None:
    code, doc = cli_import(str(KB), "--out", str(tmp_path), "--memory-mib", "6144")
    assert code == 0 and doc["ok"] is True and doc["failed"] == []
    tasks = {t["task"]: t for t in doc["imported"]}  # type: ignore[union-attr]
    dropout = tasks["kb_10_linear_batchnorm_dropout_scale"]
    assert {q["code"] for q in dropout["quirks"]} >= {"live_dropout", "train_batchnorm"}
    spec = json.loads((Path(dropout["folder"]) / "task.json").read_text())
    assert spec["limits"]["memory_mib"] == 6144  # for every later check and run


def test_import_json_reports_a_problem_it_cannot_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    code, doc = cli_import(str(bad), "--out", str(tmp_path / "out"))
    assert code == 2 and doc["ok"] is False
    assert doc["failed"][0]["error"]["code"] == "bad_task"  # type: ignore[index]


def test_a_quirk_on_every_shape_is_named_once_with_a_count() -> None:
    out = [{"name": "out0", "dtype": "float32", "constant": True, "value": 2.0}]
    found = quirks.measured([shape(outputs=out), shape(outputs=out), shape(outputs=out)],
                            1e-4, 1e-4, {})
    assert codes(found) == ["constant_output"]
    assert found[0].found.endswith("(and on 2 more shape(s))")


def test_task_new_json_is_one_document_naming_the_folder_and_its_files(tmp_path: Path) -> None:
    @click.group()
    def cli() -> None:
        pass

    register(cli)
    result = CliRunner().invoke(cli, ["task", "new", "demo", "--out", str(tmp_path), "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["ok"] is True and doc["task"] == "demo"
    assert all((Path(doc["folder"]) / f).is_file() for f in doc["files"])
    again = CliRunner().invoke(cli, ["task", "new", "demo", "--out", str(tmp_path), "--json"])
    assert again.exit_code == 2 and json.loads(again.stdout)["error"]["code"] == "bad_task"
