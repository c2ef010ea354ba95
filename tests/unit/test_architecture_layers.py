"""The floors docs/architecture.md draws for ``grader/``, checked against every import.

Each package (``grader/backends``) and top-level module (``grader/evaluate.py``) stands on
one floor of the drawing; an import from a module of one to a module of another may point
to its own floor or lower, never up, and the packages' graph has no loop at all (two
packages on one floor may not import each other, even through a third).
"""

from __future__ import annotations

import re

import test_architecture as arch

DOC = arch.ROOT / "docs" / "architecture.md"
DRAWING = re.compile(r"```floors\n(.*?)```", re.S)


def _floors() -> dict[str, int]:
    """Unit -> floor number (0 = the bottom) as drawn."""
    found = DRAWING.search(DOC.read_text(encoding="utf-8"))
    assert found, "docs/architecture.md has no ```floors drawing"
    rows = [r.split() for r in found.group(1).strip().splitlines()]
    floor: dict[str, int] = {}
    for i, row in enumerate(reversed(rows)):
        for unit in row:
            assert unit not in floor, f"{unit} is drawn on two floors"
            floor[unit] = i
    return floor


def _unit(module: str) -> str | None:
    """``grader.backends.docker.config`` -> ``backends``; ``grader.evaluate`` -> ``evaluate``;
    the package ``grader`` itself (its ``__init__``: the version and logging set-up) -> None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "grader" and len(parts) > 1 else None


def _edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for name, deps in arch._graph().items():
        a = _unit(name)
        for d in deps:
            b = _unit(d)
            if a and b and a != b:
                out.setdefault((a, b), []).append(f"{name} -> {d}")
    return out


def _units() -> set[str]:
    return {u for m in arch._modules() if (u := _unit(m))}


def test_every_package_and_top_level_module_is_drawn_once() -> None:
    drawn, real = set(_floors()), _units()
    assert not real - drawn, f"not drawn in docs/architecture.md's floors: {sorted(real - drawn)}"
    assert not drawn - real, f"drawn but not in grader/: {sorted(drawn - real)}"


def _upward(floor: dict[str, int], edges: dict[tuple[str, str], list[str]]) -> list[str]:
    return [f"{a} (floor {floor[a]}) -> {b} (floor {floor[b]}): {', '.join(why[:3])}"
            for (a, b), why in sorted(edges.items())
            if a in floor and b in floor and floor[b] > floor[a]]


def test_no_import_points_up() -> None:
    up = _upward(_floors(), _edges())
    assert not up, "imports running up the drawn floors:\n" + "\n".join(up)


def test_the_packages_graph_has_no_loop() -> None:
    graph: dict[str, set[str]] = {u: set() for u in _units()}
    for a, b in _edges():
        graph[a].add(b)
    loops = arch._cycles(graph)
    assert not loops, "packages that import each other: " + "; ".join(" <-> ".join(c) for c in loops)


def test_the_report_schema_floor_stands_on_the_bottom_one_only() -> None:
    """The schema (``report``) is imported from above by every package that speaks of a
    report; it reads only the bottom floor, so no builder's import can hide in it."""
    floor = _floors()
    above = {b for (a, b) in _edges() if a == "report" and floor.get(b, 0) >= floor["report"]}
    assert not above, f"grader/report imports from its own floor or above: {sorted(above)}"


def test_the_check_sees_an_upward_import() -> None:
    """The rule itself, on a drawing where ``report`` sat below ``measure`` as before."""
    floor = {"measure": 2, "report": 1, "task": 0}
    edges = {("report", "measure"): ["grader.report.summary -> grader.measure.accept"],
             ("measure", "report"): ["grader.measure.accept -> grader.report.model"],
             ("report", "task"): ["grader.report.redact -> grader.task"]}
    assert _upward(floor, edges) == [
        "report (floor 1) -> measure (floor 2): grader.report.summary -> grader.measure.accept"]
