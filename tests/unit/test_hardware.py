"""grader/measure/peaks.py: the calibration cache, keyed by a device/software fingerprint.

The measurement and the host probe are fakes here (pure cache logic); the real
calibration runs in tests/e2e.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.errors import InfrastructureError
from grader.measure import peaks as hardware
from grader.measure.peaks import (
    environment_mismatches,
    forget,
    get_peaks,
    load_entries,
    sandbox_fingerprint,
)
from sandbox.contract.wire import WIRE_VERSION, Record

ENV = {"torch": "2.13.0", "triton": "3.9.0", "python": "3.11.7", "device_name": "H200",
       "device_uuid": "GPU-1", "driver": "570.1", "cuda": "12.8", "sm": "9.0"}


class FakeMeasure:
    """Counts calls; returns a payload with peaks and ``env``."""

    def __init__(self, env: dict[str, Any] | None = None, bw: float = 4000.0) -> None:
        self.calls: list[tuple[str, str, bool]] = []
        self.env = dict(env or ENV)
        self.bw = bw

    def __call__(self, backend: str, device: str, quick: bool) -> Record:
        self.calls.append((backend, device, quick))
        return Record(wire_version=WIRE_VERSION, stage=None, errors=(), warnings=(), device=device, environment=self.env,
                            peaks={"bandwidth_gbps": self.bw + len(self.calls),
                                   "matmul_tflops": {"float16": 700.0}, "tflops": 700.0})


def probe_for(**over: Any) -> Any:
    def probe(backend: str, device: str) -> dict[str, Any]:
        return {"device": device, "backend": backend, "gpus": ["H200, GPU-1, 570.1"],
                "torch": "2.13.0", "triton": "3.9.0", **over}
    return probe


def test_no_cache_measures_then_stores(tmp_path: Path) -> None:
    path, m = tmp_path / "hw" / "hardware.json", FakeMeasure()
    cal = get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    assert m.calls == [("bwrap", "cuda", False)]
    assert not cal.cached and cal.peaks["bandwidth_gbps"] == 4001.0
    stored = json.loads(path.read_text())
    assert stored["version"] == hardware.CACHE_VERSION and len(stored["entries"]) == 1
    assert "cached" not in stored["entries"][0]


def test_matching_fingerprint_is_answered_from_the_cache(tmp_path: Path) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    first = get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    again = get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    assert len(m.calls) == 1
    assert again.cached and again.peaks == first.peaks


def test_changed_driver_or_software_is_recalibrated_and_kept_beside(tmp_path: Path) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for(gpus=["H200, GPU-1, 575.0"]))
    get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for(torch="2.14.0"))
    assert len(m.calls) == 3
    assert len(load_entries(path)) == 3
    # Back on the first machine: still cached.
    assert get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for()).cached
    assert len(m.calls) == 3


def test_refresh_replaces_the_entry_for_the_same_fingerprint(tmp_path: Path) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    cal = get_peaks("bwrap", "cuda", refresh=True, path=path, measure=m, probe=probe_for())
    assert not cal.cached and len(m.calls) == 2
    entries = load_entries(path)
    assert len(entries) == 1 and entries[0].peaks["bandwidth_gbps"] == 4002.0


def test_quick_entries_do_not_satisfy_a_full_request(tmp_path: Path) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    get_peaks("bwrap", "cuda", quick=True, path=path, measure=m, probe=probe_for())
    assert get_peaks("bwrap", "cuda", quick=True, path=path, measure=m, probe=probe_for()).cached
    full = get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    assert not full.cached and m.calls[-1] == ("bwrap", "cuda", False)
    # ... but a full entry satisfies a quick request.
    assert not get_peaks("bwrap", "cuda", quick=True, path=path, measure=m, probe=probe_for()).quick


def test_fingerprint_comes_from_the_sandbox_environment(tmp_path: Path) -> None:
    path = tmp_path / "hardware.json"
    sandbox_env = {**ENV, "torch": "2.12.0-in-image"}
    cal = get_peaks("docker", "cuda", path=path, measure=FakeMeasure(sandbox_env),
                    probe=probe_for(image_id="sha256:abc"))
    assert cal.fingerprint["torch"] == "2.12.0-in-image"
    assert cal.fingerprint["device_uuid"] == "GPU-1"
    assert cal.fingerprint["backend"] == "docker" and cal.fingerprint["device"] == "cuda"


def test_environment_mismatch_compares_only_keys_both_sides_have() -> None:
    fp = sandbox_fingerprint(ENV, "cuda", "bwrap")
    assert environment_mismatches(fp, {"torch": "2.13.0", "device_name": "H200"}) == []
    drift = environment_mismatches(fp, {"torch": "2.14.0", "device_name": "H200"})
    assert drift == ["torch: calibrated '2.13.0', now '2.14.0'"]


def test_forget_drops_one_entry(tmp_path: Path) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    a = get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    get_peaks("bwrap", "cpu", path=path, measure=m, probe=probe_for())
    assert forget(a.probe_key, path)
    assert not forget(a.probe_key, path)
    assert [e.device for e in load_entries(path)] == ["cpu"]


@pytest.mark.parametrize("content", ["{not json", '{"version": 99, "entries": []}', '[1, 2]',
                                     '{"version": 1, "entries": [{"bogus": 1}]}'])
def test_corrupt_cache_reads_as_empty_and_is_rewritten(tmp_path: Path, content: str) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    path.write_text(content)
    assert load_entries(path) == []
    cal = get_peaks("bwrap", "cuda", path=path, measure=m, probe=probe_for())
    assert not cal.cached and len(load_entries(path)) == 1


def test_env_variable_names_the_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGRADER_HARDWARE", str(tmp_path / "x.json"))
    assert hardware.default_path() == tmp_path / "x.json"
    monkeypatch.delenv("KGRADER_HARDWARE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hardware.default_path() == tmp_path / ".cache" / "kgrader" / "hardware.json"


def test_a_calibration_without_peaks_is_an_infrastructure_error(tmp_path: Path) -> None:
    def no_peaks(backend: str, device: str, quick: bool) -> Record:
        return Record(wire_version=WIRE_VERSION, stage=None, errors=(), warnings=(), device=device, environment=ENV)

    with pytest.raises(InfrastructureError):
        get_peaks("bwrap", "cuda", path=tmp_path / "h.json", measure=no_peaks, probe=probe_for())
    assert not (tmp_path / "h.json").exists()


def test_no_temp_files_are_left_beside_the_cache(tmp_path: Path) -> None:
    path, m = tmp_path / "hardware.json", FakeMeasure()
    for i in range(3):
        get_peaks("bwrap", "cuda", refresh=True, path=path, measure=m, probe=probe_for(i=i))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hardware.json", "hardware.json.lock"]


def test_host_probe_on_cpu_names_the_cpu_and_the_host_software() -> None:
    probe = hardware.host_probe("bwrap", "cpu")
    assert probe["device"] == "cpu" and probe["backend"] == "bwrap"
    assert probe["cpu_model"] and probe["cpu_count"]
    assert probe["torch"] is not None and "method" in probe
    assert hardware.probe_key(probe) == hardware.probe_key(dict(reversed(list(probe.items()))))


def test_a_local_build_tag_is_not_a_disagreement_between_host_and_sandbox() -> None:
    from grader.measure.peaks import _probe_disagrees

    assert _probe_disagrees({"torch": "2.11.0", "triton": "3.6.0"},
                            {"torch": "2.11.0+cu130", "triton": "3.6.0"}) == []
    assert _probe_disagrees({"torch": "2.10.0"}, {"torch": "2.11.0+cu130"}) == [
        "torch: host 2.10.0, sandbox 2.11.0+cu130"]
