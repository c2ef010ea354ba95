"""kgrader: a sandboxed grader for untrusted GPU kernel code (host side).

Nothing in this package imports candidate code, torch or triton: the host only scans,
stages, launches the sandbox and validates what comes back.
"""

__version__ = "0.1.0"

from grader import logs as _logs  # noqa: F401  (events go to stderr, never stdout)
