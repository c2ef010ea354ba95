"""Triton's compiler registers LLVM's signal handlers in the process on its first pass
manager run. On a GPU that is the candidate's first launch, so the runner's harness primes
the compiler before it takes the dispositions the candidate is checked against
(sandbox.runner.main.prime_compiler); on an H100 every honest Triton kernel failed
``signal_handler`` before. Triton's own compiler runs here for a CUDA target (no device)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, sys
from sandbox.runner.handlers import caught
from sandbox.runner.prepare import prime_compiler
base = caught()
if sys.argv[1] == "prime":
    prime_compiler()
primed = caught()
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1, mask=o < n)

src = triton.compiler.ASTSource(fn=add_one, signature={"x_ptr": "*fp32", "n": "i32"},
                                constexprs={"BLOCK": 128})
triton.compile(src, target=GPUTarget("cuda", 90, 32))
print(json.dumps({"primed": primed & ~base, "compiled": caught() & ~primed}))
"""


def _probe(mode: str, tmp_path: Path) -> dict[str, int]:
    tmp_path.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
           "TRITON_CACHE_DIR": str(tmp_path / "cache"), "TRITON_DEFAULT_FP_FUSION": "1"}
    (tmp_path / "probe.py").write_text(_PROBE, encoding="utf-8")  # @triton.jit reads its source
    p = subprocess.run([sys.executable, "probe.py", mode], capture_output=True, text=True,
                       env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    out: dict[str, int] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def test_a_compile_adds_handlers_unless_the_harness_primed_the_compiler(tmp_path: Path) -> None:
    cold = _probe("cold", tmp_path / "a")
    assert cold["primed"] == 0 and cold["compiled"] != 0  # what failed honest GPU kernels
    primed = _probe("prime", tmp_path / "b")
    assert primed["primed"] == cold["compiled"]  # the same handlers, now the harness's
    assert primed["compiled"] == 0  # the candidate's compile then adds none
