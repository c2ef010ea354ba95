"""Finding Nsight Compute and compute-sanitizer on the host, and making them visible in the
bwrap sandbox.

The judge looks for the tools itself (inside the sandbox: ``sandbox.tools.profiling.find_tool``);
the host's part is to pass where it found them and, for the bwrap backend, to bind that
folder read-only. Folders under ``/usr`` and ``/opt/nvidia`` are already bound for a GPU
run; any other one is added to ``KGRADER_BWRAP_RO`` (read by
``grader.backends.bwrap._python_roots``), the backend's documented list of extra read-only
binds. The docker backend sees what its image holds.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path
from typing import Literal

from grader.errors import UsageError
from grader.logs import get_logger
from sandbox.contract import wire

log = get_logger("kgrader.diagnostics")

ToolName = Literal["ncu", "compute-sanitizer"]
_ALREADY_BOUND = ("/usr/", "/opt/nvidia/", "/opt/rocm/")
_KNOWN: dict[str, tuple[str, ...]] = {
    "ncu": ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"),
    "compute-sanitizer": ("/usr/local/cuda/bin/compute-sanitizer",
                          "/usr/local/cuda-*/bin/compute-sanitizer",
                          "/usr/local/cuda/compute-sanitizer/compute-sanitizer"),
}


def find_host_tool(name: ToolName) -> Path | None:
    """The tool on this host: PATH, ``$CUDA_HOME/bin``, then known install folders (newest)."""
    found = shutil.which(name)
    if found:
        return Path(found).resolve()
    cands: list[str] = []
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", name))
    for pattern in _KNOWN[name]:
        cands += sorted(glob.glob(pattern), reverse=True)
    for c in cands:
        p = Path(c)
        if p.is_file() and os.access(p, os.X_OK):
            return p.resolve()
    return None


def tool_root(path: Path) -> Path:
    """The folder to bind for ``path``: ncu and compute-sanitizer load libraries from
    siblings of their own folder (``target/``, ``host/``), so bind the install root."""
    parent = path.parent
    if parent.name == "bin":
        return parent.parent
    return parent


def make_visible(path: Path) -> None:
    """Bind the tool's install folder read-only in later bwrap sandboxes of this process.

    Idempotent; a folder the GPU sandbox already binds (``/usr``, ``/opt/nvidia``) is left
    alone. The variable only ever grows by read-only tool folders.
    """
    root = str(tool_root(path))
    if any((root + "/").startswith(p) for p in _ALREADY_BOUND):
        return
    current = [p for p in os.environ.get("KGRADER_BWRAP_RO", "").split(":") if p]
    if root not in current:
        os.environ["KGRADER_BWRAP_RO"] = ":".join([*current, root])
        log.info("tool_bound_read_only", folder=root)


def tool_hint(name: ToolName) -> str | None:
    """Where the host has ``name`` (made visible to bwrap), as a string for the secret."""
    path = find_host_tool(name)
    if path is None:
        return None
    make_visible(path)
    return str(path)


def sanitize_request(requested: str | None, task_option: str) -> wire.SanitizeWire | None:
    """The judge's ``sanitize`` request (tool and where the host found it), or ``None``.

    ``requested`` overrides the task's option: ``None`` keeps it, ``"default"`` (the CLI's
    ``--sanitize``, the leaderboard's re-run) means the task's tool or else memcheck,
    ``"none"`` turns the check off. Device and availability are the judge's to judge: it
    records why the check did not run (``unmeasured``) and warns.
    """
    tool = requested if requested is not None else task_option
    if tool == "default":
        tool = task_option if task_option != "none" else "memcheck"
    if tool in (None, "", "none"):
        return None
    if tool in ("memcheck", "racecheck"):
        return wire.SanitizeWire(tool="memcheck" if tool == "memcheck" else "racecheck",
                                 path=tool_hint("compute-sanitizer"))
    raise UsageError(f"unknown sanitizer tool {tool!r} (memcheck, racecheck or none)")
