"""``kgrader`` as a subprocess, with the judge under the launcher stand-in when needed.

Usage: ``python3 tests/conformance/kgrader_cli.py run TASK CANDIDATE ...`` (any kgrader
arguments). Exactly the real CLI, except that until ``sandbox/launcher/launch.py`` exists the
backend is wrapped in :class:`standin_launch.StandinLaunch`, as in the in-process tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import standin_launch

import grader.evaluate as evaluate_module
from grader.cli.app import entry

if not standin_launch.using_real_launcher():
    _real = evaluate_module.select_backend
    evaluate_module.select_backend = lambda name, device: standin_launch.StandinLaunch(
        _real(name, device)
    )

if __name__ == "__main__":
    entry()
