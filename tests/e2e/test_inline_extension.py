"""A C++ extension built with torch's ``load_inline`` inside the sandbox, by a runner that
has a uid of its own: the compiler and every folder on its path must be reachable.

Found on an H200 and reproduced here: bwrap created ``/etc`` as 0700, so a runner could
not resolve ``c++ -> /etc/alternatives/c++`` ("c++: Permission denied").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.evaluate import EvalRequest, evaluate

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_ONLY = str(ROOT / "tests" / "policies" / "runtime-only.toml")
# The one inline C++ candidate (also bench/speed.py's inline row).
CANDIDATE = (ROOT / "bench" / "candidates" / "inline_add_cpp.py").read_text()

pytestmark = [pytest.mark.bwrap, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("c++") is None or shutil.which("ninja") is None,
                                 reason="needs a C++ compiler and ninja (scripts/setup.sh --dev)")]


def test_inline_cpp_extension_builds_and_passes_in_the_sandbox(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(ROOT / "examples" / "vector_add_small", task,
                    ignore=shutil.ignore_patterns("candidates"))
    spec = json.loads((task / "task.json").read_text())
    spec["policy"] = "default"  # a native extension: not a kernel-only task
    spec["limits"] = {**spec.get("limits", {}), "compile_s": 600}
    (task / "task.json").write_text(json.dumps(spec))
    cand = tmp_path / "inline_add.py"
    cand.write_text(CANDIDATE)
    report = evaluate(EvalRequest.from_paths(task, cand, backend="bwrap", device="cpu",
                                             policy=RUNTIME_ONLY,
                                             stages=("compile", "correctness")))
    assert report.ok, report.model_dump_json(indent=1)[:3000]
