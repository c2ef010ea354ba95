"""Imported field tasks get limits an inline-CUDA build fits in (grader/tasks)."""

from __future__ import annotations

from pathlib import Path

from grader.formats.gpumode import importer as gpumode
from grader.formats.kernelbench import importer as kernelbench

ROOT = Path(__file__).resolve().parents[2]


def test_imported_tasks_leave_room_for_a_load_inline_build() -> None:
    """On an H200 the default 4 GiB held the judge, the problem process and the runner
    (~0.7 GB each) beside cc1plus (1.2 GB) and cudafe++ (1.8 GB): the cgroup reclaimed their
    pages and one .cpp was still compiling after 175 s."""
    kb = kernelbench.import_problem(ROOT / "examples/field/kernelbench/problems/1_ReLU.py").spec
    gm = gpumode.import_problem(ROOT / "examples/field/gpumode/vectoradd").spec
    for spec in (kb, gm):
        assert spec.limits.memory_mib >= 16384 and spec.limits.compile_s >= 600
