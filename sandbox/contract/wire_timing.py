"""The judge's timing and acceptance records, part of the host-judge contract
(:mod:`sandbox.contract.wire` re-exports them and parses them as strictly as the rest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class TimingRecord:
    mean: float
    median: float
    p95: float
    std: float
    min: float
    max: float
    cv: float
    n: int
    samples_ms: tuple[float, ...]
    judge_ms: tuple[float, ...]
    flagged_samples: int
    overhead_budget_ms: float
    checked_calls: int
    check_policy: str
    cache: Literal["cold", "hot"]
    flush_bytes: int
    dims: dict[str, int]
    clock: Literal["cuda_event", "perf_counter"]
    mode: Literal["events", "cuda_graph", "perf_counter"]
    device_state: tuple[dict[str, Any], ...] = ()
    device_state_unmeasured: str | None = None
    escape: dict[str, float] = field(default_factory=dict)
    noop_overhead_ms: tuple[float, ...] = ()  # each empty call's round trip less its events
    # the CPU: each timed / empty call's round trip spent waiting for a CPU (judge.cpu_wait)
    wait_ms: tuple[float, ...] = ()
    noop_wait_ms: tuple[float, ...] = ()
    launch_lead_us: float = 0.0  # device time queued ahead of each start event (CUDA)
    # The timed calls the task's protocol asked for (samples x reps): more than ``n`` when
    # the stage's budget would have run out first and the stage ended with what it had.
    requested_calls: int = 0
    # What ended the timed calls: the declared count, the stage's budget, or the task's
    # noise-based stopping rule (BenchmarkWire.stop_noise).
    stopped_by: Literal["count", "budget", "noise"] = "count"


@dataclass(frozen=True)
class PairsRecord:
    t_cur: tuple[float, ...]
    t_cand: tuple[float, ...]


@dataclass(frozen=True)
class AcceptanceRecord:
    deciding: PairsRecord
    replicate: PairsRecord | None = None
    replicate_error: str | None = None
