"""Suite-wide settings: nothing a test grades may reach the user's own experience store."""

from __future__ import annotations

import os
import tempfile

# Set at import, before any test module (or subprocess it starts) reads it. Tests that
# exercise the store pass their own path or set the variable themselves.
os.environ.setdefault("KGRADER_EXPERIENCE",
                      os.path.join(tempfile.mkdtemp(prefix="kgrader-test-store-"),
                                   "experience.sqlite"))
