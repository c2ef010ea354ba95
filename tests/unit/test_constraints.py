"""constraints.txt (what scripts/setup.sh installs with) pins every dependency kgrader
declares, at a version each declaration accepts."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PINNED_EXTRAS = ("dev", "mcp", "ray", "service", "postgres")  # what setup.sh --dev installs


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep, f"not an exact pin: {line!r}"
        assert canonicalize_name(name) not in out, f"pinned twice: {name}"
        out[canonicalize_name(name)] = version
    return out


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in PINNED_EXTRAS:
        reqs += project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]


def test_every_declared_dependency_is_pinned_at_a_version_it_accepts() -> None:
    have = pins()
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in have, f"{req} is not pinned in constraints.txt"
        assert req.specifier.contains(have[name], prereleases=True), (
            f"constraints.txt pins {name}=={have[name]}, outside {req}")


def test_torch_is_left_to_setup_and_triton_is_pinned() -> None:
    have = pins()
    # setup.sh pins torch's CPU build itself; a constraint would fight a GPU host's build
    assert "torch" not in have
    assert "triton" in have
    assert "kgrader" not in have


def test_setup_installs_with_the_constraints() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert 'PIP_CONSTRAINT="$REPO/constraints.txt"' in setup
    # the export comes before the first pip install
    assert setup.index("PIP_CONSTRAINT=") < setup.index("-m pip install")
