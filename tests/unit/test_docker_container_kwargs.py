"""The docker backend's container arguments, checked without a daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from docker.types import DeviceRequest

from grader.backends.base import SandboxSpec
from grader.backends.docker import (
    _decode_status,
    _split_budget,
    build_command,
    container_kwargs,
    default_image,
    owner_alive,
)
from grader.errors import UsageError
from grader.limits import Limits


def _spec(tmp_path: Path, **kw: object) -> SandboxSpec:
    base: dict[str, object] = {
        "in_dir": tmp_path / "in",
        "out_dir": tmp_path / "out",
        "argv": ("python3", "-m", "sandbox.judge"),
        "limits": Limits(memory_mib=512, pids=64, tmpfs_mib=32, cpus=1.5),
        "label": "t1",
    }
    base.update(kw)
    return SandboxSpec(**base)  # type: ignore[arg-type]


def test_isolation_options_are_all_set(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    assert kw["network_mode"] == "none"
    assert kw["user"] == "65534:65534"
    assert kw["read_only"] is True
    assert kw["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == ["no-new-privileges"]
    assert kw["privileged"] is False
    assert kw["init"] is True
    assert kw["pids_limit"] == 64
    assert kw["nano_cpus"] == 1_500_000_000
    assert kw["labels"]["kgrader"] == "1" and kw["labels"]["kgrader.label"] == "t1"
    assert owner_alive(kw["labels"]["kgrader.owner"])


def test_memory_and_swap_limits_are_equal(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    assert kw["mem_limit"] == kw["memswap_limit"] == "512m"


def test_tmpfs_is_size_capped_world_writable_and_ulimits_set(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    opts = kw["tmpfs"]["/tmp"].split(",")
    assert "size=32m" in opts and "mode=1777" in opts and "nosuid" in opts
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in kw["ulimits"]}
    assert limits["core"] == (0, 0)
    assert limits["fsize"][0] == 32 << 20
    assert "nofile" in limits


def test_mounts_are_read_only_except_out(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1", harness_dir=Path("/h/sandbox"))
    mounts = {m["Target"]: m for m in kw["mounts"]}
    assert mounts["/kg/harness/sandbox"]["Source"] == "/h/sandbox"
    assert mounts["/kg/harness/sandbox"]["ReadOnly"] is True
    assert mounts["/kg/in"]["ReadOnly"] is True
    assert mounts["/kg/out"]["ReadOnly"] is False
    assert all(m["Type"] == "bind" for m in mounts.values())


def test_environment_is_explicit_and_drops_proxies(tmp_path: Path) -> None:
    env = {"KG_X": "1", "HTTPS_PROXY": "http://p", "no_proxy": "*", "HOME": "/root"}
    kw = container_kwargs(_spec(tmp_path, env=env), "img:1")
    got = kw["environment"]
    assert got["KG_X"] == "1"
    assert got["PYTHONPATH"] == "/kg/harness" and got["HOME"] == "/tmp"
    assert not any(k.lower().endswith("_proxy") for k in got)
    assert got["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert kw["entrypoint"] == ["python3"] and kw["command"] == ["-m", "sandbox.judge"]


def test_cpu_run_requests_no_devices(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    assert "device_requests" not in kw and "devices" not in kw


def test_cuda_uses_explicit_device_ids_never_all(tmp_path: Path) -> None:
    spec = _spec(tmp_path, device="cuda", gpu_ids=("1", "GPU-5e1b3c2a-0000-1111-2222-333344445555"))
    kw = container_kwargs(spec, "img:1")
    (req,) = kw["device_requests"]
    assert isinstance(req, DeviceRequest)
    assert req["Driver"] == "nvidia"
    assert req["DeviceIDs"] == ["1", "GPU-5e1b3c2a-0000-1111-2222-333344445555"]
    assert req["Count"] in (0, None)
    assert req["Capabilities"] == [["gpu"]]
    assert "NVIDIA_VISIBLE_DEVICES" not in kw["environment"]


@pytest.mark.parametrize("ids", [(), ("all",), ("0,1",), ("-1",), ("none",)])
def test_cuda_rejects_missing_or_wildcard_ids(tmp_path: Path, ids: tuple[str, ...]) -> None:
    with pytest.raises(UsageError):
        container_kwargs(_spec(tmp_path, device="cuda", gpu_ids=ids), "img:1")


def test_rocm_passes_only_kfd_and_named_render_nodes(tmp_path: Path) -> None:
    spec = _spec(tmp_path, device="rocm", gpu_ids=("renderD129", "/dev/dri/renderD131"))
    kw = container_kwargs(spec, "img:1")
    assert kw["devices"] == [
        "/dev/kfd:/dev/kfd:rw",
        "/dev/dri/renderD129:/dev/dri/renderD129:rw",
        "/dev/dri/renderD131:/dev/dri/renderD131:rw",
    ]
    assert "device_requests" not in kw


@pytest.mark.parametrize("ids", [(), ("/dev/dri",), ("card0",), ("renderD12x",)])
def test_rocm_rejects_anything_but_render_nodes(tmp_path: Path, ids: tuple[str, ...]) -> None:
    with pytest.raises(UsageError):
        container_kwargs(_spec(tmp_path, device="rocm", gpu_ids=ids), "img:1")


def test_status_above_128_is_a_signal() -> None:
    assert _decode_status(137) == (None, 9)
    assert _decode_status(0) == (0, None)
    assert _decode_status(3) == (3, None)
    assert _decode_status(255) == (255, None)


def test_output_budget_keeps_both_streams() -> None:
    out, err = _split_budget(b"o" * 100, b"e" * 100, 100)
    assert len(out) + len(err) == 100 and len(err) == 50
    out, err = _split_budget(b"o" * 100, b"e" * 10, 100)
    assert (len(out), len(err)) == (90, 10)


def test_missing_image_hint_names_the_build_command() -> None:
    assert default_image("cuda") == "kgrader/cuda:latest"
    assert default_image("cpu") == "kgrader/cpu:latest"
    assert build_command("kgrader/cuda:latest", "cuda") == "kgrader image build --flavor cuda"
    assert "--tag my:img" in build_command("my:img", "cpu")


def test_owner_label_of_a_dead_or_foreign_process_is_not_alive() -> None:
    assert not owner_alive(None)
    assert not owner_alive("other-host:1:0.00")
    assert not owner_alive("garbage")
