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
CANDIDATE = '''
import torch
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
void add(torch::Tensor x, torch::Tensor y, torch::Tensor out) {
  auto n = out.numel();
  auto* a = x.data_ptr<at::Half>(); auto* b = y.data_ptr<at::Half>();
  auto* o = out.data_ptr<at::Half>();
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<at::Half>(float(a[i]) + float(b[i]));
}
"""
_mod = load_inline("kg_e2e_inline_add", cpp_sources=[_SRC], functions=["add"])


def launch(x, y, out):
    _mod.add(x, y, out)
'''

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
