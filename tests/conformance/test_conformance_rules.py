"""Rules every backend shares: GPU ids, which limit is reported, output capping, the registry.

The GPU cases run each real backend's ``run`` (bad ids must be refused before any sandbox
starts, the same way everywhere) and, where a GPU would be needed, the pure functions each
backend builds its sandbox from; no GPU is needed.
"""

from __future__ import annotations

import itertools
import shutil
import signal
from pathlib import Path

import pytest

from grader.backends.base import SandboxSpec
from grader.backends.classify import ORDER, Evidence, classify, decode_status
from grader.backends.gpu import resolve_gpu_ids, resolve_rocm_ids
from grader.backends.output import OutputDrain, collect, split_budget
from grader.backends.registry import backend_choices, backend_class, sandbox_backend
from grader.errors import UsageError
from grader.limits import Limits

from ._support import backend_object


def _spec(tmp_path: Path, **kw: object) -> SandboxSpec:
    base: dict[str, object] = {"in_dir": tmp_path / "in", "out_dir": tmp_path / "out",
                               "argv": ("python3", "-c", "pass"), "limits": Limits()}
    return SandboxSpec(**{**base, **kw})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- GPU ids


@pytest.mark.parametrize(
    ("device", "ids", "code"),
    [
        ("cuda", ("all",), "bad_gpu_id"),
        ("cuda", ("0,1",), "bad_gpu_id"),
        ("cuda", ("1", "1"), "bad_gpu_id"),
        ("rocm", ("card0",), "bad_gpu_id"),
        ("cpu", ("0",), "bad_gpu_id"),
    ],
)
def test_bad_gpu_ids_are_refused_alike_before_any_sandbox_starts(
    backend: str, tmp_path: Path, device: str, ids: tuple[str, ...], code: str
) -> None:
    with pytest.raises(UsageError) as info:
        backend_object(backend).run(_spec(tmp_path, device=device, gpu_ids=ids))
    assert info.value.code == code
    assert not (tmp_path / "out").exists(), "the backend started preparing a sandbox"


def test_a_worker_given_no_gpu_gets_a_usage_error_not_gpu_0(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UsageError) as info:
        backend_object(backend).run(_spec(tmp_path, device="cuda"))
    assert info.value.code == "no_gpu_ids"


def test_empty_gpu_ids_mean_the_first_visible_gpu_on_every_backend(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    spec = _spec(tmp_path, device="cuda")
    gpu = resolve_gpu_ids("cuda", ())
    assert (gpu.ids, gpu.defaulted) == (("3",), True)
    if backend == "docker":
        from grader.backends.docker import container_kwargs

        (req,) = container_kwargs(spec, "img:1")["device_requests"]
        assert req["DeviceIDs"] == ["3"]
    else:
        from grader.backends.bwrap import BwrapBackend
        from grader.backends.gpu import cuda_visible_devices

        # bwrap binds only GPU 3's node, where CUDA enumerates that one GPU: the variable
        # names it by UUID (from nvidia-smi), or as the sandbox's first GPU without it
        env = BwrapBackend()._environment(spec, gpu, ())
        assert env["CUDA_VISIBLE_DEVICES"] == cuda_visible_devices(gpu)
        if shutil.which("nvidia-smi") is None:
            assert env["CUDA_VISIBLE_DEVICES"] == "0"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_gpu_ids("cuda", ()).ids == ("0",)
    assert resolve_gpu_ids("cuda", ("1", "GPU-5e1b3c2a-0000")) .defaulted is False


def test_rocm_indices_map_to_render_nodes_through_the_kfd_topology(tmp_path: Path) -> None:
    for node, minor in (("0", 0), ("1", 130), ("2", 128)):  # node 0: a CPU, no render minor
        (tmp_path / node).mkdir()
        (tmp_path / node / "properties").write_text(f"cpu_cores_count 0\ndrm_render_minor {minor}\n")
    assert resolve_rocm_ids(("0", "1"), tmp_path) == ("renderD130", "renderD128")
    assert resolve_rocm_ids(("/dev/dri/renderD129",), tmp_path) == ("renderD129",)
    with pytest.raises(UsageError):
        resolve_rocm_ids(("2",), tmp_path)


# --------------------------------------------------------------------------- limit order


def test_the_first_limit_in_the_documented_order_is_reported() -> None:
    assert ORDER == ("timeout", "memory_limit", "gpu_memory_limit", "pids_limit", "disk_limit")
    flags = ("timed_out", "oom_killed", "gpu_memory_exceeded", "pids_limited", "xfsz")
    for combo in itertools.product((False, True), repeat=len(flags)):
        kw = dict(zip(flags, combo, strict=True))
        xfsz = kw.pop("xfsz")
        ev = Evidence(**kw, signal=signal.SIGXFSZ if xfsz else signal.SIGKILL)
        expected = next((name for name, on in zip(ORDER, combo, strict=True) if on), None)
        assert classify(ev) == expected, combo


def test_exit_status_reads_the_same_for_both_backends() -> None:
    assert decode_status(-9) == (None, 9)  # Popen: killed by a signal
    assert decode_status(137) == (None, 9)  # docker init / bwrap monitor: 128 + signal
    assert decode_status(128 + signal.SIGXFSZ) == (None, signal.SIGXFSZ)
    assert decode_status(3) == (3, None)
    assert decode_status(255) == (255, None)
    assert decode_status(None) == (None, None)


# --------------------------------------------------------------------------- output


def test_a_drain_reads_to_the_end_and_keeps_only_the_cap() -> None:
    produced = [0]

    def flood() -> object:
        for _ in range(160):
            produced[0] += 1
            yield b"x" * 65536

    drain = OutputDrain(flood(), 100_000)  # type: ignore[arg-type]
    drain.run()
    assert produced[0] == 160, "the drain stopped reading early"
    assert len(drain.buf) == 100_000 and drain.total == 160 * 65536 and drain.truncated


def test_both_streams_share_one_budget() -> None:
    out, err = split_budget(b"o" * 100, b"e" * 100, 100)
    assert len(out) + len(err) == 100 and len(err) == 50
    assert split_budget(b"o" * 100, b"e" * 10, 100) == (b"o" * 90, b"e" * 10)
    a, b = OutputDrain(iter([b"a" * 80]), 80), OutputDrain(iter([b"b" * 80]), 80)
    a.run()
    b.run()
    o, e, truncated = collect(a, b, 100)
    assert (len(o), len(e), truncated) == (50, 50, True)


# --------------------------------------------------------------------------- registry


def test_registry_lists_every_backend_and_refuses_unknown_or_duplicate_names() -> None:
    assert backend_choices()[:3] == ("auto", "docker", "bwrap")
    assert backend_class("bwrap").name == "bwrap"
    with pytest.raises(UsageError):
        backend_class("chroot")
    with pytest.raises(ValueError, match="already registered"):
        sandbox_backend("bwrap")(type("Other", (backend_class("docker"),), {}))
