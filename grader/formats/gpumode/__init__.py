"""GPU MODE (wire contract ``gpumode``): ``custom_kernel(generate_input(**args))``.

The importer is :mod:`grader.formats.gpumode.importer`; the problem's own
``check_implementation`` may decide values (the convention's ``checker_decides``).
"""

from __future__ import annotations

from grader.formats.base import FieldFormat, Importer
from grader.formats.gpumode import importer
from grader.task import TaskSpec


def expected_call(spec: TaskSpec) -> str:
    return f"{spec.entrypoint}(data), returning the output"


FORMAT = FieldFormat(
    name="gpumode", contract="gpumode", expected_call=expected_call,
    agent_text=("GPU MODE: define {entry}(data) returning the output, for data as made by the "
                "reference's {inputs}; the reference's {reference} is the trusted answer."),
    importer=Importer(
        find=importer.find_problems, make=importer.import_problem, policy="default",
        help="""GPU MODE problem folders (reference.py + task.yml, or a folder of them).
    Submissions define custom_kernel(data)."""))
