"""docs/architecture.md checked against the tree: what it names exists, and it names everything.

The module map is a document people read instead of the code, so it must not drift: every
module file it names exists, every package has a section of its own (a heading naming
``pkg/``), and every module of a package is named in that section (as ``name.py``, or as
``name`` where a sentence lists a package's modules by name).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# `x.py` names in the doc that are files kgrader writes, not modules.
NOT_MODULES = {
    "best.py": "the records folder's current best candidate (grader/records.py writes it)",
}
# Only these top-level folders hold what a `path/x.py` name may point at.
TREES = ("grader/", "sandbox/", "tests/", "bench/", "scripts/", "examples/")
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)
PACKAGE_IN_HEADING = re.compile(r"`((?:grader|sandbox)(?:/\w+)*)/`")
TICKED = re.compile(r"`([^`\s]+)`")


def _packages() -> dict[str, Path]:
    """``grader/backends/docker`` -> its folder, for every package of the two trees."""
    return {str(p.parent.relative_to(ROOT)): p.parent
            for tree in ("grader", "sandbox") for p in (ROOT / tree).rglob("__init__.py")}


def _sections() -> list[tuple[str | None, str]]:
    """(package the heading names, or None; the section's text up to the next heading)."""
    doc = DOC.read_text(encoding="utf-8")
    heads = list(HEADING.finditer(doc))
    out = []
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        named = PACKAGE_IN_HEADING.search(h.group(2))
        out.append((named.group(1) if named else None, doc[h.start():end]))
    return out


def _resolve(name: str, package: str | None) -> Path | None:
    """The file a ticked ``x.py`` name points at: from the repository root when it starts
    with a top-level folder, else inside the section's package; ``None`` for other names."""
    if not name.endswith(".py") or name in NOT_MODULES:
        return None
    if name.startswith(TREES):
        return ROOT / name
    return ROOT / (package or "") / name


def test_every_module_file_the_doc_names_exists() -> None:
    missing = [f"{pkg or 'top'}: {name}" for pkg, text in _sections()
               for name in TICKED.findall(text)
               if (path := _resolve(name, pkg)) is not None and not path.is_file()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_package_has_a_section_of_its_own() -> None:
    headed = {pkg for pkg, _ in _sections() if pkg is not None}
    missing = sorted(set(_packages()) - headed)
    assert not missing, f"docs/architecture.md has no heading for the packages {missing}"


def test_every_module_of_a_package_is_named_in_its_section() -> None:
    """``__init__.py`` is the package itself and ``__main__.py`` its ``python -m`` entry."""
    text_of: dict[str, str] = {}
    for pkg, text in _sections():
        if pkg is not None:
            text_of[pkg] = text_of.get(pkg, "") + text
    unnamed: dict[str, list[str]] = {}
    for pkg, folder in sorted(_packages().items()):
        names = set(TICKED.findall(text_of.get(pkg, "")))
        files = {_resolve(n, pkg) for n in names}
        left = [f.name for f in sorted(folder.glob("*.py"))
                if f.name not in ("__init__.py", "__main__.py")
                and f not in files and f.stem not in names]
        if left:
            unnamed[pkg] = left
    assert not unnamed, ("docs/architecture.md does not name these modules in their "
                         f"package's section: {unnamed}")


def test_a_file_the_doc_names_is_found_and_a_missing_one_is_not() -> None:
    """The resolver the checks rest on, on names the doc really uses."""
    assert _resolve("evaluate.py", "grader") == ROOT / "grader" / "evaluate.py"
    assert _resolve("docker/config.py", "grader/backends") == \
        ROOT / "grader" / "backends" / "docker" / "config.py"
    assert _resolve("grader/cli/tasks.py", "grader/tasks") == ROOT / "grader" / "cli" / "tasks.py"
    assert _resolve("best.py", "grader") is None
    assert _resolve("launch", "grader/cli") is None
    gone = _resolve("no_such_module.py", "grader")
    assert gone is not None and not gone.exists()
