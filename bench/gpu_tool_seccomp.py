"""Which part of the runner's seccomp filter a diagnostics tool needs (Nsight Compute,
compute-sanitizer), measured outside any sandbox.

Usage on a CUDA host, as root: ``python3 bench/gpu_tool_seccomp.py OUT.json``. For each
tool and each variant of ``sandbox.launcher.seccomp``'s filter (none, the whole filter, the whole
filter less one group of rules), a tiny target is started under the tool as uid 65534
(``setpriv``); it installs the variant, launches one CUDA kernel inside
``cudaProfilerStart``/``Stop`` and exits. Recorded per run: exit status, whether the
target finished, whether the tool saw the kernel, the tails of its output and log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = r'''
import sys
from sandbox.launcher import seccomp
drop = [n for n in sys.argv[1].split(",") if n]
if sys.argv[1] != "none":
    arch = seccomp.arch_for()
    table = dict(arch.table)
    for name in drop:
        if name != "all":
            table[name] = 0x3FFFFFF0  # a number no call has: the rule never matches
    import dataclasses
    arch = dataclasses.replace(arch, table=table)
    seccomp.arch_for = lambda machine=None: arch
    seccomp.install()
import torch
x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
torch.cuda.profiler.start(); y = x * 2; torch.cuda.synchronize(); torch.cuda.profiler.stop()
print("TARGET_DONE", float(y.sum()))
'''
VARIANTS = {
    "none": "none",
    "all": "all",
    "less_signals": "kill,tkill,tgkill,rt_sigqueueinfo,rt_tgsigqueueinfo,pidfd_open,pidfd_send_signal",
    "less_memory_peek": "ptrace,process_vm_readv,process_vm_writev,kcmp,pidfd_getfd,process_madvise",
    "less_perf_bpf_uffd_uring": "perf_event_open,bpf,userfaultfd,io_uring_setup,io_uring_enter,io_uring_register",
    "less_clone_rules": "clone,clone3",
    "less_namespaces": "unshare,setns,mount,umount2",
    "less_personality": "personality",
}


def main() -> None:
    out = Path(sys.argv[1])
    work = Path(tempfile.mkdtemp(prefix="kg-tools-"))
    os.chmod(work, 0o777)
    (work / "t.py").write_text(TARGET)
    setpriv = shutil.which("setpriv") or "setpriv"
    tools = {
        "memcheck": [shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer",
                     "--tool", "memcheck", "--log-file", "{log}"],
        "ncu": [shutil.which("ncu") or "/usr/local/cuda/bin/ncu", "--profile-from-start", "off",
                "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                "--log-file", "{log}"],
    }
    rows = []
    for tool, argv in tools.items():
        for name, drop in VARIANTS.items():
            log = work / f"{tool}-{name}.log"
            cmd = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups",
                   *[a.format(log=log) for a in argv], sys.executable, str(work / "t.py"), drop]
            env = {**os.environ, "HOME": str(work), "TMPDIR": str(work), "PYTHONPATH": str(ROOT)}
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=work)
                rc, so, se = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired as e:
                rc, so, se = "timeout", str(e.stdout or "")[-500:], str(e.stderr or "")[-500:]
            text = log.read_text(errors="replace") if log.exists() else ""
            row = {"tool": tool, "variant": name, "rc": rc, "target_done": "TARGET_DONE" in so,
                   "kernel_seen": "gpu__time_duration" in text or "ERROR SUMMARY: 0" in text,
                   "stdout": so[-600:], "stderr": se[-900:], "log": text[-900:]}
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("tool", "variant", "rc", "target_done",
                                                  "kernel_seen")}), flush=True)
    out.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
