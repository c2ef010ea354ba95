"""A device buffer exported by one uid and written by a runner of another uid, under seccomp.

Needs CUDA and root (to start the child under a runner uid). The same steps ran on an H200
(driver 580, torch 2.11, Triton 3.6): the child, uid 65500 with the seccomp filter on and 18
threads, compiled a Triton kernel (ptxas) and wrote every element of the judge's buffer,
and NVML counted the child as a second compute process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
              pytest.mark.skipif(os.geteuid() != 0, reason="starting a child under uid 65500 needs root")]

_CHILD = """
import json, os, sys, torch
from sandbox.launcher import gpu_share, seccomp
seccomp.install()
import triton, triton.language as tl

@triton.jit
def inc(p, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    tl.store(p + i, tl.load(p + i, mask=m) + 1, mask=m)

buf = gpu_share.import_buffer(int(sys.argv[1]), int(sys.argv[2]))
t = buf.tensor.view(torch.float32)
inc[(triton.cdiv(t.numel(), 1024),)](t, t.numel(), B=1024)
torch.cuda.synchronize()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"uid": os.getuid(), "seccomp": status["Seccomp"].strip()}))
"""


def test_runner_of_another_uid_writes_the_judges_buffer_through_an_exported_fd() -> None:
    from sandbox.launcher import gpu_share

    torch.zeros(1, device="cuda")
    buf = gpu_share.export_buffer(3 << 20)
    try:
        floats = buf.tensor.view(torch.float32)
        floats.zero_()
        torch.cuda.synchronize()
        home = tempfile.mkdtemp(prefix="kgrader-gpu-share-")
        os.chown(home, 65500, 65500)
        os.set_inheritable(buf.fd, True)
        r = subprocess.run([sys.executable, "-c", _CHILD, str(buf.fd), str(buf.nbytes)],
                           pass_fds=(buf.fd,), user=65500, group=65500, extra_groups=[], cwd="/",
                           env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": home,
                                "TRITON_CACHE_DIR": f"{home}/triton"},
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout.strip().splitlines()[-1]) == {"uid": 65500, "seccomp": "2"}
        torch.cuda.synchronize()
        assert floats.sum().item() == floats.numel()
    finally:
        buf.close()
