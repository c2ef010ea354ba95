"""What a field format is on the host: one :class:`FieldFormat` object.

A format owns everything about it that the host does: its name (``kgrader task import
<name>``), the wire contract its tasks are graded under (a calling convention the harness
registers, :mod:`sandbox.contract.conventions`), its importer, the quirks its problems'
source shows, how the task calls a candidate (the agent's description, the report's
wording). Code outside a format's package asks the registry (:mod:`grader.formats.registry`)
and the convention's facts; it never compares a task's contract with a value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.formats.common import ImportedTask
from grader.formats.quirks import Quirk
from grader.task import TaskSpec
from sandbox.contract.conventions import Convention, convention
from sandbox.contract.wire import Contract


@dataclass(frozen=True)
class Importer:
    """``kgrader task import <format> PATH``: the problems under PATH as kgrader tasks."""

    find: Callable[[Path], list[Path]]  # PATH itself or the problems under it (TaskError: none)
    make: Callable[..., ImportedTask]  # (problem, *, policy, overrides) -> the task
    policy: str  # the --policy default the imported tasks name
    help: str  # the command's help text


def no_quirks(spec: TaskSpec, reference: str) -> list[Quirk]:
    return []


def no_call(spec: TaskSpec) -> str | None:
    return None


@dataclass(frozen=True)
class FieldFormat:
    name: str  # the import command's name; also how the docs call it
    contract: Contract  # the wire value its tasks record and are graded under
    # The agent's account of the contract (grader.agent.describe); formatted with entry,
    # args (the tensors in call order), inputs and reference (the problem's names).
    agent_text: str
    # How the task calls the entry point, for a report that names it (None: not a call).
    expected_call: Callable[[TaskSpec], str | None] = no_call
    importer: Importer | None = None
    # Quirks its problems' source shows (``kgrader task check``, before the sandbox runs).
    static_quirks: Callable[[TaskSpec, str], list[Quirk]] = no_quirks

    @property
    def convention(self) -> Convention:
        return convention(self.contract)
