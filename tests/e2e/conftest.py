"""What the end-to-end tests share: the command line as a subprocess, and the bwrap skip.

* A test (or a module, through ``pytestmark``) marked ``pytest.mark.bwrap`` is skipped
  where bubblewrap is not installed: one rule here instead of a ``skipif`` in every module.
* :func:`kgrader` runs ``python -m grader.cli`` from the repository root, as a user would;
  :func:`kgrader_json` adds ``--json`` and returns the parsed document.

Test modules import the helpers: ``from .conftest import kgrader``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ("--backend", "bwrap", "--device", "cpu")  # the e2e tests' sandbox on this machine
T = TypeVar("T")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if shutil.which("bwrap") is not None:
        return
    skip = pytest.mark.skip(reason="bubblewrap is not installed")
    for item in items:
        if item.get_closest_marker("bwrap") is not None:
            item.add_marker(skip)


def kgrader(*args: str | Path, timeout: float = 900, env: Mapping[str, str] | None = None,
            no_traceback: bool = False) -> subprocess.CompletedProcess[str]:
    """``kgrader ARGS`` (``python -m grader.cli``) from the repository root, its output as
    text. ``env``: the whole environment (default: this one). ``no_traceback``: fail the
    test when stderr holds a Python traceback (every error must be a clear line)."""
    p = subprocess.run([sys.executable, "-m", "grader.cli", *map(str, args)],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env=None if env is None else dict(env))
    if no_traceback:
        assert "Traceback" not in p.stderr, p.stderr
    return p


def kgrader_json(*args: str | Path, timeout: float = 900,
                 env: Mapping[str, str] | None = None) -> tuple[int, Any, str]:
    """``kgrader ARGS --json``: (exit code, the parsed document, stderr); never a traceback."""
    p = kgrader(*args, "--json", timeout=timeout, env=env, no_traceback=True)
    return p.returncode, json.loads(p.stdout), p.stderr


# How often a test's agent tries a call the host's load spoiled (an infrastructure verdict
# says "retry"; beside two evaluations per core three in a row were seen).
AGENT_TRIES = 6


def agent_retries(errors: list[dict[str, Any]]) -> bool:
    """What an agent loop retries: the host's fault (timing_unreliable, a harness timeout:
    origin infrastructure), or the escape check a loaded 2-core host can trip."""
    return bool(errors) and all(e["origin"] == "infrastructure" or e["code"] == "work_escaped_timing"
                                for e in errors)


def retried(call: Callable[[], T], again: Callable[[T], bool], *, tries: int = AGENT_TRIES,
            wait_s: float = 0.0) -> T:
    """``call()``, called again while ``again(result)`` says the host's load spoiled it, as
    an agent or a submitter does: at most ``tries`` calls, the n-th retry after waiting
    ``wait_s * n`` seconds (a little longer each time, for the load to pass). The last
    result, for the test to judge."""
    res = call()
    for n in range(1, tries):
        if not again(res):
            break
        time.sleep(wait_s * n)
        res = call()
    return res
