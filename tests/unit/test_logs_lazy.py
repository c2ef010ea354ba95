"""The host's loggers import structlog only for an event that is written (grader.logs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe(code: str, **env: str) -> tuple[dict[str, object], list[str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KGRADER_LOG")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True, timeout=120, env={**base, **env})
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr.strip().splitlines()


def test_events_below_the_level_import_nothing_and_write_nothing() -> None:
    got, err = _probe("""
import json, sys
import grader.cli.app
from grader.logs import get_logger, step
get_logger("kgrader.t").info("quiet", n=1)
step("scan", task="t")
print(json.dumps({"loaded": "structlog" in sys.modules}))
""")
    assert got == {"loaded": False} and err == []


def test_an_event_at_the_level_is_written_as_before() -> None:
    got, err = _probe("""
import json, sys
from grader.logs import get_logger
log = get_logger("kgrader.t")
log.warning("loud", n=1)
try:
    raise ValueError("boom")
except ValueError:
    log.exception("failed", what="x")
print(json.dumps({"loaded": "structlog" in sys.modules}))
""")
    events = [json.loads(line) for line in err]
    assert got == {"loaded": True}
    assert [(e["event"], e["level"]) for e in events] == [("loud", "warning"), ("failed", "error")]
    assert events[0]["n"] == 1 and "ValueError: boom" in events[1]["exception"]


def test_the_environment_and_configure_set_the_level_before_any_import() -> None:
    code = """
import json, sys
from grader.logs import configure, get_logger
if len(sys.argv) > 1:
    configure("debug", "json")
get_logger("kgrader.t").info("shown")
get_logger("kgrader.t").debug("maybe")
print(json.dumps({"loaded": "structlog" in sys.modules}))
"""
    got, err = _probe(code, KGRADER_LOG="info")
    assert got == {"loaded": True} and [json.loads(x)["event"] for x in err] == ["shown"]
    out = subprocess.run([sys.executable, "-c", code, "debug"], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=120)
    assert [json.loads(x)["event"] for x in out.stderr.strip().splitlines()] == ["shown", "maybe"]
