"""The runner's first steps: lock the process down, then run ``sandbox.runner.main``.

A separate entry point so that the runner is undumpable, checked and under its seccomp
filter before ``sandbox.runner.main`` imports torch (whose import already runs a lot of code and
reads files other processes can write, such as caches).
"""

from __future__ import annotations

import os
import runpy
import sys

from sandbox.launcher import harden


def main() -> None:
    try:
        harden.lock_down_runner()
    except harden.LockdownFailed as e:
        sys.stderr.write(f"kgrader-runner: lockdown failed: {e}\n")
        sys.stderr.flush()
        os._exit(harden.LOCKDOWN_EXIT)
    runpy.run_module("sandbox.runner.main", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
