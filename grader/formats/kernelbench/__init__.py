"""KernelBench (wire contract ``module``): ``ModelNew(*get_init_inputs())(*get_inputs())``.

The importer is :mod:`grader.formats.kernelbench.importer`; the quirks a problem file shows
are read from its syntax here, before the sandbox runs it.
"""

from __future__ import annotations

from grader.astparse import parse_module
from grader.formats import quirks
from grader.formats.base import FieldFormat, Importer
from grader.formats.kernelbench import importer
from grader.formats.quirks import Quirk
from grader.task import TaskSpec


def static_quirks(spec: TaskSpec, reference: str) -> list[Quirk]:
    """The quirks the problem's source shows: size products, the model's own."""
    if spec.problem is None:
        return []
    try:
        tree = parse_module(reference, filename="reference.py")
    except SyntaxError:
        return []  # the sandbox's check says why the reference does not load
    dims = set(spec.shapes.tune[0]) if spec.shapes.tune else set()
    exprs = {k: (v, src) for k, (v, src) in importer.sizes(tree).items()
             if src is not None and k in dims}
    return quirks.size_products(exprs, list(spec.problem.varied)) + \
        quirks.kernelbench_model(tree, spec.problem.reference, spec.problem.init or "")


FORMAT = FieldFormat(
    name="kernelbench", contract="module", static_quirks=static_quirks,
    agent_text=("KernelBench: define class ModelNew(torch.nn.Module) built with the same "
                "constructor arguments as the reference's Model (get_init_inputs) and whose "
                "forward(*inputs) returns the outputs, as the reference's Model.forward does."),
    importer=Importer(
        find=importer.find_problems, make=importer.import_problem, policy="cuda-inline",
        help="""KernelBench problem files (FILE or a folder of them): Model, get_inputs,
    get_init_inputs, size constants. Submissions define ModelNew."""))
