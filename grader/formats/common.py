"""What the task importers share: names, reading problem files, writing task folders."""

from __future__ import annotations

import ast
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from grader.astparse import parse_module
from grader.errors import TaskError
from grader.formats.quirks import Quirk
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
    quirks: list[Quirk] = field(default_factory=list)


class ProblemPathError(TaskError):
    """A path an importer was asked to follow leaves the problem's tree, is a symbolic link
    (or passes through one) or is not a regular file. Nothing is written."""

    code = "unsafe_problem_path"


def _refuse(what: str, entry: str, why: str) -> ProblemPathError:
    return ProblemPathError(f"{what} {entry!r}: {why}; kgrader follows only relative paths to "
                            "regular files inside the problem's own tree, through no symbolic link")


def confined_file(root: Path, start: Path, entry: str, what: str) -> Path:
    """``start / entry``, refused unless it stays inside ``root`` at every step, passes
    through no symbolic link and names a regular file.

    ``root`` is the tree the problem may reach (resolved here: the operator named it);
    ``start`` the folder ``entry`` is relative to, itself under ``root``. Every component
    is checked with ``lstat`` as it is walked (no ``resolve()``, which would follow the
    very links it should refuse). ``what`` names the entry in the error (``task.yml
    files: entry``)."""
    if "\x00" in entry or not entry.strip():
        raise _refuse(what, entry, "an empty or NUL-carrying path")
    rel = PurePosixPath(entry)
    if rel.is_absolute():
        raise _refuse(what, entry, "an absolute path")
    top = Path(os.path.realpath(root))
    try:
        lead = Path(os.path.abspath(start)).relative_to(Path(os.path.abspath(root)))
    except ValueError:
        raise _refuse(what, str(start), f"a folder outside {root}") from None
    parts = [*lead.parts, *rel.parts]
    here: list[str] = []
    for i, part in enumerate(parts):
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                raise _refuse(what, entry, f"it leaves {top} through '..'")
            here.pop()
            continue
        here.append(part)
        path = top.joinpath(*here)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise _refuse(what, entry, f"{path} does not exist") from None
        except OSError as e:
            raise _refuse(what, entry, f"{path}: {e.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(what, entry, f"{path} is a symbolic link")
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            raise _refuse(what, entry, f"{path} is not a folder")
        if last and not stat.S_ISREG(st.st_mode):
            raise _refuse(what, entry, f"{path} is not a regular file")
    if not here:
        raise _refuse(what, entry, "it names the tree itself, not a file")
    return top.joinpath(*here)


def read_confined(path: Path, what: str) -> str:
    """The text of a file :func:`confined_file` returned, opened without following a link
    (the last component may have been swapped for one since) and checked again."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise _refuse(what, str(path), f"cannot be opened without following a link ({e.strerror})"
                      ) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _refuse(what, str(path), "not a regular file")
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise TaskError(f"{what} {path}: larger than {MAX_SOURCE_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not UTF-8") from None


MAX_SOURCE_BYTES = 4 << 20


def task_name(stem: str, prefix: str) -> str:
    """A task identifier from a file or folder name (``1_Square_matmul_`` -> ``kb_1_square_matmul``)."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_").lower() or "problem"
    return f"{prefix}{name}"[:64]


def read_source(path: Path, what: str = "problem file") -> tuple[str, ast.Module]:
    """A problem file's text and syntax tree; :class:`TaskError` when it is neither.

    ``path`` is opened without following a final link; callers confine it first
    (:func:`confined_file`)."""
    if not os.path.lexists(path):
        raise TaskError(f"{what} not found: {path}")
    text = read_confined(path, what)
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
    if os.path.lexists(folder) and not force:
        raise TaskError(f"{folder} exists (pass --force to replace it)")
    folder.mkdir(parents=True, exist_ok=True)
    if os.path.islink(folder):
        raise ProblemPathError(f"{folder} is a symbolic link: kgrader writes a task folder only "
                               "into a real folder")
    raw = task.spec.model_dump(mode="json", exclude_defaults=True)
    _write_new(folder / "task.json", json.dumps(raw, indent=2) + "\n")
    _write_new(folder / "reference.py", task.reference)
    return folder


def _write_new(path: Path, text: str) -> None:
    """Write ``path``, replacing a file there but never writing through a link."""
    if os.path.islink(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def confined_task_folder(task_dir: Path) -> None:
    """A task folder's ``task.json`` and ``reference.py`` are regular files in it, not
    links to files elsewhere (``kgrader task check`` reads and runs them)."""
    for name in ("task.json", "reference.py"):
        if os.path.lexists(task_dir / name):
            confined_file(task_dir, task_dir, name, "task file")
