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
