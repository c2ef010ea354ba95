"""Where a runner's first Triton launch spends its time, outside any sandbox.

Usage on a CUDA host: ``python3 bench/gpu_where.py OUT.json``. Each case is a fresh
Python process with its own Triton cache folder, timing: ``import torch``, the CUDA
context (first tensor on the GPU), ``import triton``, and the first launch of a small
``@triton.jit`` kernel, split into the C compiler runs (``triton.runtime.build._build``:
Triton's own ``cuda_utils`` helper), the kernel's compilation (``triton.compile``) and
every other subprocess. Cases: ``cold`` (empty cache), ``helpers_only`` (a cache holding
only what a trusted process compiled that is not the kernel), ``warm`` (everything cached).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import json, os, subprocess, sys, time
t = {}; T0 = time.monotonic()
import torch
t["import_torch"] = time.monotonic() - T0
s = time.monotonic(); x = torch.ones(1 << 16, device="cuda"); torch.cuda.synchronize()
t["cuda_context"] = time.monotonic() - s
s = time.monotonic(); import triton, triton.language as tl
t["import_triton"] = time.monotonic() - s
import triton.runtime.build as build, triton.compiler.compiler as cc
spent = {"cc_build": 0.0, "triton_compile": 0.0, "subprocess": 0.0}
calls = []
def wrap(mod, name, key):
    fn = getattr(mod, name)
    def w(*a, **k):
        s = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.monotonic() - s
    setattr(mod, name, w)
wrap(build, "_build", "cc_build")
wrap(cc, "compile", "triton_compile")
_run = subprocess.Popen.__init__
def popen(self, args, *a, **k):
    calls.append(str(args[0] if isinstance(args, (list, tuple)) else args)[:80])
    return _run(self, args, *a, **k)
subprocess.Popen.__init__ = popen
import triton.runtime.jit as jit
if hasattr(jit, "compile"):
    wrap(jit, "compile", "triton_compile")
@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(out_ptr + o, tl.load(x_ptr + o, mask=m) + tl.load(y_ptr + o, mask=m), mask=m)
y = torch.empty_like(x)
s = time.monotonic(); add[(64,)](x, x, y, x.numel(), BLOCK=1024); torch.cuda.synchronize()
t["first_launch"] = time.monotonic() - s
s = time.monotonic(); add[(64,)](x, x, y, x.numel(), BLOCK=1024); torch.cuda.synchronize()
t["second_launch"] = time.monotonic() - s
t.update(spent); t["subprocesses"] = calls; t["total"] = time.monotonic() - T0
print(json.dumps(t))
'''


def child(cache: Path) -> dict[str, object]:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "TRITON_HOME": str(cache.parent)}
    script = cache.parent / "child.py"  # @triton.jit reads its source from a file
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(CHILD)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    out = Path(sys.argv[1])
    root = Path(tempfile.mkdtemp(prefix="kg-where-"))
    res: dict[str, object] = {"triton_cache_entries": {}}
    try:
        cache = root / "a" / "cache"
        res["cold"] = child(cache)
        entries = ({d.name: sorted(f.name for f in d.iterdir()) for d in cache.iterdir()}
                   if cache.is_dir() else {})
        res["triton_cache_entries"] = entries
        res["warm"] = child(cache)
        helpers = root / "b" / "cache"
        helpers.mkdir(parents=True)
        for name, files in entries.items():
            if not any(f.endswith((".cubin", ".ptx", ".ttir")) for f in files):
                shutil.copytree(cache / name, helpers / name)
        res["helpers_only"] = child(helpers)
        res["cold_again"] = child(root / "c" / "cache")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res)[:3000])


if __name__ == "__main__":
    main()
