"""What the task importers share: names, reading problem files, writing task folders."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grader.astparse import parse_module
from grader.errors import TaskError
from grader.task import TaskSpec, format_validation_error

# Public seeds of an imported task's correctness stage (the benchmark's are secret).
DEFAULT_SEEDS = [17, 29, 41]


# Imported tasks decide "faster than the current best" with the controlled rule: its
# false-accept rate is bounded (the seed rule's is not; it stays available by override).
IMPORTED_ACCEPTANCE: dict[str, Any] = {"rule": "controlled"}


@dataclass
class ImportedTask:
    """A task made from a problem in another format, before it is written."""

    spec: TaskSpec
    reference: str
    source: Path
    notes: list[str] = field(default_factory=list)


def task_name(stem: str, prefix: str) -> str:
    """A task identifier from a file or folder name (``1_Square_matmul_`` -> ``kb_1_square_matmul``)."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_").lower() or "problem"
    return f"{prefix}{name}"[:64]


def read_source(path: Path) -> tuple[str, ast.Module]:
    """A problem file's text and syntax tree; :class:`TaskError` when it is neither."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskError(f"problem file not found: {path}") from None
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not UTF-8") from None
    except OSError as e:
        raise TaskError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return text, parse_module(text, filename=str(path))
    except SyntaxError as e:
        raise TaskError(f"{path}:{e.lineno}: not valid Python: {e.msg}") from None


def top_level_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def names_used(node: ast.AST) -> set[str]:
    """Every name ``node`` reads."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def validate(raw: dict[str, Any], where: Path) -> TaskSpec:
    try:
        return TaskSpec.model_validate(raw)
    except ValidationError as e:
        raise TaskError(f"{where}: the imported task is invalid\n{format_validation_error(e)}") from None


def merge(raw: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """``raw`` with ``overrides`` applied one level deep (``{"benchmark": {"samples": 5}}``)."""
    out = dict(raw)
    for key, value in (overrides or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def write_task(task: ImportedTask, out: Path, force: bool = False) -> Path:
    """``out/<name>/`` with ``task.json`` and the trusted ``reference.py``."""
    folder = out / task.spec.name
    if folder.exists() and not force:
        raise TaskError(f"{folder} exists (pass --force to replace it)")
    folder.mkdir(parents=True, exist_ok=True)
    raw = task.spec.model_dump(mode="json", exclude_defaults=True)
    (folder / "task.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    (folder / "reference.py").write_text(task.reference, encoding="utf-8")
    return folder
