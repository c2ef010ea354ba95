"""`kgrader --help` and the static scan never import torch or Triton (the host never does;
these are the commands an agent loop runs most, and torch alone is seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from click.testing import CliRunner
from grader.cli.app import main
r = CliRunner()
out = [r.invoke(main, ["--help"]).exit_code,
       r.invoke(main, ["scan", sys.argv[1]]).exit_code,
       r.invoke(main, ["scan", "--help"]).exit_code]
print(json.dumps({"codes": out, "loaded": sorted(m for m in sys.modules
                                                 if m.split(".")[0] in ("torch", "triton"))}))
"""


def test_help_and_scan_import_neither_torch_nor_triton() -> None:
    good = ROOT / "examples" / "vector_add_small" / "candidates" / "good.py"
    out = subprocess.run([sys.executable, "-c", PROBE, str(good)], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["codes"] == [0, 0, 0], got
    assert got["loaded"] == [], got


def test_the_lazy_table_names_exactly_what_each_module_registers() -> None:
    """A command missing from grader.cli.app.LAZY_COMMANDS would be unreachable; a stale name
    would be listed by --help and then not found."""
    import importlib

    import click

    from grader.cli.app import LAZY_COMMANDS

    got: dict[str, str] = {}
    for module in sorted(set(LAZY_COMMANDS.values())):
        group = click.Group()
        importlib.import_module(module).register(group)
        got.update(dict.fromkeys(group.commands, module))
    assert got == LAZY_COMMANDS
    assert not {"run", "schema"} & set(LAZY_COMMANDS), "app.py's own commands are eager"


RUN_PROBE = """
import json, sys
from click.testing import CliRunner
from grader.cli.app import main
r = CliRunner()
code = r.invoke(main, ["run", "--help"]).exit_code
import grader.evaluate  # what run() imports when it runs (grader.records: with --records)
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m.startswith(
    ("grader.cli.", "grader.service", "grader.leaderboard", "grader.agent", "docker",
     "starlette", "uvicorn", "mcp", "structlog", "rich", "grader.records", "filelock")))}))
"""


def test_run_loads_no_other_commands_module() -> None:
    """``kgrader run`` (every cold grade) imports none of the other commands' modules (the
    service, the leaderboard, the agent tools), nor structlog or rich when it writes no
    event and renders nothing (``--json``): all of it came before its sandbox started."""
    out = subprocess.run([sys.executable, "-c", RUN_PROBE], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["code"] == 0, got
    assert set(got["loaded"]) <= {"grader.cli.app", "grader.cli.common", "grader.cli.progress"}, got
