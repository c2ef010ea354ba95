"""GPU diagnostics a model can act on: hardware counters, advice, and the memory checker.

* :mod:`~grader.diagnostics.ncu` -- the fixed Nsight Compute metric set and its reading;
* :mod:`~grader.diagnostics.advice` -- the rule table (``diagnostics/advice.toml``) that
  turns counters into at most five sentences per kernel;
* :mod:`~grader.diagnostics.run` -- the ``profile`` judge mode run;
* :mod:`~grader.diagnostics.records` -- a judge record's diagnostics read into the report's;
* :mod:`~grader.diagnostics.locate` -- finding the tools on the host, binding them into
  the sandbox, and the ``sanitize`` request of an evaluation;
* :mod:`~grader.report.diagnostics_model` -- record and report shapes.

The sandbox side lives in ``sandbox/tools/profiling.py`` (tool-wrapped runners, the profile
mode, the sanitized correctness stage) and ``sandbox/tools/counters.py`` (parsers).
"""

from grader.report.diagnostics_model import (
    Diagnostics,
    KernelCounters,
    KernelDiagnostics,
    SanitizerResult,
)

__all__ = ["Diagnostics", "KernelCounters", "KernelDiagnostics", "SanitizerResult"]
