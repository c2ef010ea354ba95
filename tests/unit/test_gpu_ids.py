"""CUDA_VISIBLE_DEVICES for a sandbox that binds only the selected GPUs' device nodes."""

from __future__ import annotations

import pytest

from grader.backends import gpu
from grader.backends.gpu import GpuSelection, cuda_visible_devices

UUID0, UUID1 = "GPU-a5595ee9-a0d3-837e-6f39-be86ef45b92c", "GPU-0b1c2d3e-0000-1111-2222-333344445555"


def test_a_host_index_becomes_the_gpus_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on a two-H200 host: `--gpu 1` gave CUDA_VISIBLE_DEVICES=1 in a sandbox holding
    only /dev/nvidia1, where CUDA enumerates one GPU: it found none."""
    table = {"0": (0, UUID0), UUID0: (0, UUID0), "1": (1, UUID1), UUID1: (1, UUID1)}
    monkeypatch.setattr(gpu, "_nvidia_table", lambda: table)
    assert cuda_visible_devices(GpuSelection("cuda", ("1",), False)) == UUID1
    assert cuda_visible_devices(GpuSelection("cuda", ("0", "1"), False)) == f"{UUID0},{UUID1}"
    assert cuda_visible_devices(GpuSelection("cuda", (UUID1,), False)) == UUID1


def test_without_nvidia_smi_the_selected_gpus_are_the_sandboxs_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_nvidia_table", dict)
    assert cuda_visible_devices(GpuSelection("cuda", ("1",), False)) == "0"
    assert cuda_visible_devices(GpuSelection("cuda", ("2", "3"), False)) == "0,1"


def test_the_table_is_asked_once_a_minute_and_an_empty_answer_is_not_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU sandbox needs the table twice and a pool starts many: nvidia-smi is asked once."""
    answers = [{}, {"0": (0, UUID0), UUID0: (0, UUID0)}]
    asked: list[int] = []

    def query() -> dict[str, tuple[int, str]]:
        asked.append(1)
        return dict(answers[min(len(asked), len(answers)) - 1])

    monkeypatch.setattr(gpu, "_nvidia_query", query)
    monkeypatch.setattr(gpu, "_table_cache", None)
    assert gpu._nvidia_table() == {}  # no driver yet: asked again next time
    assert gpu._nvidia_table()["0"] == (0, UUID0)
    table = gpu._nvidia_table()
    table.clear()  # a caller's copy: the kept table is untouched
    assert gpu._nvidia_table()["0"] == (0, UUID0) and len(asked) == 2
    monkeypatch.setattr(gpu, "TABLE_TTL_S", 0.0)
    gpu._nvidia_table()
    assert len(asked) == 3
