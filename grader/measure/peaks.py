"""The calibration cache: measured device peaks in ``hardware.json``, keyed by a fingerprint.

A roofline needs the device's ceilings (copy bandwidth, matmul throughput per dtype).
They are *measured* inside the sandbox by :func:`measure_peak` (seconds
to a minute), so they are cached and re-measured only when the machine or the software
that runs candidates changes.

Where the cache lives: the ``path`` argument, else ``$KGRADER_HARDWARE``, else
``~/.cache/kgrader/hardware.json``. Writers hold ``hardware.json.lock`` (filelock) and
replace the file atomically (temp file, fsync, rename), so readers never see half a file.

**How "recomputed when the fingerprint changes" works.** Two fingerprints are kept:

* the **probe** is cheap and computed on the host before every lookup, without starting
  a sandbox: the device kind and the resolved backend; for ``cuda`` the GPUs' name,
  UUID and driver from ``nvidia-smi --query-gpu=name,uuid,driver_version``; for ``cpu``
  the ``model name`` of ``/proc/cpuinfo`` and the CPU count; the software that runs
  candidates — for ``bwrap`` the host's own Python, torch and triton versions (the
  sandbox binds the host's interpreter, so these *are* the sandbox's), for ``docker``
  the image id of the image the backend would run; and a hash of the calibration code
  (``sandbox/tools/peaks.py``), so a changed method invalidates old numbers. The cache is
  keyed on the sha256 of the probe.
* the **sandbox fingerprint** comes from the measurement itself: the environment the
  judge reported (:func:`sandbox_fingerprint` of ``payload.environment``), so the stored
  numbers say exactly which software produced them.

:func:`get_peaks` answers from the cache when an entry's probe key matches (and, for a
full request, the entry is not a quick one); otherwise it calibrates, stores the entry
(replacing any entry with the same key) and returns it. A probe cannot see everything the
sandbox sees, so callers that later get a report from the sandbox compare its
environment with the entry by :func:`environment_mismatches`; on a disagreement they
:func:`forget` the entry and calibrate again (``grader.agent.tools.profile_kernel`` does).
A corrupt or unreadable cache file is treated as empty and rewritten on the next store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import secrets
import shutil
import subprocess
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import filelock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.backends.registry import AUTO, backend_class, backend_names, sorted_choices
from grader.backends.select import detect_device, select_backend
from grader.errors import InfrastructureError, UsageError
from grader.judgecall import mode_request, run_judge_mode
from grader.limits import Limits
from grader.logs import get_logger
from sandbox.contract.wire import Record

__all__ = [
    "CACHE_VERSION",
    "Calibration",
    "default_path",
    "environment_mismatches",
    "forget",
    "get_peaks",
    "host_probe",
    "load_entries",
    "measure_peak",
    "probe_key",
    "resolve_target",
    "sandbox_fingerprint",
]

log = get_logger("kgrader.hardware")

CACHE_VERSION = 1
MAX_ENTRIES = 64
_CALIBRATION_CODE = Path(__file__).resolve().parents[2] / "sandbox" / "tools" / "peaks.py"
# Keys of the judge's environment report that identify the software and the device.
_FINGERPRINT_KEYS = ("device_name", "device_uuid", "driver", "cpu_count", "torch", "triton",
                     "python", "cuda", "sm")

Measure = Callable[[str, str, bool], Record]
Probe = Callable[[str, str], dict[str, Any]]


class Calibration(BaseModel):
    """One calibration: the peaks, and the fingerprints of what produced them."""

    model_config = ConfigDict(extra="forbid")

    probe_key: str = Field(description="sha256 of the canonical JSON of `probe`; the cache key.")
    probe: dict[str, Any] = Field(description="Host-side fingerprint computed before lookup.")
    fingerprint: dict[str, Any] = Field(description="From the sandbox's environment report.")
    backend: str
    device: str
    quick: bool
    measured_at: str
    peaks: dict[str, Any] = Field(description="bandwidth_gbps, matmul_tflops{dtype}, tflops, ...")
    environment: dict[str, Any] = Field(default_factory=dict)
    cached: bool = Field(False, description="True when this answer came from the cache file.")


def default_path() -> Path:
    """``$KGRADER_HARDWARE`` or ``~/.cache/kgrader/hardware.json``."""
    env = os.environ.get("KGRADER_HARDWARE")
    return Path(env) if env else Path.home() / ".cache" / "kgrader" / "hardware.json"


# --- probe (cheap, host side) ---------------------------------------------------------


def resolve_target(backend: str, device: str) -> tuple[str, str]:
    """Resolve ``auto`` for device and backend the way :func:`grader.evaluate.evaluate` does."""
    dev = detect_device() if device == "auto" else device
    if dev not in ("cpu", "cuda", "rocm"):
        raise UsageError(f"unknown device {device!r} (auto, cpu, cuda, rocm)")
    if backend in backend_names():
        return backend, dev
    if backend != AUTO:
        raise UsageError(f"unknown backend {backend!r} ({', '.join(sorted_choices())})")
    return select_backend(AUTO, dev).name, dev  # type: ignore[arg-type]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _nvidia_gpus() -> list[str]:
    """``name, uuid, driver`` per GPU from nvidia-smi; the driver file as a fallback."""
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([exe, "--query-gpu=name,uuid,driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=15, check=True).stdout
            return [ln.strip() for ln in out.splitlines() if ln.strip()]
    with contextlib.suppress(OSError):
        return [Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip()]
    return []


def host_probe(backend: str, device: str) -> dict[str, Any]:
    """The cheap fingerprint of ``(backend, device)`` (see the module docstring)."""
    probe: dict[str, Any] = {"device": device, "backend": backend}
    if device == "cuda":
        probe["gpus"] = _nvidia_gpus()
    elif device == "rocm":
        with contextlib.suppress(OSError):
            probe["amdgpu"] = Path("/sys/module/amdgpu/version").read_text().strip()
        probe["render_nodes"] = sorted(p.name for p in Path("/dev/dri").glob("renderD*"))
    else:
        probe["cpu_model"] = _cpu_model()
        probe["cpu_count"] = os.cpu_count()
    # What the sandbox runs, as its backend fingerprints it (an image's id; the host's
    # interpreter and packages).
    probe.update(backend_class(backend).fingerprint(device))  # type: ignore[arg-type]
    with contextlib.suppress(OSError):
        probe["method"] = hashlib.sha256(_CALIBRATION_CODE.read_bytes()).hexdigest()[:16]
    return probe


def probe_key(probe: Mapping[str, Any]) -> str:
    """sha256 of the probe's canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(probe, sort_keys=True, default=str).encode()).hexdigest()


# --- sandbox fingerprint --------------------------------------------------------------


def sandbox_fingerprint(environment: Mapping[str, Any], device: str, backend: str) -> dict[str, Any]:
    """The identifying part of a judge environment report, plus device kind and backend."""
    fp: dict[str, Any] = {"device": device, "backend": backend}
    fp.update({k: environment[k] for k in _FINGERPRINT_KEYS if environment.get(k) not in (None, "")})
    return fp


def environment_mismatches(fingerprint: Mapping[str, Any], environment: Mapping[str, Any]) -> list[str]:
    """Keys on which a later run's environment disagrees with a calibration's fingerprint.

    Only keys present (non-empty) on both sides are compared: an evaluation report may
    carry fewer keys than a calibration (no UUID, no driver), which is no disagreement.
    """
    out = []
    for k in _FINGERPRINT_KEYS:
        a, b = fingerprint.get(k), environment.get(k)
        if a not in (None, "") and b not in (None, "") and a != b:
            out.append(f"{k}: calibrated {a!r}, now {b!r}")
    return out


# --- the cache file -------------------------------------------------------------------


def _lock(path: Path) -> filelock.FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(path) + ".lock", timeout=600)


def load_entries(path: Path | None = None) -> list[Calibration]:
    """Every valid entry of the cache file; a missing or corrupt file reads as empty."""
    p = path or default_path()
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        log.warning("hardware_cache_unreadable", path=str(p), error=str(e))
        return []
    if not isinstance(raw, dict) or raw.get("version") != CACHE_VERSION:
        log.warning("hardware_cache_version", path=str(p))
        return []
    entries = []
    for item in raw.get("entries", []) if isinstance(raw.get("entries"), list) else []:
        try:
            entries.append(Calibration.model_validate(item))
        except ValidationError:
            log.warning("hardware_cache_entry_invalid", path=str(p))
    return entries


def _write(path: Path, entries: list[Calibration]) -> None:
    """Atomic replace: temp file in the same folder, fsync, rename (caller holds the lock)."""
    data = {"version": CACHE_VERSION,
            "entries": [e.model_dump(mode="json", exclude={"cached"}) for e in entries[-MAX_ENTRIES:]]}
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def store(entry: Calibration, path: Path | None = None) -> None:
    """Add ``entry``, replacing any entry with the same probe key."""
    p = path or default_path()
    with _lock(p):
        kept = [e for e in load_entries(p) if e.probe_key != entry.probe_key]
        _write(p, [*kept, entry])


def forget(key: str, path: Path | None = None) -> bool:
    """Drop the entry with probe key ``key``; True when one was dropped."""
    p = path or default_path()
    with _lock(p):
        entries = load_entries(p)
        kept = [e for e in entries if e.probe_key != key]
        if len(kept) == len(entries):
            return False
        _write(p, kept)
        return True


def _lookup(entries: list[Calibration], key: str, quick: bool) -> Calibration | None:
    for e in reversed(entries):
        # A quick request takes any entry; a full one only a full measurement.
        if e.probe_key == key and (quick or not e.quick):
            return e.model_copy(update={"cached": True})
    return None


def measure_peak(backend: str = "auto", device: str = "auto", quick: bool = False,
                 limits: Limits | None = None) -> Record:
    """Run the judge in calibration mode: the device's copy bandwidth and matmul peaks.

    Returns the verified record (``peaks`` and ``environment``); raises
    :class:`InfrastructureError` when the sandbox cannot produce one.
    """
    record = run_judge_mode(mode_request("measure_peak", device, quick=quick), {},
                            backend=backend, limits=limits)
    if record.errors or record.peaks is None:
        msg = record.errors[0].message if record.errors else "no peaks"
        raise InfrastructureError(f"calibration failed: {msg}")
    return record


def get_peaks(backend: str = "auto", device: str = "auto", refresh: bool = False, quick: bool = False,
              *, path: Path | None = None, measure: Measure | None = None,
              probe: Probe | None = None) -> Calibration:
    """Calibrated peaks for ``(backend, device)``: from the cache when the probe matches.

    ``refresh`` forces a new measurement. ``quick`` asks for the short calibration and
    accepts any cached entry; a full request ignores cached quick entries. ``measure``
    and ``probe`` replace :func:`measure_peak` and :func:`host_probe`
    (tests). Raises :class:`grader.errors.InfrastructureError` when calibration fails.
    """
    p = path or default_path()
    be, dev = resolve_target(backend, device) if probe is None else (backend, device)
    pr = (probe or host_probe)(be, dev)
    key = probe_key(pr)
    if not refresh:
        hit = _lookup(load_entries(p), key, quick)
        if hit is not None:
            return hit
    # Measure outside the lock: a calibration takes long, and two concurrent ones only
    # cost time (the later store wins), never consistency.
    payload = (measure or measure_peak)(be, dev, quick)
    if payload.peaks is None:
        raise InfrastructureError("calibration returned no peaks")
    entry = Calibration(probe_key=key, probe=pr, fingerprint=sandbox_fingerprint(payload.environment, dev, be),
                        backend=be, device=dev, quick=quick,
                        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                        peaks=dict(payload.peaks), environment=dict(payload.environment))
    for problem in _probe_disagrees(pr, entry.fingerprint):
        log.warning("probe_disagrees_with_sandbox", problem=problem)
    store(entry, p)
    return entry


def _probe_disagrees(probe: Mapping[str, Any], fp: Mapping[str, Any]) -> list[str]:
    """Where the host probe and the sandbox's report name different software (bwrap only)."""
    out = []
    for k in ("torch", "triton", "python"):
        a, b = probe.get(k), fp.get(k)
        # package metadata omits the local build tag that torch.__version__ carries
        # ("2.11.0" vs "2.11.0+cu130" on the H200 host): the same build, not a disagreement
        if a and b and str(a).split("+")[0] != str(b).split("+")[0]:
            out.append(f"{k}: host {a}, sandbox {b}")
    return out
