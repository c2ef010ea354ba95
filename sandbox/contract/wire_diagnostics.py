"""The diagnostics part of the host <-> judge contract (:mod:`sandbox.contract.wire`): what the host
asks of Nsight Compute and compute-sanitizer, and the judge's parsed, capped account of
what they said. :mod:`sandbox.contract.wire` re-exports every name; parse and build through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SanitizeTool = Literal["memcheck", "racecheck"]


# ---- host -> judge -------------------------------------------------------------------
@dataclass(frozen=True)
class SanitizeWire:
    """Run the correctness stage again in a runner under compute-sanitizer (GPU only)."""

    tool: SanitizeTool
    path: str | None = None  # where the host found it (bound read-only at that path)


@dataclass(frozen=True)
class ProfileWire:
    """``profile`` mode: Nsight Compute counters of the candidate at the first tune shape."""

    metrics: tuple[str, ...]
    ncu: str | None = None  # where the host found it (bound read-only at that path)
    warmup_calls: int = 2  # unprofiled first calls (JIT, autotune)
    profiled_calls: int = 2
    max_kernels: int = 64


# ---- judge -> host -------------------------------------------------------------------
# Diagnostics: what the tools (running as the runner: untrusted) said, already parsed and
# capped by the judge. Advice and an extra check, never the only check.
@dataclass(frozen=True)
class KernelRecord:
    id: int
    name: str
    block: str = ""
    grid: str = ""
    metrics: dict[str, float] = field(default_factory=dict)  # requested ncu metrics, base units


@dataclass(frozen=True)
class ProfileRecord:
    tool: Literal["ncu"] = "ncu"
    version: str | None = None
    path: str | None = None
    kernels: tuple[KernelRecord, ...] = ()
    calls: int = 0
    skip: int = 0
    dims: dict[str, int] = field(default_factory=dict)
    wall_s: float | None = None
    unmeasured: str | None = None
    messages: tuple[str, ...] = ()
    dropped: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class FindingRecord:
    kind: Literal["out_of_bounds", "misaligned", "race"]
    space: str | None = None
    access: str | None = None
    size: int | None = None
    kernel: str | None = None
    location: str | None = None
    thread: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    address: str | None = None
    nearest: dict[str, int | str] | None = None  # distance_bytes, side, allocation(_bytes)
    text: str = ""


@dataclass(frozen=True)
class SanitizerRecord:
    tool: SanitizeTool
    path: str | None = None
    ran: bool = False  # the tool ran to its summary line
    wall_s: float | None = None
    findings: tuple[FindingRecord, ...] = ()
    error_count: int | None = None
    more: int = 0
    tool_errors: tuple[str, ...] = ()
    unmeasured: str | None = None


@dataclass(frozen=True)
class DiagnosticsRecord:
    profile: ProfileRecord | None = None  # profile mode
    sanitizer: SanitizerRecord | None = None  # evaluate mode with ``sanitize``
