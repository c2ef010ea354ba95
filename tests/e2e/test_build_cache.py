"""Compile once per source (grader.builds): a source graded a second time loads its kept
``load_inline`` build instead of compiling again, and what a source's runners leave in
their build folders is kept for that source alone. Real bubblewrap, torch's C++ extension
build (~20 s on 2 cores), the CPU. The two tests share one cache folder, in order: a
source that plants files first, then an honest source's first and second grades."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from grader import builds
from grader.evaluate import EvalRequest, evaluate

from .test_inline_extension import CANDIDATE, ROOT, RUNTIME_ONLY

pytestmark = [pytest.mark.bwrap, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("c++") is None or shutil.which("ninja") is None
                                 or shutil.which("bwrap") is None,
                                 reason="needs bubblewrap, a C++ compiler and ninja")]

# A candidate that plants files in its own build folders, with no build of its own: a fake
# extension under the key of its choosing, a Triton cache entry, a link to a host file and a
# FIFO. Only its own entry may get them (regular files), never another source's.
PLANTER = '''
import os
_home = os.environ["HOME"]
for sub in ("builds/ext/" + "0" * 40, "triton/planted"):
    os.makedirs(os.path.join(_home, sub), exist_ok=True)
with open(os.path.join(_home, "builds/ext/" + "0" * 40, "kg_bench_inline_add.so"), "wb") as f:
    f.write(b"not an extension")
with open(os.path.join(_home, "triton/planted/add_kernel.json"), "w") as f:
    f.write("{}")
os.symlink("/etc/passwd", os.path.join(_home, "triton/planted/passwd"))
os.mkfifo(os.path.join(_home, "triton/planted/fifo"))


def launch(x, y, out):
    out.copy_(x + y)
'''


def _task(tmp_path: Path) -> Path:
    task = tmp_path / "task"
    shutil.copytree(ROOT / "examples" / "vector_add_small", task,
                    ignore=shutil.ignore_patterns("candidates"))
    spec = json.loads((task / "task.json").read_text())
    spec["policy"] = "default"
    spec["limits"] = {**spec.get("limits", {}), "compile_s": 600}
    (task / "task.json").write_text(json.dumps(spec))
    return task


def _grade(task: Path, cand: Path) -> tuple[bool, float]:
    report = evaluate(EvalRequest.from_paths(task, cand, backend="bwrap", device="cpu",
                                             policy=RUNTIME_ONLY,
                                             stages=("compile", "correctness")))
    assert report.ok, report.model_dump_json(indent=1)[:3000]
    assert report.sandbox is not None
    return report.ok, report.sandbox.phases["compile"]


def _entry(root: Path, text: str) -> Path:
    env = builds.environment("bwrap", "cpu")
    return root / builds.plan({"candidate.py": text}, env)["candidate.py"]


def _files(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture(autouse=True)
def _cache(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(builds.ENV, str(cache_root))


def test_what_a_source_plants_stays_in_its_own_entry(tmp_path: Path, cache_root: Path) -> None:
    planter = tmp_path / "planter.py"
    planter.write_text(PLANTER)
    _grade(_task(tmp_path), planter)
    own = _entry(cache_root, PLANTER)
    kept = _files(own)
    assert f"ext/{'0' * 40}/kg_bench_inline_add.so" in kept and "triton/planted/add_kernel.json" in kept
    assert not any(f.endswith(("passwd", "fifo")) for f in kept), kept  # no link, no FIFO
    assert not any(os.path.islink(p) for p in own.rglob("*"))
    assert [p.name for p in cache_root.iterdir()] == [own.name]


def test_a_source_graded_again_loads_its_kept_build(tmp_path: Path, cache_root: Path) -> None:
    task, cand = _task(tmp_path), tmp_path / "inline_add.py"
    cand.write_text(CANDIDATE)
    _, first = _grade(task, cand)  # the planter's fake build under its key is not this one's
    entry = _entry(cache_root, CANDIDATE)
    kept = _files(entry)
    assert any(f.startswith("ext/") and f.endswith("/kg_bench_inline_add.so") for f in kept), kept
    assert not any("0" * 40 in f or "planted" in f for f in kept), kept
    _, second = _grade(task, cand)
    assert _files(entry) == kept  # nothing built again, so nothing new kept
    assert second < first / 3, (first, second)  # the build (~20 s) was loaded, not redone
    assert len(list(cache_root.iterdir())) == 2  # two sources, two entries
