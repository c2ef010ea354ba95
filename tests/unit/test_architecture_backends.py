"""A sandbox backend is named only in its own package and in the registry.

Any other module of ``grader/`` or ``sandbox/`` that names a backend (its name as a
string literal, a string naming its package, or an import of its package) is knowledge
of that backend outside it: the generic layer asks the registry and the backend's class
instead. Exceptions are listed with their reason. Also: every path the doc's "How to add
a sandbox backend" names exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from grader.backends import registry

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = tuple(registry._BUILTIN)
REGISTRY = "grader.backends.registry"
# module -> (backend, why) it may name.
ALLOWED: dict[str, tuple[str, str]] = {
    "grader.cli.docker": ("docker", "docker's own command group (`kgrader image build`, and "
                          "`sandbox cleanup --no-docker`): a CLI module, and grader.backends "
                          "does not import click"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("grader", "sandbox"):
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _named(path: Path, backend: str) -> list[str]:
    """Where ``path`` names ``backend``: string constants equal to its name or naming its
    package, imports of its package."""
    package = f"grader.backends.{backend}"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and (
                n.value == backend or n.value == package or n.value.startswith(package + ".")):
            hits.append(f"{n.lineno}: string {n.value!r}")
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            names = {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
            if any(m == package or m.startswith(package + ".") for m in names):
                hits.append(f"{n.lineno}: import from {n.module}")
        elif isinstance(n, ast.Import):
            hits += [f"{n.lineno}: import {a.name}" for a in n.names
                     if a.name == package or a.name.startswith(package + ".")]
    return hits


def test_no_module_outside_a_backends_package_names_it() -> None:
    assert set(BACKENDS) >= {"bwrap", "docker"}
    found = []
    for name, path in sorted(_modules().items()):
        if name == REGISTRY:
            continue
        for backend in BACKENDS:
            own = f"grader.backends.{backend}"
            if name == own or name.startswith(own + "."):
                continue
            if ALLOWED.get(name, ("", ""))[0] == backend:
                continue
            found += [f"{name}:{hit}" for hit in _named(path, backend)]
    assert not found, "a backend named outside its own package (ask the registry): " + \
        ", ".join(found)


def test_the_check_sees_a_name_and_an_import() -> None:
    """The scanner is not vacuous: it finds each way of naming a backend."""
    probe = ROOT / "grader" / "backends" / "base.py"
    src = ('x = "docker"\nfrom grader.backends.docker.config import LABEL\n'
           'import grader.backends.docker.cleanup\ny = "grader.backends.docker.cleanup"\n')
    tmp = probe.with_name("_probe_not_a_module.txt")
    tmp.write_text(src)
    try:
        assert len(_named(tmp, "docker")) == 4
        assert _named(tmp, "bwrap") == []
    finally:
        tmp.unlink()


def test_every_allowance_is_still_needed() -> None:
    mods = _modules()
    stale = [m for m, (backend, _) in ALLOWED.items()
             if m not in mods or not _named(mods[m], backend)]
    assert not stale, f"allowed modules that no longer name their backend (drop them): {stale}"


HOWTO = re.compile(r"^### How to add a sandbox backend\n(.*?)(?=^#{2,3} |\Z)", re.M | re.S)


def test_the_how_to_names_only_paths_that_exist() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = HOWTO.search(doc)
    assert section, 'docs/architecture.md lacks "### How to add a sandbox backend"'
    named = [t for t in re.findall(r"`([^`\s]+)`", section.group(1))
             if "/" in t and not t.startswith(("grader/backends/<", "tests/backends/<"))]
    assert len(named) >= 8, named
    missing = [t for t in named if not (ROOT / t.rstrip("/")).exists()]
    assert not missing, f"the how-to names paths that do not exist: {missing}"
