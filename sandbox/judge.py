"""Judge: the trusted entry point inside the sandbox. It never imports the candidate.

Order of work (DESIGN.md): read and delete the secret file, harden this process, start one
runner per untrusted module, then compile -> correctness -> benchmark -> accept, and write
one authenticated result record. The host believes only a record whose MAC verifies with
the key that was in the secret file, which no runner ever saw.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import tempfile
import traceback
from typing import Any

from sandbox import harden
from sandbox.proc import RunnerFailure

OUT = os.environ.get("KGRADER_OUT", "/kg/out")
SECRET = os.path.join(OUT, ".judge-secret.json")
RESULT = os.path.join(OUT, "result.json")


def read_secret() -> dict[str, Any]:
    fd = os.open(SECRET, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        data = os.read(fd, 64 << 20)
    finally:
        os.close(fd)
    os.unlink(SECRET)  # fails closed: no runner starts while the secret is still readable
    secret: dict[str, Any] = json.loads(data)
    return secret


def write_result(key: bytes, payload: dict[str, Any]) -> None:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    # A fresh unpredictable name (O_EXCL): a runner cannot pre-plant it as a directory,
    # a FIFO or a link.
    fd, tmp = tempfile.mkstemp(dir=OUT, prefix=".judge-")
    with os.fdopen(fd, "w") as f:
        json.dump({"payload": body, "mac": mac}, f)
    os.replace(tmp, RESULT)


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


def main() -> int:
    harden.make_undumpable()
    secret = read_secret()
    key = bytes.fromhex(secret.pop("key"))
    device = secret["device"]
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    # torch is imported only now, after the secret file is gone and the process is hardened.
    try:
        from sandbox.evaluation import Evaluation, StageError
    except ImportError as e:
        write_result(key, {"stage": "sandbox", "device": device, "environment": {}, "warnings": [],
                           "errors": [{"stage": "sandbox", "code": "missing_dependency",
                                       "message": f"the sandbox's Python cannot import {e.name!r}: "
                                       "install torch and triton for the interpreter kgrader runs "
                                       f"with (README, 'On a GPU host'). {e}",
                                       "line": None, "detail": {"module": e.name}}]})
        return 0

    if secret.get("mode") == "measure_peak":
        return _measure_peak(key, secret)
    try:
        ev = Evaluation(secret)
    except Exception as e:  # the task's reference or the device failed: not the candidate
        write_result(key, {"stage": "sandbox", "device": device, "environment": {}, "warnings": [],
                           "errors": [{"stage": "sandbox", "code": "judge_setup_failed",
                                       "message": "".join(traceback.format_exception(e))[-3000:],
                                       "line": None, "detail": {}}]})
        return 0
    try:
        if secret.get("mode") == "calibrate":
            from sandbox.rule_calibration import run_calibration

            ev.stage = "accept"
            run_calibration(ev)
        elif secret.get("mode") == "profile":  # hardware counters under ncu
            from sandbox.profiling import run_profile

            run_profile(ev)
        else:
            ev.run()
    except StageError as e:
        ev.errors.append(e.error)
    except RunnerFailure as e:  # pragma: no cover - evaluation converts these itself
        ev.errors.append({"stage": ev.stage or "compile", "code": e.code, "message": e.message,
                          "line": e.line, "detail": e.detail or {}})
    except Exception as e:  # the judge's own bug: an infrastructure fault, never a pass
        ev.errors.append({"stage": "sandbox", "code": "judge_error",
                          "message": "".join(traceback.format_exception(e))[-3000:],
                          "line": None, "detail": {}})
    finally:
        ev.shutdown()
    planted = sorted(os.listdir(OUT))
    if planted:
        # Only the judge may write here, and it has written nothing yet: anything present
        # was planted by a runner (a forged record, a blocking directory, a link).
        ev.errors.append({"stage": ev.stage or "compile", "code": "out_tampered",
                          "message": f"the candidate wrote into the judge's output folder: {planted[:5]}",
                          "line": None, "detail": {"entries": planted[:20]}})
        _clear(planted)
    write_result(key, ev.payload())
    return 0


def _measure_peak(key: bytes, secret: dict[str, Any]) -> int:
    """Calibration mode: no candidate at all, only the device's ceilings."""
    from sandbox.device import device_environment
    from sandbox.peaks import measure_peak

    payload: dict[str, Any] = {"stage": None, "errors": [], "warnings": [], "device": secret["device"],
                               "environment": device_environment(secret["device"])}
    try:
        payload["peaks"] = measure_peak(secret["device"], bool(secret.get("quick", False)))
    except Exception as e:
        payload["errors"] = [{"stage": "sandbox", "code": "calibration_failed",
                              "message": "".join(traceback.format_exception(e))[-3000:],
                              "line": None, "detail": {}}]
    write_result(key, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
