"""grader/diagnostics: counters -> per-kernel fields -> advice, on recorded H200 captures.

The captures in ``tests/data/ncu`` are kgrader's own profile runs of the
``examples/diagnostics`` candidates on an H200; the expected advice follows from what each
candidate does wrong (or right).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.diagnostics.advice import AdviceTableError, advise, fired_rules, load_table
from grader.diagnostics.ncu import METRICS, counters, group_launches
from grader.diagnostics.records import build_diagnostics
from grader.measure.profile import analyze, with_counters
from grader.report.diagnostics_model import KernelCounters, StallReason
from grader.task import load_task
from sandbox.contract.wire import DiagnosticsRecord, KernelRecord, ProfileRecord, SanitizerRecord
from sandbox.tools.counters import parse_ncu_log

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ncu"
PEAKS = {"bandwidth_gbps": 4300.0, "tflops": 790.0, "matmul_tflops": {"float32": 50.0}}
SCALE, TRANSPOSE = ROOT / "examples/diagnostics/scale", ROOT / "examples/diagnostics/transpose"


def _raw(name: str, dims: dict[str, int]) -> DiagnosticsRecord:
    parsed = parse_ncu_log((DATA / name).read_text(), list(METRICS))
    return DiagnosticsRecord(profile=ProfileRecord(
        kernels=tuple(KernelRecord(**k) for k in parsed["kernels"]), calls=2, skip=2, dims=dims,
        wall_s=10.0))


def _diag(name: str, task: Path, dims: dict[str, int], peaks: dict | None = PEAKS):  # type: ignore[no-untyped-def,type-arg]
    return build_diagnostics(_raw(name, dims), spec=load_task(task)[0], peaks=peaks)


def test_counters_of_a_real_capture_fill_every_field() -> None:
    d = _diag("h200_scale_good.csv", SCALE, {"N": 1 << 24})
    [k] = d.kernels  # two profiled calls of one kernel: one entry, two launches
    assert k.name == "scale_kernel" and k.launches == 2
    c = k.counters
    assert c.unmeasured == {}
    assert c.duration_ms == pytest.approx(0.0324, rel=0.05)
    assert c.registers_per_thread == 30 and c.shared_mem_per_block_bytes == 0 and c.spill_bytes == 0
    assert c.theoretical_occupancy_pct == 100 and 70 < c.achieved_occupancy_pct < 85  # type: ignore[operator]
    assert c.top_stalls[0].reason == "long_scoreboard"
    assert sum(s.share_pct for s in c.top_stalls) < 100


def test_a_kernel_near_its_roofline_is_told_so_instead_of_generic_advice() -> None:
    d = _diag("h200_scale_good.csv", SCALE, {"N": 1 << 24})
    assert d.bound == "memory" and d.roofline_fraction is not None and d.roofline_fraction > 0.9
    [sentence] = d.kernels[0].advice
    assert sentence.startswith("this kernel already runs at 96% of the memory-bound roofline")
    assert d.advice == [f"scale_kernel: {sentence}"]


def test_starved_kernel_is_told_to_launch_more_blocks() -> None:
    d = _diag("h200_scale_low_occupancy.csv", SCALE, {"N": 1 << 24})
    advice = d.kernels[0].advice
    assert advice[0] == ("only 2% of the GPU's warp slots are busy: parallelism is too low; try more "
                         "blocks (smaller BLOCK) or less shared memory/registers per block")
    assert any("bandwidth is poorly used (2% of peak" in a for a in advice)
    assert any("the grid of 8 blocks fills only" in a for a in advice)


def test_spilling_kernel_hears_about_registers_first() -> None:
    d = _diag("h200_scale_huge_block.csv", SCALE, {"N": 1 << 24})
    advice = d.kernels[0].advice
    assert advice[0].startswith("registers spill to local memory (932,570,880 bytes per launch)")
    assert len(advice) == 5  # capped


def test_bank_conflicting_transpose_is_told_to_pad_and_the_padded_one_is_not() -> None:
    naive = _diag("h200_transpose_naive.csv", TRANSPOSE, {"M": 4096, "N": 4096})
    assert naive.kernels[0].name == "transpose_naive(const float *, float *, int, int)"
    assert naive.kernels[0].advice[0].startswith("shared-memory accesses conflict (16,498,182 bank "
                                                 "conflicts, 3.9 per thread); pad the row width")
    padded = _diag("h200_transpose_padded.csv", TRANSPOSE, {"M": 4096, "N": 4096}, peaks=None)
    assert padded.roofline_fraction is None and "calibrate" in padded.unmeasured["roofline_fraction"]
    c = padded.kernels[0].counters
    assert c.bank_conflicts is not None and c.bank_conflicts > 1000  # a few, not per thread
    assert "shared-bank-conflicts" not in fired_rules(c, bound="memory")


def test_brief_examples_read_as_promised() -> None:
    c = KernelCounters(achieved_occupancy_pct=12.0, dram_throughput_pct=25.0, bank_conflicts=10_000.0,
                       bank_conflicts_per_thread=2.0, spill_bytes=0.0)
    advice = advise(c, bound="memory")
    assert "only 12% of the GPU's warp slots are busy: parallelism is too low; try more blocks " \
           "(smaller BLOCK) or less shared memory/registers per block" in advice
    assert any(a.startswith("bandwidth is poorly used (25% of peak") for a in advice)
    assert any(a.startswith("shared-memory accesses conflict (10,000 bank conflicts") for a in advice)
    assert not any("spill" in a for a in advice)  # zero spills say nothing


def test_unmeasured_numbers_never_trigger_advice() -> None:
    assert advise(KernelCounters()) == []
    # bound unknown: the memory-bound rule stays silent even at 5% DRAM throughput
    assert fired_rules(KernelCounters(dram_throughput_pct=5.0)) == []
    # the sentence quotes registers_per_thread: without it the rule does not fire
    c = KernelCounters(occupancy_limiter="registers", theoretical_occupancy_pct=25.0)
    assert "occupancy-capped-by-registers" not in fired_rules(c)
    assert "occupancy-capped-by-registers" in fired_rules(c.model_copy(update={"registers_per_thread": 128}))


def test_near_bound_keeps_non_generic_rules() -> None:
    c = KernelCounters(spill_bytes=64.0, achieved_occupancy_pct=10.0)
    advice = advise(c, roofline_fraction=0.85, bound="compute")
    assert advice[0].startswith("this kernel already runs at 85% of the compute-bound roofline")
    assert advice[1].startswith("registers spill") and len(advice) == 2


def test_stall_rule_quotes_the_share() -> None:
    c = KernelCounters(top_stalls=[StallReason(reason="barrier", cycles_per_issue=3.0, share_pct=61.0)])
    assert advise(c) == ["warps mostly wait at barriers (61% of stalls); balance the work between "
                         "warps and synchronise less often (fewer __syncthreads, smaller blocks)"]


@pytest.mark.parametrize(("body", "needle"), [
    ('when = ["occupancy < 3"]', "unknown metric 'occupancy'"),
    ('when = ["spill_bytes ~ 3"]', "is not '<metric> <op>"),
    ('when = ["bound > 3"]', "is a word"),
    ('when = ["spill_bytes > 0"]\nsentence = "{spill_bytes.__class__}"', "not a metric name"),
    ('when = ["spill_bytes > 0"]\nsentence = "{spill_bytes!r}"', "not a metric name"),
])
def test_bad_rules_are_rejected_with_the_reason(tmp_path: Path, body: str, needle: str) -> None:
    rule = {"id": '"x"', "severity": '"low"', "next_step": '"y"', "sentence": '"s"'}
    lines = [f"{k} = {v}" for k, v in rule.items() if f"{k} =" not in body]
    p = tmp_path / "advice.toml"
    p.write_text('[near_bound]\nsentence = "a"\nnext_step = "b"\n[[rules]]\n' + "\n".join(lines)
                 + "\n" + body + "\n")
    with pytest.raises(AdviceTableError, match=r"advice\.toml") as e:
        load_table(p)
    assert needle in str(e.value)


def test_shipped_table_loads_and_ids_are_unique() -> None:
    t = load_table()
    assert t.max_sentences == 5 and t.near_bound.fraction == 0.8
    assert len({r.id for r in t.rules}) == len(t.rules) >= 10


def test_launches_group_by_call_position_or_by_name() -> None:
    def k(i: int, name: str) -> KernelRecord:
        return KernelRecord(id=i, name=name, metrics={"gpu__time_duration.sum": 1000.0 * (i + 1)})

    same = [k(0, "a"), k(1, "b"), k(2, "a"), k(3, "b")]
    assert [(n, [r.id for r in rows]) for n, rows in group_launches(same, 2)] == [("a", [0, 2]), ("b", [1, 3])]
    ragged = [k(0, "a"), k(1, "a"), k(2, "b")]
    assert [(n, len(rows)) for n, rows in group_launches(ragged, 2)] == [("a", 2), ("b", 1)]
    assert counters([k(0, "a"), k(2, "a")]).duration_ms == pytest.approx(0.002)  # median, in ms


def test_missing_metrics_are_null_with_reasons() -> None:
    c = counters([KernelRecord(id=0, name="k", metrics={"launch__registers_per_thread": 40.0})])
    assert c.registers_per_thread == 40 and c.duration_ms is None
    assert "gpu__time_duration.sum" in c.unmeasured["duration_ms"]
    assert c.spill_bytes is None and "spill_bytes" in c.unmeasured and c.top_stalls == []


def test_record_without_profile_or_with_a_refusal_says_why() -> None:
    assert build_diagnostics(None).unmeasured == {"kernels": "not measured: the profile did not run"}
    refused = DiagnosticsRecord(profile=ProfileRecord(unmeasured="the driver refuses access (ERR_NVGPUCTRPERM)"))
    d = build_diagnostics(refused)
    assert d.kernels == [] and d.advice == [] and "ERR_NVGPUCTRPERM" in d.unmeasured["kernels"]


def test_sanitizer_record_keeps_its_overhead_and_reason() -> None:
    raw = DiagnosticsRecord(sanitizer=SanitizerRecord(tool="memcheck", unmeasured="not run: the CPU", wall_s=None))
    d = build_diagnostics(raw)
    assert d.sanitizer is not None and d.sanitizer.ran is False and d.sanitizer.overhead_s is None
    assert d.sanitizer.unmeasured == "not run: the CPU"


def test_roofline_profile_takes_registers_occupancy_and_spills_from_the_longest_kernel() -> None:
    from grader.report.model import TimingStats

    spec = load_task(SCALE)[0]
    timing = TimingStats(samples=5, mean_ms=0.04, median_ms=0.04, p95_ms=0.05, std_ms=0.0, min_ms=0.04,
                         cv=0.0, device="cuda", clock="cuda_event", mode="events", cache="cold",
                         dims={"N": 1 << 24})
    prof = analyze(spec, timing, PEAKS)
    d = _diag("h200_scale_huge_block.csv", SCALE, {"N": 1 << 24})
    filled = with_counters(prof, d.kernels)
    assert filled.registers_per_thread == 64 and filled.spills_bytes == 932_570_880
    assert filled.occupancy_pct == pytest.approx(11.9, abs=0.5)
    assert "registers_per_thread" not in filled.unmeasured
    empty = with_counters(prof, [], "not measured: the device is the CPU")
    assert empty.registers_per_thread is None and empty.unmeasured["occupancy_pct"].endswith("CPU")
