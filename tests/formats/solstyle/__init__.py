"""A third field format, only in the tests: SOL-style problems (a function returning outputs).

A problem folder holds ``problem.py`` (``reference(inputs)`` returning the outputs,
``get_inputs(**sizes, seed)`` making the inputs) and ``sizes.json`` (``{"tune": [...],
"hidden": [...]}``, each a dict of integer sizes); a solution defines ``solution(inputs)``.
It reuses the harness's ``gpumode`` calling convention (a function of the generator's
data, returning outputs), so it needs no sandbox code: this package and one
``registry.register(FORMAT)`` line are the whole format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.errors import TaskError
from grader.formats.base import FieldFormat, Importer
from grader.formats.common import (
    DEFAULT_SEEDS,
    ImportedTask,
    confined_file,
    merge,
    read_confined,
    read_source,
    task_name,
    top_level_functions,
    validate,
)

NEEDED = ("reference", "get_inputs")


def find_problems(path: Path) -> list[Path]:
    """``path`` if it is a problem folder, else the problem folders under it."""
    if (path / "problem.py").is_file():
        return [path]
    found = sorted(p.parent for p in path.rglob("problem.py") if (p.parent / "sizes.json").is_file())
    if not found:
        raise TaskError(f"{path}: no SOL-style problem folders (problem.py beside sizes.json)")
    return found


def import_problem(folder: Path, *, policy: str = "default",
                   overrides: dict[str, Any] | None = None) -> ImportedTask:
    text, tree = read_source(confined_file(folder, folder, "problem.py", "problem file"))
    missing = [n for n in NEEDED if n not in top_level_functions(tree)]
    if missing:
        raise TaskError(f"{folder}/problem.py defines no {', '.join(missing)}()")
    sizes = json.loads(read_confined(confined_file(folder, folder, "sizes.json", "sizes"), "sizes"))
    raw: dict[str, Any] = {
        "name": task_name(folder.resolve().name, "sol_"),
        "description": f"SOL-style problem {folder.name}, imported by the tests' format",
        "tags": ["solstyle"],
        "contract": "gpumode",  # the harness's convention this format reuses
        "entrypoint": "solution",
        "problem": {"reference": "reference", "inputs": "get_inputs", "seed_arg": "seed"},
        "shapes": {"tune": sizes["tune"], "hidden": sizes.get("hidden", [])},
        "correctness": {"seeds": DEFAULT_SEEDS, "atol": 1e-5, "rtol": 1e-5},
        "policy": policy,
    }
    spec = validate(merge(raw, overrides), folder / "sizes.json")
    return ImportedTask(spec, text, folder, [f"{len(spec.shapes.tune)} tune, "
                                             f"{len(spec.shapes.hidden)} hidden shapes"])


FORMAT = FieldFormat(
    name="solstyle", contract="gpumode",
    agent_text="SOL-style: define {entry}(inputs) returning the outputs of {reference}(inputs).",
    importer=Importer(find=find_problems, make=import_problem, policy="default",
                      help="SOL-style problem folders (problem.py + sizes.json). "
                           "Solutions define solution(inputs)."))
