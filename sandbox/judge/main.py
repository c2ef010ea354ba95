"""Judge: the trusted entry point inside the sandbox. It never imports the candidate.

Order of work (docs/architecture.md, `sandbox/judge/`): read and delete the secret request, harden this process, then
compile -> correctness -> benchmark -> accept, each stage starting its own runners, and
write one authenticated :class:`sandbox.contract.wire.Record`. The host believes only a record
whose MAC verifies with the key that was in the request, which no runner ever saw.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable

_STARTED = (time.time(), time.monotonic())

from sandbox.contract.failure import infrastructure
from sandbox.contract.wire import (
    BUILDS_NAME,
    EXIT_HOST_GONE,
    GATE_NAME,
    PROFILE_ENV,
    RESULT_NAME,
    SECRET_NAME,
    TETHER_ENV,
    WIRE_VERSION,
    ErrorWire,
    JudgeRequest,
    Record,
    WireFormatError,
    dumps,
    request_from_json,
)
from sandbox.judge import progress
from sandbox.launcher import builds, driver, harden

OUT = os.environ.get("KGRADER_OUT", "/kg/out")
SECRET = os.path.join(OUT, SECRET_NAME)
RESULT = os.path.join(OUT, RESULT_NAME)




def tether() -> None:
    """With ``KGRADER_TETHER=stdin`` (the docker backend, which attaches to the container's
    stdin with ``stdin_once``): when the host process that started this sandbox dies, the
    daemon closes that stdin, and the judge ends at once, and with it the container (its
    init exits, the kernel kills the rest of the pid namespace). Nothing is left running
    for the next sweep; bwrap has ``--die-with-parent`` for the same. The host writes
    nothing: any read, data or end of file, means the host is gone or broken. Runners get
    ``/dev/null`` as stdin, so no candidate holds or reads this descriptor."""
    if os.environ.get(TETHER_ENV) != "stdin":
        return

    def watch() -> None:
        with contextlib.suppress(OSError):
            os.read(0, 1)
        os._exit(EXIT_HOST_GONE)

    threading.Thread(target=watch, name="kgrader-tether", daemon=True).start()


def read_secret() -> bytes:
    fd = os.open(SECRET, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        data = os.read(fd, 64 << 20)
    finally:
        os.close(fd)
    os.unlink(SECRET)  # fails closed: no runner starts while the secret is still readable
    return data


def write_result(key: bytes, record: Record) -> None:
    body = dumps(record)
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    # A fresh unpredictable name (O_EXCL): nothing can pre-plant it as a directory, a FIFO
    # or a link.
    fd, tmp = tempfile.mkstemp(dir=OUT, prefix=".judge-")
    with os.fdopen(fd, "w") as f:
        json.dump({"payload": body, "mac": mac}, f)
    os.replace(tmp, RESULT)


def _error_record(device: str, err: ErrorWire) -> Record:
    return Record(wire_version=WIRE_VERSION, stage=err.stage if err.stage == "sandbox" else None,
                  errors=(err,), warnings=(), device=device, environment={})


def _infra(code: str, message: str, detail: dict[str, object] | None = None) -> ErrorWire:
    return infrastructure(code, message[-3000:], detail).error  # a traceback's tail


def _clear(names: list[str]) -> None:
    """Remove what a runner planted in OUT, without following any link."""
    import shutil

    for name in names:
        path = os.path.join(OUT, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def wait_gate() -> float:
    """Block until the host gives this evaluation the device (grader.backends.gate); the
    seconds waited. Raises OSError when the gate is not a FIFO or closes without a grant."""
    t = time.monotonic()
    path = os.path.join(OUT, GATE_NAME)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # blocks until the host opens its end
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a FIFO")
        if not os.read(fd, 16):
            raise OSError("the host closed the gate without a grant")
    finally:
        os.close(fd)
    os.unlink(path)  # before any candidate code runs: the output folder holds nothing else
    return time.monotonic() - t


def _parse(data: bytes) -> tuple[bytes, JudgeRequest | None, ErrorWire | None]:
    """The key (as early as it can be read) and the request, or why it cannot be used."""
    key = b""
    try:
        raw = json.loads(data)
        key = bytes.fromhex(raw["key"])
    except (ValueError, KeyError, TypeError):
        return key, None, None
    try:
        return key, request_from_json(data), None
    except WireFormatError as e:
        return key, None, _infra("wire_mismatch", str(e))


def _profiled(fn: Callable[..., Record], *args: object) -> Record:
    """``fn(*args)``; under :data:`PROFILE_ENV` (an operator's bench, bench/gpu_speed.sh)
    with cProfile, its hot spots printed to stderr (the report's ``stderr_tail``)."""
    if os.environ.get(PROFILE_ENV) != "1":
        return fn(*args)
    import cProfile
    import pstats

    prof = cProfile.Profile()
    try:
        return prof.runcall(fn, *args)
    finally:
        st = pstats.Stats(prof)
        for key, n in (("tottime", 18), ("cumulative", 14)):
            print(f"# judge profile by {key}: tottime cumtime calls where", file=sys.stderr)
            rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2 if key == "tottime" else 3])  # type: ignore[attr-defined]
            for (path, line, name), (_cc, nc, tt, ct, _) in rows[:n]:
                print(f"{tt:.3f} {ct:.3f} {nc} {os.path.basename(path)}:{line}:{name[:40]}",
                      file=sys.stderr)


def main() -> int:
    harden.make_undumpable()
    tether()
    key, req, problem = _parse(read_secret())
    if key:  # before any runner starts: the live steps' FIFO is the judge's alone
        progress.open_channel(OUT, key)
        progress.tell("judge", "start")
    if req is None:
        if key:
            write_result(key, _error_record("unknown", problem or _infra("bad_request", "unreadable")))
        return 0
    if not sys.flags.safe_path:  # the launcher sets PYTHONSAFEPATH: the shared /tmp is no import root
        write_result(key, _error_record(req.device, _infra(
            "runner_isolation_unavailable", "the judge runs without PYTHONSAFEPATH: a folder others "
            "can write could be on its import path; start it through `python3 -m sandbox.launcher.launch`")))
        return 0
    if req.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    # The secret is gone: start the runners now, so they import torch while the judge does.
    from sandbox.judge import prestart

    builds.configure(req.builds)  # closing runners copy their builds out for the host
    prestart.start(req)
    driver.start(req.device)  # beside torch's import below; no context before the grant
    # torch is imported only now, after the secret file is gone and the process is hardened.
    try:
        from sandbox.judge.run import run_mode
    except ImportError as e:
        write_result(key, _error_record(req.device, _infra(
            "missing_dependency", f"the sandbox's Python cannot import {e.name!r}: install torch "
            f"and triton for the interpreter kgrader runs with (README, 'On a GPU host'). {e}",
            {"module": e.name})))
        return 0
    if req.warm:
        if not req.gated:  # its sources arrive with the grant: without a gate there are none
            write_result(key, _error_record(req.device, _infra(
                "bad_request", "a warm request must be gated (grader.pool stages at the grant)")))
            return 0
        prestart.warm_up(req)  # stage modules imported, the processes started ahead quiet
    elif req.gated and req.mode == "calibrate":
        # Its runner pairs started ahead import torch now; none may still be importing
        # beside another sandbox's measurement, or its own, once the grant comes.
        prestart.settle(req.limits.compile_s)
    waited, started = 0.0, _STARTED
    if req.gated:
        try:
            waited = wait_gate()
        except OSError as e:
            write_result(key, _error_record(req.device, _infra(
                "gate_failed", f"the judge could not wait for its turn at the device: {e}")))
            return 0
        if req.warm:  # a warm judge's phases start at the grant: the wait was idle, not work
            waited, started = 0.0, (time.time(), time.monotonic())
    try:
        record = _profiled(run_mode, req, started, waited)
    except Exception as e:  # the judge's own bug: an infrastructure fault, never a pass
        record = _error_record(req.device, _infra("judge_error",
                                                  "".join(traceback.format_exception(e))))
    planted = sorted(os.listdir(OUT))
    if BUILDS_NAME in planted and builds.only_ours():  # the runners' builds, copied by the judge
        planted.remove(BUILDS_NAME)
    if planted:
        # Only the judge may write here, and it has written nothing yet: anything present
        # was planted by a runner (a forged record, a blocking directory, a link).
        tamper = ErrorWire(stage="integrity", code="out_tampered", origin="candidate",
                           message=f"the candidate wrote into the judge's output folder: {planted[:5]}",
                           detail={"entries": planted[:20]})
        record = Record(**{**record.__dict__, "errors": (*record.errors, tamper)})
        _clear(planted)
    write_result(key, record)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The record is written: skip the interpreter's teardown (torch's is slow), which
    # would only lengthen the sandbox's life.
    os._exit(code)
