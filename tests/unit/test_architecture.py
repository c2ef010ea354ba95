"""The layout rules docs/architecture.md states, checked against the imports themselves."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What grader/ may import from sandbox/: the contract, and the statistics both sides must
# compute identically (the judge stops a sequential test where the host decides it), and
# the one rule that makes a candidate's text safe (the judge's record, the host's reports),
# and the catalogue of error codes both sides create and check, and the calling conventions
# the harness registers (pure data: a field format on the host declares the one it uses).
SHARED = {"sandbox.contract.wire", "sandbox.contract.stats", "sandbox.contract.rules", "sandbox.contract.text",
          "sandbox.contract.codes", "sandbox.contract.conventions"}
MAX_LINES = 450

# Function-local imports that stay function-local, with why. Everything else is imported at
# module level; the cycle check covers these as well, so none of them can hide a cycle.
LAZY_PACKAGES = {
    "docker": "the docker SDK: ~0.1 s on every CLI start, and only docker runs need it",
    "requests": "the docker SDK's transport, imported with it (docker runs only)",
    "pynvml": "optional: NVIDIA hosts only",
    "ray": "optional extra (ray): distributed leaderboard workers only",
    "mcp": "optional extra (mcp): the MCP server only",
    "mcp_types": "optional extra (mcp): the MCP server only",
    "uvicorn": "optional extra: the grading service only",
    "psycopg": "optional extra (postgres): the grading service's PostgreSQL store only",
    "torch": "sandbox: imported only in the phase and process that may (after the lockdown, "
             "after the secret is gone); never by the host",
    "triton": "sandbox: as torch",
}
LAZY_IMPORTERS = {
    "grader.cli": "the top of the graph (nothing imports it): a command's machinery loads when "
                  "the command runs, so `kgrader --help` and a usage error stay fast",
}
# Sandbox modules' own lazy imports: the order in which a sandbox process may load code is
# part of its isolation (docs/architecture.md), so these are the role split's to decide.
_ORDER = "loaded only after the lockdown / the secret is gone (it imports torch)"
_LOCKDOWN = ("harden is every principal's first import (runner boot, problem process, judge): "
             "what only the lockdown needs is loaded by the lockdown")
_TOOL = ("a profiled runner's entry: the runner's code (torch) only after the tool's own "
         "arguments are parsed, as sandbox.runner.boot orders it")
_DOCKER_SDK = ("they import the docker SDK at module level: the docker backend's class loads "
               "them where a container is checked, run or looked for, so the registry, the "
               "stop and the sweep reach its lifecycle without the SDK")
LAZY_EDGES = {
    ("sandbox.judge.main", "sandbox.judge.prestart"): _ORDER,
    ("sandbox.judge.main", "sandbox.judge.run"): _ORDER,
    ("sandbox.problem.main", "sandbox.problem.serve"): _ORDER + ", then the problem's code",
    ("sandbox.problem.serve", "sandbox.launcher.gpu_share"): "CUDA buffers only",
    ("sandbox.runner.main", "sandbox.launcher.gpu_share"): "CUDA buffers only",
    ("sandbox.judge.device", "sandbox.tools.nvml"): "CUDA only",
    ("sandbox.judge.isolation", "sandbox.tools.nvml"): "CUDA only",
    ("sandbox.launcher.harden", "sandbox.launcher.identity"): _LOCKDOWN,
    ("sandbox.launcher.harden", "sandbox.launcher.seccomp"): _LOCKDOWN,
    ("sandbox.judge.run", "sandbox.judge.evaluation"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.judge.acceptance"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.judge.benchmark"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.judge.correctness"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.judge.task_check"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.judge.rule_calibration"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.tools.profiling"): "a mode loads only its own stages",
    ("sandbox.judge.run", "sandbox.tools.peaks"): "a mode loads only its own stages",
    ("sandbox.tools.tool_runner", "sandbox.launcher.proc"): _TOOL,
    ("grader.backends.docker.backend", "grader.backends.docker.prereqs"): _DOCKER_SDK,
    ("grader.backends.docker.backend", "grader.backends.docker.cleanup"): _DOCKER_SDK,
    ("grader.backends.docker.backend", "grader.backends.docker.supervise"): _DOCKER_SDK,
    ("grader.backends.docker.images", "grader.backends.docker.prereqs"): _DOCKER_SDK,
    ("sandbox.tools.tool_runner", "sandbox.runner.main"): _TOOL,
    ("grader.logs", "structlog"): "imported for the first event written at the level: with "
                                  "the rich, pygments, attrs and asyncio it brings, 0.1-0.16 s "
                                  "of every command's start, which mostly writes none",
}
# TYPE_CHECKING imports that still close a loop, each an annotation of the module that
# calls back (a Protocol or a split removes them; the test below keeps the list honest).
ANNOTATION_CYCLE_EDGES: dict[tuple[str, str], str] = {}
# Role rules' exceptions, with why.
ROLE_EXCEPTIONS: dict[tuple[str, str], str] = {}


@functools.cache
def _modules() -> dict[str, Path]:
    out = {}
    for pkg in ("grader", "sandbox"):
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = p
    return out


@functools.cache
def _imports(path: Path, top_level_only: bool) -> frozenset[str]:
    """Modules ``path`` imports; ``from pkg import mod`` names ``pkg.mod`` when that is a
    module (loading a submodule is no dependency on the package's own code)."""
    mods = _modules()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            subs = {f"{n.module}.{a.name}" for a in n.names} & set(mods)
            found.update(subs)
            if len(subs) < len(n.names):
                found.add(n.module)
        elif isinstance(n, ast.Import):
            found.update(a.name for a in n.names)
    return frozenset(m for m in found if m.split(".")[0] in ("grader", "sandbox"))


def test_sandbox_imports_nothing_from_grader() -> None:
    for name, path in _modules().items():
        if name.startswith("sandbox"):
            bad = {m for m in _imports(path, False) if m.startswith("grader")}
            assert not bad, f"{name} imports {bad}"


def test_grader_imports_only_the_shared_contract_from_sandbox() -> None:
    mods = _modules()
    for name, path in mods.items():
        if name.startswith("grader"):
            used = {m for m in _imports(path, False) if m.startswith("sandbox")}
            # "from sandbox import wire" names the module sandbox.contract.wire
            bad = used - SHARED
            assert not bad, f"{name} imports {bad} from the sandbox (only {SHARED})"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph(exempt: frozenset[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    """Every import of every module: module level, inside functions, under TYPE_CHECKING."""
    mods = _modules()
    return {name: {m for m in _imports(path, False) if m in mods and m != name
                   and (name, m) not in exempt}
            for name, path in mods.items()}


def test_no_import_cycles_of_any_kind() -> None:
    """A function-local or TYPE_CHECKING import that closes a loop is the loop, hidden: the
    graph holds every import, wherever it is written (bar the listed annotation edges)."""
    cycles = _cycles(_graph(frozenset(ANNOTATION_CYCLE_EDGES)))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_listed_annotation_cycles_are_annotations_only_and_still_there() -> None:
    """An exempt edge must be a TYPE_CHECKING import and still close a loop; one that is
    gone leaves the list (the list only shrinks)."""
    mods = _modules()
    full = _graph()
    for (importer, imported), why in ANNOTATION_CYCLE_EDGES.items():
        assert why and imported in _type_checking_imports(mods[importer]), (importer, imported)
        assert imported not in _imports(mods[importer], True), (importer, imported)
        part = next((c for c in _cycles(full) if importer in c), [])
        assert imported in part, f"{importer} -> {imported} closes no loop: drop it from the list"


def _type_checking_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    blocks = [n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    found: set[str] = set()
    for block in blocks:
        for n in ast.walk(block):
            if isinstance(n, ast.ImportFrom) and n.module:
                found |= {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
    return found


def _function_local_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import written inside a function or class body."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[int] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:  # module level, also under a module-level if/try (TYPE_CHECKING, optional)
        stmt = todo.pop()
        top.add(id(stmt))
        if isinstance(stmt, ast.If | ast.Try):
            todo += [*stmt.body, *stmt.orelse, *getattr(stmt, "finalbody", []),
                     *(s for h in getattr(stmt, "handlers", []) for s in h.body)]
    mods = _modules()
    out: list[tuple[int, str]] = []
    for n in ast.walk(tree):
        if id(n) in top:
            continue
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            subs = sorted({f"{n.module}.{a.name}" for a in n.names} & set(mods))
            out += [(n.lineno, m) for m in subs or [n.module]]
        elif isinstance(n, ast.Import):
            out += [(n.lineno, a.name) for a in n.names]
    return out


def _lazy_reason(importer: str, module: str) -> str | None:
    if importer.startswith("grader.cli."):
        return LAZY_IMPORTERS["grader.cli"]
    if (importer, module) in LAZY_EDGES:
        return LAZY_EDGES[(importer, module)]
    for prefix, why in LAZY_PACKAGES.items():
        if module == prefix or module.startswith(prefix + "."):
            return why
    return None


def test_function_local_imports_are_only_the_listed_lazy_ones() -> None:
    """Imports live at module level, where a reader (and the cycle check) sees them; the
    ones that stay inside a function are listed above with their reason. A standard-library
    module is in no cycle of ours and costs nothing, so it is not listed."""
    unlisted = [f"{name}:{line} {module}" for name, path in sorted(_modules().items())
                for line, module in _function_local_imports(path)
                if module.split(".")[0] not in sys.stdlib_module_names
                and _lazy_reason(name, module) is None]
    assert not unlisted, "function-local imports without a listed reason: " + ", ".join(unlisted)


def test_every_listed_lazy_edge_is_still_a_function_local_import() -> None:
    mods = _modules()
    stale = [edge for edge in LAZY_EDGES
             if edge[1] not in {m for _, m in _function_local_imports(mods[edge[0]])}]
    assert not stale, f"listed lazy imports that are gone (drop them): {stale}"


def _sandbox_imports(name: str) -> set[str]:
    return {m for m in _imports(_modules()[name], False) if m.startswith("sandbox")}


def test_the_contract_imports_only_the_standard_library_and_itself() -> None:
    """The host imports the contract: nothing in it may pull in torch or a sandbox role."""
    for name, path in _modules().items():
        if name.startswith("sandbox.contract"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            tops = {n.module.split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
            tops |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names}
            bad = {t for t in tops if t not in sys.stdlib_module_names and t != "sandbox"}
            bad |= {m for m in _sandbox_imports(name)
                    if m != "sandbox" and not m.startswith("sandbox.contract")}
            assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize(("role", "allowed", "refused"), [
    ("sandbox.launcher", ("sandbox.contract", "sandbox.launcher"), ()),
    ("sandbox.runner", (), ("sandbox.judge", "sandbox.tools")),
    ("sandbox.problem", (), ("sandbox.judge",)),
])
def test_each_sandbox_role_imports_only_what_its_role_may(
        role: str, allowed: tuple[str, ...], refused: tuple[str, ...]) -> None:
    """The launcher runs as uid 0 before the drop: it may lean on the contract only. The
    runner shares a process with the candidate: judge and tool code never loads there. The
    problem's process runs untrusted task code: it never holds judge code."""
    for name in _modules():
        if not name.startswith(role + "."):
            continue
        used = _sandbox_imports(name) - {"sandbox"}
        bad = {m for m in used if (allowed and not m.startswith(allowed))
               or m.startswith(refused)} - {e[1] for e in ROLE_EXCEPTIONS if e[0] == name}
        assert not bad, f"{name} ({role}) imports {bad}"


def test_every_listed_role_exception_is_still_needed() -> None:
    stale = [e for e, why in ROLE_EXCEPTIONS.items()
             if not why or e[1] not in _sandbox_imports(e[0])]
    assert not stale, f"role exceptions no longer used (drop them): {stale}"


def test_no_module_is_longer_than_the_house_limit() -> None:
    long = {name: n for name, p in _modules().items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
