"""kgrader's native format, destination passing: ``launch(*inputs, *outputs) -> None``.

Its tasks are written by hand (``kgrader task new`` scaffolds one); there is no importer.
"""

from __future__ import annotations

from grader.formats.base import FieldFormat
from grader.task import TaskSpec


def expected_call(spec: TaskSpec) -> str:
    names = ", ".join(t.name for t in spec.inputs + spec.outputs)
    outs = ", ".join(t.name for t in spec.outputs)
    return (f"{spec.entrypoint}({names}): the inputs, then the preallocated outputs "
            f"({outs}), written in place")


FORMAT = FieldFormat(
    name="dps", contract="dps", expected_call=expected_call,
    agent_text=("Destination passing: define {entry}({args}) -> None. It receives the inputs, "
                "then the preallocated outputs, in this order, and must write every output in "
                "place (outputs are poisoned before each call). Return nothing."))
