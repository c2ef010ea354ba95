"""The report's builders: a judge's record and the backend's outcome made into the report
(:mod:`~grader.grading.summary`), the shared-device rule (:mod:`~grader.grading.shared_device`)
and the candidate-facing copy (:mod:`~grader.grading.redact`). The report's schema, which
these build, is :mod:`grader.report`, a floor below (docs/architecture.md)."""
