"""The docker backend's container arguments, checked without a daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from docker.types import DeviceRequest

from grader.backends.base import SandboxSpec
from grader.backends.cleanup import owner_alive
from grader.backends.docker import build_command, container_kwargs, default_image
from grader.backends.docker.images import default_tag
from grader.errors import UsageError
from grader.limits import Limits


def _spec(tmp_path: Path, **kw: object) -> SandboxSpec:
    base: dict[str, object] = {
        "in_dir": tmp_path / "in",
        "out_dir": tmp_path / "out",
        "argv": ("python3", "-m", "sandbox.judge.main"),
        "limits": Limits(memory_mib=512, pids=64, tmpfs_mib=32, cpus=1.5),
        "label": "t1",
    }
    base.update(kw)
    return SandboxSpec(**base)  # type: ignore[arg-type]


def test_isolation_options_are_all_set(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    assert kw["network_mode"] == "none"
    assert kw["read_only"] is True
    assert kw["security_opt"] == ["no-new-privileges"]  # and no seccomp=unconfined
    assert kw["privileged"] is False
    assert kw["init"] is True
    assert kw["pids_limit"] == 64
    assert kw["nano_cpus"] == 1_500_000_000
    assert kw["labels"]["kgrader"] == "1" and kw["labels"]["kgrader.label"] == "t1"
    assert owner_alive(kw["labels"]["kgrader.owner"])


def test_launcher_runs_as_root_in_the_container_with_exactly_three_capabilities(
    tmp_path: Path,
) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    assert kw["user"] == "0:0"
    assert kw["cap_drop"] == ["ALL"]
    assert sorted(kw["cap_add"]) == ["SETGID", "SETUID", "SYS_ADMIN"]
    assert not any("seccomp" in opt or "apparmor" in opt for opt in kw["security_opt"])


def test_argv_is_passed_unchanged(tmp_path: Path) -> None:
    argv = ("python3", "-m", "sandbox.launcher.launch", "--x")
    kw = container_kwargs(_spec(tmp_path, argv=argv), "img:1")
    assert [*kw["entrypoint"], *kw["command"]] == list(argv)


def test_memory_and_swap_limits_are_equal(tmp_path: Path) -> None:
    kw = container_kwargs(_spec(tmp_path), "img:1")
    assert kw["mem_limit"] == kw["memswap_limit"] == "512m"


def test_tmp_and_shm_are_capped_in_size_and_inodes_and_ulimits_set(tmp_path: Path) -> None:
    spec = _spec(tmp_path, limits=Limits(tmpfs_mib=32, tmpfs_inodes=4096))
    kw = container_kwargs(spec, "img:1")
    for path in ("/tmp", "/dev/shm"):
        opts = kw["tmpfs"][path].split(",")
        assert "size=32m" in opts and "nr_inodes=4096" in opts, opts
        assert "mode=1777" in opts and "nosuid" in opts and "nodev" in opts
    assert "noexec" in kw["tmpfs"]["/dev/shm"].split(",")
    assert "shm_size" not in kw  # /dev/shm is the capped tmpfs above, not docker's own
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in kw["ulimits"]}
    assert limits["core"] == (0, 0)
    assert limits["fsize"][0] == max(32 << 20, spec.limits.result_bytes)
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
    assert got["KGRADER_DEVICE_GIDS"] == ""
    assert kw["entrypoint"] == ["python3"] and kw["command"] == ["-m", "sandbox.judge.main"]


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


@pytest.mark.parametrize("ids", [("all",), ("0,1",), ("-1",), ("none",), ("1", "1")])
def test_cuda_rejects_wildcard_or_repeated_ids(tmp_path: Path, ids: tuple[str, ...]) -> None:
    with pytest.raises(UsageError):
        container_kwargs(_spec(tmp_path, device="cuda", gpu_ids=ids), "img:1")


def test_cuda_without_ids_gets_the_first_visible_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    (req,) = container_kwargs(_spec(tmp_path, device="cuda"), "img:1")["device_requests"]
    assert req["DeviceIDs"] == ["3"]


def test_rocm_passes_only_kfd_and_named_render_nodes(tmp_path: Path) -> None:
    spec = _spec(tmp_path, device="rocm", gpu_ids=("renderD129", "/dev/dri/renderD131"))
    kw = container_kwargs(spec, "img:1")
    assert kw["devices"] == [
        "/dev/kfd:/dev/kfd:rw",
        "/dev/dri/renderD129:/dev/dri/renderD129:rw",
        "/dev/dri/renderD131:/dev/dri/renderD131:rw",
    ]
    assert "device_requests" not in kw


@pytest.mark.parametrize("ids", [("/dev/dri",), ("card0",), ("renderD12x",), ("all",)])
def test_rocm_rejects_anything_but_render_nodes(tmp_path: Path, ids: tuple[str, ...]) -> None:
    with pytest.raises(UsageError):
        container_kwargs(_spec(tmp_path, device="rocm", gpu_ids=ids), "img:1")


def test_missing_image_hint_names_the_build_command() -> None:
    assert default_image("cuda") == default_tag("cuda") == "kgrader/cuda:latest"
    assert default_image("cpu") == "kgrader/cpu:latest"
    assert build_command("kgrader/cuda:latest", "cuda") == "kgrader image build --flavor cuda"
    assert "--tag my:img" in build_command("my:img", "cpu")


def test_owner_label_of_a_dead_or_foreign_process_is_not_alive() -> None:
    assert not owner_alive(None)
    assert not owner_alive("other-host:1:0.00")
    assert not owner_alive("garbage")
