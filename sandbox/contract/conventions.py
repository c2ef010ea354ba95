"""The calling conventions the harness knows, by wire value: the sandbox's format registry.

A task's ``contract`` (:data:`sandbox.contract.wire.Contract`) names how the harness calls a
candidate. Every fact the harness (and the host, which imports this module) needs about a
convention is a field of its :class:`Convention` here, never a comparison with the wire
value elsewhere: whether the task names a trusted problem (a generator and a reference)
instead of declaring its tensors, whether the call returns its outputs, whether the entry
point is a class built with the reference's constructor arguments, whether a problem's own
checker may decide the values. The problem classes behind each are registered by the same
value in :mod:`sandbox.problem.field` (``FIELD_PROBLEMS``).

A field format on the host (``grader/formats/``) declares which convention it grades
under; one that reuses a convention here needs no sandbox code. A value not listed here is
refused (:func:`convention` raises :class:`~sandbox.contract.wire.WireFormatError`): fail
closed. Standard library only (both sides import it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.contract.wire import Contract, WireFormatError


@dataclass(frozen=True)
class Convention:
    contract: Contract  # the wire value, as tasks, requests and reports record it
    takes_problem: bool  # a trusted generator makes the tensors (ProblemWire); else declared
    returns_outputs: bool  # the call returns its outputs; else writes preallocated ones
    builds_entry: bool  # the entry point is a class built with the reference's init arguments
    checker_decides: bool  # the problem's checker may decide values and dtypes (unless strict)


# destination passing (kgrader's native), KernelBench modules, GPU MODE functions
NATIVE: Contract = "dps"
CONVENTIONS: dict[str, Convention] = {c.contract: c for c in (
    Convention(NATIVE, takes_problem=False, returns_outputs=False, builds_entry=False,
               checker_decides=False),
    Convention("module", takes_problem=True, returns_outputs=True, builds_entry=True,
               checker_decides=False),
    Convention("gpumode", takes_problem=True, returns_outputs=True, builds_entry=False,
               checker_decides=True),
)}


def convention(contract: str) -> Convention:
    """The convention of wire value ``contract``; an unknown one is refused."""
    found = CONVENTIONS.get(contract)
    if found is None:
        raise WireFormatError(f"contract {str(contract)[:40]!r} is no calling convention the "
                              f"harness knows ({', '.join(CONVENTIONS)})")
    return found
