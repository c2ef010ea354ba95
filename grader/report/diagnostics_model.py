"""Shapes of the diagnostics the report and the agent tool show (:class:`Diagnostics`).

What the judge records is the wire contract's :class:`sandbox.contract.wire.DiagnosticsRecord`
(parsed strictly with the rest of the record); :mod:`grader.diagnostics.run` turns it
into these models.

Every number that could not be measured is ``None`` with the reason in ``unmeasured``;
nothing is estimated. Counters are advice about the candidate's own kernels, never part of
a verdict (they come from a tool running inside the candidate's process).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.contract import wire

_NAME = 300


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- what the report and the agent tool show ----------------------------------------


class StallReason(_Strict):
    reason: str = Field(description="ncu's stall name, e.g. long_scoreboard.")
    cycles_per_issue: float = Field(description="Average warps stalled for it per issued instruction.")
    share_pct: float = Field(description="Its share of all stall reasons, percent.")


class KernelCounters(_Strict):
    """One kernel's counters (median over the profiled launches)."""

    duration_ms: float | None = None
    sm_throughput_pct: float | None = Field(None, description="SM throughput, % of peak.")
    dram_throughput_pct: float | None = Field(None, description="DRAM throughput, % of peak.")
    memory_throughput_pct: float | None = Field(None, description="Busiest memory unit, % of peak.")
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str | None = Field(None, description="registers, shared_mem, warps or blocks.")
    registers_per_thread: int | None = None
    shared_mem_per_block_bytes: int | None = Field(None, description="Static + dynamic.")
    shared_mem_static_bytes: int | None = None
    shared_mem_dynamic_bytes: int | None = None
    spill_bytes: float | None = Field(None, description="Local-memory bytes loaded + stored.")
    l1_hit_rate_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    bank_conflicts: float | None = Field(None, description="Shared-memory bank conflicts, ld + st.")
    bank_conflicts_per_thread: float | None = Field(None, description="bank_conflicts / launched threads.")
    bank_conflicts_ld: float | None = None
    bank_conflicts_st: float | None = None
    block_size: int | None = None
    grid_size: int | None = None
    waves_per_sm: float | None = None
    top_stalls: list[StallReason] = Field(default_factory=list)
    unmeasured: dict[str, str] = Field(default_factory=dict)


class KernelDiagnostics(_Strict):
    name: str = Field(description="The kernel's name as the compiler emitted it.")
    launches: int = Field(description="Profiled launches the medians are taken over.")
    block: str = ""
    grid: str = ""
    counters: KernelCounters
    advice: list[str] = Field(default_factory=list, max_length=5)


class SanitizerFinding(_Strict):
    """One compute-sanitizer error, as the judge parsed it from the tool's log."""

    kind: Literal["out_of_bounds", "misaligned", "race"]
    space: str | None = Field(None, max_length=20, description="global, shared, local, generic.")
    access: str | None = Field(None, max_length=40, description="read, write, atomic (race: a/b).")
    size: int | None = Field(None, description="Bytes of the access.")
    kernel: str | None = Field(None, max_length=_NAME)
    location: str | None = Field(None, max_length=200)
    thread: list[int] | None = Field(None, max_length=3)
    block: list[int] | None = Field(None, max_length=3)
    address: str | None = Field(None, max_length=20)
    nearest: dict[str, Any] | None = Field(None, description="The nearest allocation: "
                                           "distance_bytes, side, allocation, allocation_bytes.")
    text: str = Field("", max_length=200)


class SanitizerResult(_Strict):
    tool: Literal["memcheck", "racecheck"]
    ran: bool = Field(description="The tool ran to its summary line.")
    overhead_s: float | None = Field(None, description="Wall seconds of the sanitized correctness run.")
    error_count: int | None = None
    findings: list[SanitizerFinding] = Field(default_factory=list, max_length=20)
    unmeasured: str | None = None


class Diagnostics(_Strict):
    """Counters, advice and memory-checker results of one candidate."""

    tool: str | None = Field(None, description="Profiler and version.")
    dims: dict[str, int] = Field(default_factory=dict, description="The profiled shape.")
    profiled_calls: int = 0
    kernels: list[KernelDiagnostics] = Field(default_factory=list)
    advice: list[str] = Field(default_factory=list, description="All kernels' advice, 'kernel: sentence'.")
    roofline_fraction: float | None = Field(None, description="Launch-level roofline fraction used.")
    bound: Literal["memory", "compute"] | None = None
    profile_overhead_s: float | None = Field(None, description="Wall seconds of the profile run.")
    sanitizer: SanitizerResult | None = None
    notes: list[str] = Field(default_factory=list)
    unmeasured: dict[str, str] = Field(default_factory=dict)


def record_problem(raw: wire.DiagnosticsRecord) -> str | None:
    """Why an authenticated record's diagnostics break their caps (the judge's parsers keep
    to them; a record that does not is refused whole, as for every other cap), or ``None``."""
    p, s = raw.profile, raw.sanitizer
    if p is not None and (len(p.kernels) > 256 or len(p.messages) > 40 or any(
            len(k.name) > 300 or len(k.metrics) > 200 for k in p.kernels)):
        return "diagnostics.profile exceeds its caps (256 kernels, 40 messages)"
    if s is not None:
        if len(s.findings) > 20 or len(s.tool_errors) > 5:
            return "diagnostics.sanitizer exceeds its caps (20 findings, 5 tool errors)"
        try:
            sanitizer_result(s)
        except ValidationError as e:
            return f"diagnostics.sanitizer has {e.error_count()} invalid field(s)"
    return None


def sanitizer_result(raw: wire.SanitizerRecord) -> SanitizerResult:
    return SanitizerResult(tool=raw.tool, ran=raw.ran, overhead_s=raw.wall_s,
                           error_count=raw.error_count,
                           findings=[SanitizerFinding.model_validate(dataclasses.asdict(f))
                                     for f in raw.findings],
                           unmeasured=raw.unmeasured)
