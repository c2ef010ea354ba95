"""A field format that lives only in the tests (tests/formats/solstyle/), registered by one
line: `kgrader task import solstyle` appears, imports its fixture problem (the reference
run in the sandbox on every shape), and the imported task grades an honest and a wrong
solution for real (bubblewrap, torch on the CPU, Triton's interpreter). Nothing in grader/
or sandbox/ names the format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from formats import solstyle

from grader.cli.app import main
from grader.formats import registry

from .conftest import SANDBOX, kgrader

FIXTURE = Path(solstyle.__file__).parent / "fixture"
pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def registered() -> Iterator[None]:
    registry.register(solstyle.FORMAT)  # the one registry line
    yield
    registry.unregister(solstyle.FORMAT.name)


@pytest.fixture(scope="module")
def task(registered: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sol")
    r = CliRunner().invoke(main, ["task", "import", "solstyle", str(FIXTURE), "--out", str(out),
                                  "--policy", "triton-only", *SANDBOX])
    assert r.exit_code == 0, r.output
    folder = out / "sol_vmuladd"
    assert f"-> {folder}" in r.output
    spec = json.loads((folder / "task.json").read_text())
    assert spec["entrypoint"] == "solution" and spec["shapes"]["hidden"] == [{"n": 777}, {"n": 4099}]
    spec["benchmark"] = {"warmup": 1, "samples": 3, "reps": 2}  # the CPU interpreter is slow
    spec["acceptance"] = {"pairs": 6, "min_pairs": 5}
    (folder / "task.json").write_text(json.dumps(spec))
    return folder


def test_the_registered_format_is_one_import_command(registered: None) -> None:
    r = CliRunner().invoke(main, ["task", "import", "--help"])
    assert r.exit_code == 0 and "solstyle" in r.output and "kernelbench" in r.output
    r = CliRunner().invoke(main, ["task", "import", "solstyle", "--help"])
    assert r.exit_code == 0 and "problem.py + sizes.json" in r.output
    assert "--policy" in r.output and "--verify / --no-verify" in r.output


def test_an_unregistered_format_is_refused() -> None:
    p = kgrader("task", "import", "solstyle", FIXTURE, "--out", "/nonexistent", *SANDBOX)
    assert p.returncode == 2 and "No such command 'solstyle'" in p.stderr
    assert "Traceback" not in p.stderr


def test_honest_solution_passes_and_wrong_one_fails(task: Path) -> None:
    cands = FIXTURE / "vmuladd" / "candidates"
    for _ in range(3):  # an honest kernel passes or is retried, never rejected
        p = kgrader("run", task, cands / "good.py", *SANDBOX, "--json")
        r = json.loads(p.stdout)
        if p.returncode != 2:
            break
    assert p.returncode == 0 and r["ok"] is True and r["errors"] == [], r["errors"]
    assert r["correctness"]["checks"] == 3 * 3  # 1 tune + 2 hidden shapes, 3 seeds each
    assert r["timing"]["median_ms"] > 0
    p = kgrader("run", task, cands / "wrong.py", *SANDBOX, "--json")
    r = json.loads(p.stdout)
    assert p.returncode == 1 and r["ok"] is False, p.stdout
    assert r["stage"] == "correctness" and r["errors"][0]["code"] == "wrong_values", r["errors"]
