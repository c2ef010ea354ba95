"""Tool plumbing of the diagnostics: command prefixes, tool lookup, reading what the
runner could have planted, the tool runner's arguments and private copies, host binds."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.diagnostics import locate
from grader.errors import UsageError
from sandbox.contract import wire
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import SanitizeWire
from sandbox.launcher import harden
from sandbox.tools import profiling
from sandbox.tools.tool_runner import on_private_copies, parse


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho Version 2099.1.0.0\n")
    path.chmod(0o755)
    return path


def test_ncu_prefix_profiles_only_the_chosen_calls_without_clock_control() -> None:
    p = profiling.ncu_prefix("/opt/ncu", ["a__b.sum", "c__d.pct"], "/tmp/kg-ncu-x.csv", 2, 3, 64)
    args = list(p)
    assert args[0] == "/opt/ncu"
    for flag, value in (("--clock-control", "none"), ("--profile-from-start", "off"),
                        ("--print-units", "base"), ("--page", "raw"), ("--launch-count", "64"),
                        ("--metrics", "a__b.sum,c__d.pct"), ("--log-file", "/tmp/kg-ncu-x.csv")):
        assert args[args.index(flag) + 1] == value
    # The tool starts the tool runner, whose own arguments end at "--".
    assert args[-6:] == [sys.executable, "-m", "sandbox.tools.tool_runner", "--profile-calls", "2:3", "--"]


def test_sanitizer_prefix_turns_the_allocator_cache_off_and_names_the_tool() -> None:
    args = list(profiling.sanitizer_prefix("/cuda/bin/compute-sanitizer", "racecheck", "/tmp/s.txt"))
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in args[:2]
    assert args[args.index("--tool") + 1] == "racecheck"
    assert args[args.index("--log-file") + 1] == "/tmp/s.txt"
    assert args[-2:] == ["--private-args", "--"]


def test_find_tool_prefers_the_hint_and_explains_a_miss(tmp_path: Path) -> None:
    tool = _exe(tmp_path / "nsight" / "ncu")
    path, why = profiling.find_tool("ncu", str(tool))
    assert path == str(tool) and why is None
    assert profiling.tool_version(str(tool)) == "Version 2099.1.0.0"
    (tmp_path / "nsight" / "ncu").chmod(0o644)  # not executable: not a tool
    path, why = profiling.find_tool("no-such-tool-kg", str(tool))
    assert path is None and why is not None and "no-such-tool-kg is not installed" in why


def test_read_capped_refuses_links_and_fifos_and_caps(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text("key")
    link = tmp_path / "log"
    link.symlink_to(target)
    assert profiling.read_capped(str(link)) == ("", False)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert profiling.read_capped(str(fifo)) == ("", False)
    big = tmp_path / "big"
    big.write_bytes(b"a" * 100)
    assert profiling.read_capped(str(big), cap=10) == ("a" * 10, True)
    assert not big.exists()  # consumed
    assert profiling.read_capped(str(tmp_path / "missing")) == ("", False)
    assert stat.S_ISREG(target.stat().st_mode)


def test_tool_runner_reads_the_command_line_the_judge_really_builds() -> None:
    from sandbox.launcher.proc import runner_argv

    argv = ["--profile-calls", "2:3", "--",
            *runner_argv(5, 6, 7, "/kg/in/candidate.py", "launch", "cuda")]
    args, window, private = parse(argv)
    assert window == (2, 3) and private is False
    assert (args.read_fd, args.write_fd, args.fd_sock, args.module, args.entry, args.device) == (
        5, 6, 7, "/kg/in/candidate.py", "launch", "cuda")
    args, window, private = parse(["--private-args", "--", *runner_argv(1, 2, 3, "m.py", "run", "cpu")])
    assert window is None and private is True and args.entry == "run"
    with pytest.raises(SystemExit):
        parse(["--private-args"])
    with pytest.raises(SystemExit):  # not the runner's entry point: refused, not guessed
        parse(["--", sys.executable, "-m", "sandbox.other", "--read-fd", "1"])


def test_tool_runner_locks_down_before_it_imports_torch() -> None:
    """Under a tool the runner is as confined as ever: lockdown fails closed (this test
    process is not a runner: wrong uid) and exits before torch is imported."""
    from sandbox.launcher.proc import runner_argv

    r = subprocess.run([sys.executable, "-m", "sandbox.tools.tool_runner", "--private-args", "--",
                        *runner_argv(0, 1, 2, "m.py", "launch", "cpu")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == harden.LOCKDOWN_EXIT, r.stderr
    imported = subprocess.run([sys.executable, "-c", "import sys, sandbox.tools.tool_runner; "
                               "print('torch' in sys.modules)"], capture_output=True, text=True,
                              timeout=60)
    assert imported.stdout.strip() == "False", imported.stderr
    assert "lockdown failed" in r.stderr


def test_private_copies_are_distinct_and_copied_back() -> None:
    x, out = torch.arange(4.0), torch.full((4,), float("nan"))
    seen: list[int] = []

    def fn(a: torch.Tensor, b: torch.Tensor) -> None:
        seen.extend([a.data_ptr(), b.data_ptr()])
        b.copy_(a * 2)
        a.add_(1)  # an input mutation must stay visible to the judge

    on_private_copies(fn, (x, out))
    assert x.data_ptr() not in seen and out.data_ptr() not in seen
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0] and x.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_finding_becomes_a_correctness_failure_naming_kernel_and_access() -> None:
    from sandbox.tools.counters import parse_sanitizer_log

    text = (Path(__file__).resolve().parents[1] / "data/sanitizer/h200_memcheck_unmasked_tail.txt").read_text()
    err = profiling._finding_error("memcheck", parse_sanitizer_log(text), None)
    assert isinstance(err, StageFailure)
    assert err.error.stage == "correctness" and err.error.code == "out_of_bounds_access"
    assert err.error.origin == "candidate"  # a finding is the candidate's fault
    msg = err.error.message
    assert "found 34 error(s)" in msg and "write of 4 bytes" in msg and "scale_unmasked_kernel" in msg
    assert "117 bytes after an allocation of 4000012 bytes" in msg
    race = (Path(__file__).resolve().parents[1] / "data/sanitizer/h200_racecheck_missing_sync.txt").read_text()
    rerr = profiling._finding_error("racecheck", parse_sanitizer_log(race), None)
    assert rerr.error.code == "shared_memory_race" and "transpose_nosync" in rerr.error.message
    assert rerr.error.origin == "candidate"


def test_sanitize_request_resolves_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locate, "tool_hint", lambda name: None)
    assert locate.sanitize_request(None, "none") is None
    assert locate.sanitize_request(None, "racecheck") == SanitizeWire(tool="racecheck")
    assert locate.sanitize_request("default", "none") == SanitizeWire(tool="memcheck")
    assert locate.sanitize_request("default", "racecheck") == SanitizeWire(tool="racecheck")
    assert locate.sanitize_request("none", "memcheck") is None
    with pytest.raises(UsageError, match="unknown sanitizer tool"):
        locate.sanitize_request("valgrind", "none")


def test_tool_folders_outside_the_bound_roots_become_read_only_binds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KGRADER_BWRAP_RO", raising=False)
    locate.make_visible(Path("/usr/local/cuda/bin/ncu"))  # under /usr: already bound
    assert "KGRADER_BWRAP_RO" not in os.environ
    tool = _exe(tmp_path / "cuda" / "bin" / "compute-sanitizer")
    locate.make_visible(tool)
    locate.make_visible(tool)  # idempotent
    assert os.environ["KGRADER_BWRAP_RO"] == str(tmp_path / "cuda")
    from grader.backends.bwrap import _python_roots

    assert str(tmp_path / "cuda") in _python_roots()


# --- the diagnostics' part of the wire contract ------------------------------------------


def _request(**fields: object) -> wire.JudgeRequest:
    from grader.task import load_task

    spec, ref = load_task(Path(__file__).resolve().parents[2] / "examples" / "vector_add_small")
    return wire.JudgeRequest(wire_version=wire.WIRE_VERSION, key="00" * 32, mode="profile",
                             device="cuda", limits=wire.LimitsWire(10.0, 20.0, None), phase_seed=7,
                             task=spec.to_wire(), reference=ref, candidate="/kg/in/candidate.py",
                             **fields)  # type: ignore[arg-type]


def test_sanitize_and_profile_requests_round_trip_and_are_parsed_strictly() -> None:
    req = _request(sanitize=SanitizeWire(tool="racecheck", path="/usr/local/cuda/bin/x"),
                   profile=wire.ProfileWire(metrics=("a__b.sum",), ncu=None, warmup_calls=1))
    assert wire.request_from_json(wire.dumps(req)) == req
    for mutate in (lambda r: r["sanitize"].update(tool="valgrind"),
                   lambda r: r["profile"].update(launch_count=3),
                   lambda r: r["profile"].update(profiled_calls="2")):
        raw = json.loads(wire.dumps(req))
        mutate(raw)
        with pytest.raises(wire.WireFormatError):
            wire.request_from_json(json.dumps(raw))


def _record(diag: wire.DiagnosticsRecord) -> wire.Record:
    return wire.Record(wire_version=wire.WIRE_VERSION, stage="correctness", errors=(), warnings=(),
                       device="cuda", environment={}, diagnostics=diag)


def _read(tmp_path: Path, rec: wire.Record | dict[str, Any]) -> wire.Record:
    import hashlib
    import hmac

    from grader.report.record import read_result

    body = wire.dumps(rec) if isinstance(rec, wire.Record) else json.dumps(rec)
    key = b"k" * 32
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"payload": body,
                             "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}))
    return read_result(p, key, 1 << 20)


FINDING = wire.FindingRecord(kind="out_of_bounds", space="global", access="write", size=4,
                             kernel="k", thread=(40, 0, 0), block=(15, 0, 0), address="0x7f",
                             nearest={"distance_bytes": 1, "side": "after", "allocation": "0x7e",
                                      "allocation_bytes": 4000})


def test_record_diagnostics_round_trip_into_the_report_shapes(tmp_path: Path) -> None:
    from grader.diagnostics.records import build_diagnostics

    rec = _record(wire.DiagnosticsRecord(
        profile=wire.ProfileRecord(kernels=(wire.KernelRecord(id=0, name="k", metrics={"x__y": 1.0}),),
                                   calls=1, dims={"N": 8}),
        sanitizer=wire.SanitizerRecord(tool="memcheck", ran=True, wall_s=1.5, findings=(FINDING,),
                                       error_count=1)))
    got = _read(tmp_path, rec)
    assert got == rec
    d = build_diagnostics(got.diagnostics)
    assert d.sanitizer is not None and d.sanitizer.overhead_s == 1.5
    assert d.sanitizer.findings[0].thread == [40, 0, 0]
    assert d.sanitizer.findings[0].nearest == FINDING.nearest


def test_record_diagnostics_that_break_the_contract_or_the_caps_are_refused(tmp_path: Path) -> None:
    from grader.report.record import ResultProblem

    raw = dataclasses.asdict(_record(wire.DiagnosticsRecord(
        sanitizer=wire.SanitizerRecord(tool="memcheck", findings=(FINDING,)))))
    raw["diagnostics"]["sanitizer"]["findings"][0]["kind"] = "leak"
    with pytest.raises(ResultProblem) as e:
        _read(tmp_path, raw)
    assert e.value.code == "result_malformed" and e.value.authentic
    flood = _record(wire.DiagnosticsRecord(
        sanitizer=wire.SanitizerRecord(tool="memcheck", findings=(FINDING,) * 21)))
    with pytest.raises(ResultProblem, match="caps"):
        _read(tmp_path, flood)
    long_text = _record(wire.DiagnosticsRecord(sanitizer=wire.SanitizerRecord(
        tool="memcheck", findings=(dataclasses.replace(FINDING, text="x" * 5000),))))
    with pytest.raises(ResultProblem, match="invalid field"):
        _read(tmp_path, long_text)
