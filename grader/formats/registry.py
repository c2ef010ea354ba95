"""The field formats by name: the one place a format is listed (one line each).

``kgrader task import <name>`` is one command over :func:`importers`; the host's
task-facing wording (the agent's description, the report's call) comes from
:func:`for_contract`: the first format registered for a task's wire contract owns it (the
built-ins are registered first, so an out-of-tree format that reuses a convention adds its
importer and takes the wording of the format it reuses). A name or contract nobody
registered is refused with a :class:`~grader.errors.TaskError`; a format whose contract
the harness does not know (:mod:`sandbox.contract.conventions`) cannot be registered.
"""

from __future__ import annotations

from grader.errors import TaskError
from grader.formats import dps, gpumode, kernelbench
from grader.formats.base import FieldFormat
from sandbox.contract.conventions import CONVENTIONS

_FORMATS: dict[str, FieldFormat] = {}


def register(fmt: FieldFormat) -> None:
    """Add ``fmt``; its name must be new and its contract one the harness knows."""
    if fmt.name in _FORMATS:
        raise ValueError(f"a field format named {fmt.name!r} is registered already")
    if fmt.contract not in CONVENTIONS:
        raise ValueError(f"format {fmt.name!r}: contract {fmt.contract!r} is no calling "
                         f"convention the harness knows ({', '.join(CONVENTIONS)})")
    _FORMATS[fmt.name] = fmt


def unregister(name: str) -> None:
    """Drop an out-of-tree format (a test's); the built-ins stay."""
    if name in BUILTIN:
        raise ValueError(f"{name!r} is a built-in format")
    _FORMATS.pop(name, None)


register(dps.FORMAT)
register(kernelbench.FORMAT)
register(gpumode.FORMAT)
BUILTIN = frozenset(_FORMATS)


def formats() -> list[FieldFormat]:
    return list(_FORMATS.values())


def get(name: str) -> FieldFormat:
    fmt = _FORMATS.get(name)
    if fmt is None:
        raise TaskError(f"no field format named {name!r} ({', '.join(_FORMATS)})")
    return fmt


def for_contract(contract: str) -> FieldFormat:
    """The format that owns wire contract ``contract`` (the first registered for it)."""
    for fmt in _FORMATS.values():
        if fmt.contract == contract:
            return fmt
    raise TaskError(f"no field format grades contract {str(contract)[:40]!r}")


def importers() -> dict[str, FieldFormat]:
    """The formats ``kgrader task import`` offers, by name."""
    return {name: f for name, f in _FORMATS.items() if f.importer is not None}
