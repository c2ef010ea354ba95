"""Suite-wide settings: nothing a test grades may reach the user's own experience store or
build cache."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Set at import, before any test module (or subprocess it starts) reads it. Tests that
# exercise the store pass their own path or set the variable themselves.
if "KGRADER_EXPERIENCE" not in os.environ:
    _store = tempfile.mkdtemp(prefix="kgrader-test-store-")
    os.environ["KGRADER_EXPERIENCE"] = os.path.join(_store, "experience.sqlite")
    # The suite's own store goes with the session (every run used to leave one in /tmp).
    atexit.register(shutil.rmtree, _store, ignore_errors=True)

# The build cache (grader.builds) likewise: the suite's own, gone with the session.
if "KGRADER_BUILD_CACHE" not in os.environ:
    _builds = tempfile.mkdtemp(prefix="kgrader-test-builds-")
    os.environ["KGRADER_BUILD_CACHE"] = _builds
    atexit.register(shutil.rmtree, _builds, ignore_errors=True)
