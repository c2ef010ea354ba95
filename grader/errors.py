"""The host's exception tree.

Two families, kept apart as isolate keeps ``XX`` apart from ``RE``/``TO``:

* :class:`UsageError` and its children: the caller gave us something we cannot use (bad
  task, bad policy, missing candidate). CLI exit code 2.
* :class:`InfrastructureError` and its children: kgrader or the machine failed (no
  bubblewrap, no image, dockerd gone). CLI exit code 2, report stage ``sandbox``.

A candidate's own failures are never exceptions on the host: they are values in the
report (:class:`grader.report.model.ReportError`). Every code here (a class's ``code``,
a ``code=`` argument) is one of the catalogue's host codes (:mod:`sandbox.contract.codes`,
``docs/errors.md``); tests/unit/test_error_catalogue.py refuses any other.
"""

from __future__ import annotations


class KgraderError(Exception):
    """Base of every error kgrader raises on purpose."""

    code: str = "error"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\nhint: {self.hint}"


class UsageError(KgraderError):
    """The caller's input cannot be used."""

    code = "usage"


class TaskError(UsageError):
    """A task folder or task.json is malformed."""

    code = "bad_task"


class CandidateFileError(UsageError):
    """A candidate file is missing, empty, binary, not UTF-8 or too large."""

    code = "bad_candidate_file"


class CandidateTooLargeError(CandidateFileError):
    """A candidate's text exceeds the size cap (the API answers it ``too_large``)."""


class PolicyError(UsageError):
    """A policy file is malformed or names something unknown."""

    code = "bad_policy"


class InfrastructureError(KgraderError):
    """kgrader or the machine failed; the candidate is not to blame."""

    code = "infrastructure"


class SandboxUnavailableError(InfrastructureError):
    """The selected backend cannot start a sandbox on this machine."""

    code = "sandbox_unavailable"


class HostDiskFullError(InfrastructureError):
    """The host's temporary folder cannot hold an evaluation folder (full, or unusable)."""

    code = "disk_full"


class ImageMissingError(SandboxUnavailableError):
    """The docker image is not present locally (kgrader never pulls)."""

    code = "image_missing"
