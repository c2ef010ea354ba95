"""The fixed Nsight Compute metric set and its reading into :class:`KernelCounters`.

Names were checked against Nsight Compute 2025.3 on an H200 (sm_90); every one printed a
value there. Values arrive in base units (``--print-units base``: ns, bytes, %, counts),
already parsed by :mod:`sandbox.tools.counters`. A metric missing from the record (an older
ncu, another architecture) leaves its field ``None`` with the reason, never a guess.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from grader.report.diagnostics_model import KernelCounters, StallReason
from sandbox.contract.wire import KernelRecord

STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"

# Report field -> ncu metric. Duration is in ns in the record.
SCALAR_METRICS: dict[str, str] = {
    "duration_ms": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers_per_thread": "launch__registers_per_thread",
    "shared_mem_static_bytes": "launch__shared_mem_per_block_static",
    "shared_mem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "l1_hit_rate_pct": "l1tex__t_sector_hit_rate.pct",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "bank_conflicts_ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "bank_conflicts_st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "waves_per_sm": "launch__waves_per_multiprocessor",
}
LOCAL_LD = "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"
LOCAL_ST = "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"
# Blocks per SM each resource allows; the smallest names what caps occupancy.
LIMITERS: dict[str, str] = {
    "registers": "launch__occupancy_limit_registers",
    "shared_mem": "launch__occupancy_limit_shared_mem",
    "warps": "launch__occupancy_limit_warps",
    "blocks": "launch__occupancy_limit_blocks",
}
METRICS: tuple[str, ...] = (
    *SCALAR_METRICS.values(), LOCAL_LD, LOCAL_ST, *LIMITERS.values(), "launch__sm_count",
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",
)
_INTS = {"registers_per_thread", "shared_mem_static_bytes", "shared_mem_dynamic_bytes",
         "block_size", "grid_size"}
TOP_STALLS = 3


def _median(rows: Sequence[KernelRecord], metric: str) -> float | None:
    values = [r.metrics[metric] for r in rows if metric in r.metrics]
    return float(statistics.median(values)) if values else None


def counters(rows: Sequence[KernelRecord]) -> KernelCounters:
    """Counters of one kernel: the median of each metric over its profiled launches."""
    c = KernelCounters()
    missing = "not measured: ncu reported no value for {} (metric {})"
    for field, metric in SCALAR_METRICS.items():
        v = _median(rows, metric)
        if v is None:
            c.unmeasured[field] = missing.format(field, metric)
            continue
        if field == "duration_ms":
            v = v / 1e6
        setattr(c, field, round(v) if field in _INTS else v)
    if c.shared_mem_static_bytes is not None and c.shared_mem_dynamic_bytes is not None:
        c.shared_mem_per_block_bytes = c.shared_mem_static_bytes + c.shared_mem_dynamic_bytes
    else:
        c.unmeasured["shared_mem_per_block_bytes"] = "not measured: static or dynamic size missing"
    if c.bank_conflicts_ld is not None and c.bank_conflicts_st is not None:
        c.bank_conflicts = c.bank_conflicts_ld + c.bank_conflicts_st
    else:
        c.unmeasured["bank_conflicts"] = "not measured: ld or st bank conflicts missing"
    threads = (c.block_size or 0) * (c.grid_size or 0)
    if c.bank_conflicts is not None and threads > 0:
        c.bank_conflicts_per_thread = c.bank_conflicts / threads
    else:
        c.unmeasured["bank_conflicts_per_thread"] = "not measured: conflicts or launch size missing"
    ld, st = _median(rows, LOCAL_LD), _median(rows, LOCAL_ST)
    if ld is not None and st is not None:
        c.spill_bytes = ld + st
    else:
        c.unmeasured["spill_bytes"] = "not measured: local-memory load/store bytes missing"
    limits = {name: _median(rows, metric) for name, metric in LIMITERS.items()}
    known = {k: v for k, v in limits.items() if v is not None}
    if known:
        c.occupancy_limiter = min(known, key=lambda k: known[k])
    else:
        c.unmeasured["occupancy_limiter"] = "not measured: no launch__occupancy_limit_* metric"
    c.top_stalls = top_stalls(rows)
    if not c.top_stalls:
        c.unmeasured["top_stalls"] = "not measured: no warp-stall metric (or no stall at all)"
    return c


def top_stalls(rows: Sequence[KernelRecord], n: int = TOP_STALLS) -> list[StallReason]:
    """The ``n`` largest warp-stall reasons; ``selected`` (issuing, not stalling) excluded."""
    names = sorted({m for r in rows for m in r.metrics
                    if m.startswith(STALL_PREFIX) and m.endswith(STALL_SUFFIX)})
    stalls: dict[str, float] = {}
    for metric in names:
        reason = metric[len(STALL_PREFIX):-len(STALL_SUFFIX)]
        v = _median(rows, metric)
        if reason != "selected" and v is not None and v > 0:
            stalls[reason] = v
    total = sum(stalls.values())
    ranked = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return [StallReason(reason=k, cycles_per_issue=v, share_pct=100.0 * v / total) for k, v in ranked]


def group_launches(kernels: Sequence[KernelRecord], calls: int) -> list[tuple[str, list[KernelRecord]]]:
    """Kernels of one call, each with its launches across the profiled calls.

    When every profiled call launched the same kernels in the same order, entry ``i`` holds
    the ``i``-th launch of each call (a candidate launching one kernel twice keeps two
    entries). Otherwise launches are grouped by kernel name, in order of first appearance.
    """
    rows = sorted(kernels, key=lambda k: k.id)
    if calls > 0 and rows and len(rows) % calls == 0:
        per = len(rows) // calls
        names = [r.name for r in rows[:per]]
        if all([r.name for r in rows[i * per:(i + 1) * per]] == names for i in range(calls)):
            return [(names[j], [rows[i * per + j] for i in range(calls)]) for j in range(per)]
    groups: dict[str, list[KernelRecord]] = {}
    for r in rows:
        groups.setdefault(r.name, []).append(r)
    return list(groups.items())
