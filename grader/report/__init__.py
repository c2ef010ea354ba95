"""The report's schema (:mod:`~grader.report.model`, :mod:`~grader.report.diagnostics_model`),
reading the judge's record (:mod:`~grader.report.record`), and saying a report in words
(:mod:`~grader.report.render`, :mod:`~grader.report.verdict`, :mod:`~grader.report.withhold`).
Its builders are :mod:`grader.grading`, a floor above (docs/architecture.md)."""
