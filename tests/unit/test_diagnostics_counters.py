"""sandbox/tools/counters.py: reading ncu CSV and compute-sanitizer logs, real and hostile.

The ``h200_*`` fixtures are real captures (Nsight Compute / compute-sanitizer 2025.3.1 on
an H200, through kgrader's own profile mode and sanitized correctness stage); the others
are written by hand from the same formats.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.diagnostics.ncu import METRICS
from sandbox.tools.counters import (
    MAX_FINDINGS,
    ncu_refusal,
    parse_ncu_log,
    parse_number,
    parse_sanitizer_log,
    wanted_metric,
)

DATA = Path(__file__).resolve().parents[1] / "data"
REQ = list(METRICS)


def _ncu(name: str) -> dict:  # type: ignore[type-arg]
    return parse_ncu_log((DATA / "ncu" / name).read_text(), REQ)


def _san(name: str) -> dict:  # type: ignore[type-arg]
    return parse_sanitizer_log((DATA / "sanitizer" / name).read_text())


def test_real_ncu_capture_gives_both_profiled_launches_in_base_units() -> None:
    out = _ncu("h200_scale_good.csv")
    assert [k["name"] for k in out["kernels"]] == ["scale_kernel", "scale_kernel"]
    m = out["kernels"][0]["metrics"]
    assert m["gpu__time_duration.sum"] == pytest.approx(32_448, rel=0.05)  # ns, printed "32,448"
    assert m["launch__registers_per_thread"] == 30
    assert m["launch__grid_size"] == 4096
    assert 60 < m["dram__throughput.avg.pct_of_peak_sustained_elapsed"] < 80
    assert out["dropped"] == 0
    assert any(line.startswith("==PROF== Connected") for line in out["messages"])


def test_only_requested_metrics_are_kept_and_the_stall_regex_expands() -> None:
    m = _ncu("h200_scale_good.csv")["kernels"][0]["metrics"]
    assert not any(k.startswith("device__attribute") for k in m)  # raw page prints them all
    stalls = [k for k in m if k.startswith("smsp__average_warps_issue_stalled_")]
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in stalls
    assert len(stalls) >= 15


def test_cpp_kernel_names_with_commas_survive_the_csv() -> None:
    out = _ncu("h200_transpose_naive.csv")
    assert out["kernels"][0]["name"] == "transpose_naive(const float *, float *, int, int)"
    assert out["kernels"][0]["metrics"]["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] > 1e6


def test_no_kernels_log_is_empty_not_an_error() -> None:
    text = (DATA / "ncu" / "h200_no_kernels.log").read_text()
    assert parse_ncu_log(text, REQ)["kernels"] == []
    assert ncu_refusal(text) is None  # a warning, not a refusal: the caller words the reason


@pytest.mark.parametrize(("line", "needle"), [
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
     "Performance Counters on the target device 0.", "ERR_NVGPUCTRPERM"),
    ("==ERROR== Failed to initialize the profiler: LibraryNotLoaded", "LibraryNotLoaded"),
    ("==ERROR== Failed to profile kernel in process 12", "Failed to profile kernel"),
])
def test_ncu_refusals_name_their_cause(line: str, needle: str) -> None:
    reason = ncu_refusal(f"==PROF== Connected to process 12 (/usr/bin/python3)\n{line}\n")
    assert reason is not None and needle in reason


def test_numbers_are_strict() -> None:
    assert parse_number("1,980,000") == 1_980_000
    assert parse_number("37.44") == 37.44
    assert parse_number("-3") == -3
    for bad in ("nan", "inf", "1e999", "12,34", "0x10", "", "n/a", "1 2", "１２"):
        assert parse_number(bad) is None, bad


def test_metric_names_must_look_like_metrics() -> None:
    assert wanted_metric("gpu__time_duration.sum", REQ)
    assert not wanted_metric("gpu__time_duration.max", REQ)
    assert not wanted_metric("Kernel Name", ["regex:.*"])


HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum","launch__registers_per_thread"'
UNITS = '"","","","","","","","ns","register/thread"'


def test_hostile_values_are_dropped_and_counted_never_trusted() -> None:
    rows = [
        '"0","1","p","h","k\x07ill\nname","(1, 1, 1)","(1, 1, 1)","nan","1e999"',
        '"1","1","p","h","' + "x" * 5000 + '","(1, 1, 1)","(1, 1, 1)","-1,000","12"',
        '"2","1","p","h","short"',  # truncated row
    ]
    out = parse_ncu_log("\n".join([HEADER, UNITS, *rows]), REQ)
    # The name broken over two lines spoils that record alone; the truncated row is dropped.
    assert len(out["kernels"]) == 1
    only = out["kernels"][0]
    assert len(only["name"]) == 300
    assert only["metrics"] == {"gpu__time_duration.sum": -1000.0, "launch__registers_per_thread": 12.0}
    assert out["dropped"] == 2


def test_control_characters_in_names_are_replaced() -> None:
    row = '"0","1","p","h","k\x07\x1b[2Jx","(1, 1, 1)","(1, 1, 1)","nan","3"'
    out = parse_ncu_log("\n".join([HEADER, UNITS, row]), REQ)
    assert out["kernels"][0]["name"] == "k??[2Jx"
    assert out["kernels"][0]["metrics"] == {"launch__registers_per_thread": 3.0}
    assert out["dropped"] == 1


def test_unknown_units_are_dropped_and_scaled_units_converted() -> None:
    units = '"","","","","","","","usecond","furlong"'
    row = '"0","1","p","h","k","(1, 1, 1)","(1, 1, 1)","1.5","3"'
    out = parse_ncu_log("\n".join([HEADER, units, row]), REQ)
    assert out["kernels"][0]["metrics"] == {"gpu__time_duration.sum": 1500.0}
    assert out["dropped"] == 1


def test_garbage_is_no_kernels() -> None:
    for text in ("", "\x00\x01" * 100, '"a","b"\n"1"', "==ERROR== x\n" * 1000):
        out = parse_ncu_log(text, REQ)
        assert out["kernels"] == [] and len(out["messages"]) <= 20


# --- compute-sanitizer ------------------------------------------------------------------


def test_real_memcheck_log_names_kernel_thread_and_allocation() -> None:
    out = _san("h200_memcheck_unmasked_tail.txt")
    assert out["completed"] and out["error_count"] == 34  # not the "14 were not printed" line
    assert len(out["findings"]) == MAX_FINDINGS
    f = out["findings"][0]
    assert f["kind"] == "out_of_bounds" and f["space"] == "global" and f["access"] == "write"
    assert f["size"] == 4 and f["kernel"] == "scale_unmasked_kernel"
    assert f["location"] == "unmasked_tail.py:21"
    assert f["thread"] == [32, 0, 0] and f["block"] == [15625, 0, 0]
    assert f["nearest"] == {"distance_bytes": 117, "side": "after", "allocation": "0x7f68f6c00000",
                            "allocation_bytes": 4000012}


def test_real_clean_log_is_complete_with_no_findings() -> None:
    out = _san("h200_memcheck_clean.txt")
    assert out == {"findings": [], "error_count": 0, "completed": True, "tool_errors": [], "more": 0}


def test_real_racecheck_log_reports_shared_races() -> None:
    out = _san("h200_racecheck_missing_sync.txt")
    assert out["completed"] and out["error_count"] == 4
    assert [f["kind"] for f in out["findings"]] == ["race"] * 4
    assert out["findings"][0]["kernel"] == "transpose_nosync"
    assert out["findings"][0]["access"] == "read/write"


def test_older_site_format_and_misaligned_accesses() -> None:
    text = "\n".join([
        "========= CUDA-MEMCHECK",
        "========= Misaligned Shared or Local Address",
        "=========     at 0x00000070 in /src/k.cu:12:bad_kernel(float*)",
        "=========     by thread (3,0,0) in block (0,0,0)",
        "=========     Address 0x7f0000000001 is misaligned",
        "=========",
        "========= ERROR SUMMARY: 1 error",
    ])
    out = parse_sanitizer_log(text)
    f = out["findings"][0]
    assert f["kind"] == "misaligned" and f["kernel"] == "bad_kernel" and f["location"] == "/src/k.cu:12"
    assert out["error_count"] == 1 and out["completed"]


def test_a_log_without_summary_is_not_complete_and_tool_failures_are_kept() -> None:
    out = parse_sanitizer_log("========= COMPUTE-SANITIZER\n========= Error: Device not supported\n")
    assert not out["completed"] and out["findings"] == []
    assert out["tool_errors"] == ["Error: Device not supported"]


def test_many_findings_are_capped_and_counted() -> None:
    block = ("========= Invalid __global__ read of size 8 bytes\n=========     at k+0x10 in a.py:1\n"
             "=========     by thread (0,0,0) in block (0,0,0)\n"
             "=========     Access to 0x10 is out of bounds\n=========\n")
    out = parse_sanitizer_log(block * 500)
    assert len(out["findings"]) == MAX_FINDINGS and out["more"] == 480
    assert not out["completed"]
