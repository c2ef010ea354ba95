"""What a ``kgrader`` command costs before it does anything: the host-side start.

Every cold ``kgrader run`` pays its process's Python start and imports before its sandbox
starts (the judge's own torch import comes after), and an agent loop pays them again for
every ``kgrader scan`` or ``kgrader submit``. Measured here, each as the wall time of a
fresh process, interleaved across the trees given (``--tree``, default this checkout) so
that a host's load hits each tree alike:

* ``version``: ``python -m grader.cli --version`` (the CLI's own imports);
* ``scan``: ``python -m grader.cli scan --json examples/vector_add_small/candidates/good.py``;
* ``run imports``: a process that imports what ``kgrader run`` imports before its sandbox
  starts (the CLI, then ``grader.evaluate``, as ``run()`` does; ``grader.records`` only
  with ``--records``), and exits. The JSON of 2026-12-06 (839d676 against cdd681f) was
  taken with ``grader.records`` imported too, as ``run()`` did then.

Usage: python bench/cli_start.py [--tree PATH ...] [--rounds 15] [--json OUT]
(A/B: ``git worktree add /tmp/before <commit>`` and pass ``--tree /tmp/before --tree .``.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOOD = "examples/vector_add_small/candidates/good.py"
RUN_IMPORTS = ("from click.testing import CliRunner\n"
               "from grader.cli.app import main\n"
               "CliRunner().invoke(main, ['run', '--help'])\n"
               "import grader.evaluate\n")
CASES: dict[str, list[str]] = {
    "version": ["-m", "grader.cli", "--version"],
    "scan": ["-m", "grader.cli", "scan", "--json", GOOD],
    "run imports": ["-c", RUN_IMPORTS],
}


def once(tree: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("KGRADER_LOG", None)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=tree, env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, action="append")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    walls: dict[str, dict[str, list[float]]] = {str(t): {c: [] for c in CASES} for t in trees}
    for tree in trees:  # one unmeasured round each: the page cache, __pycache__
        for argv in CASES.values():
            once(tree, argv)
    for r in range(args.rounds):
        for tree in (trees if r % 2 == 0 else trees[::-1]):
            for case, argv in CASES.items():
                walls[str(tree)][case].append(once(tree, argv))
    out: dict[str, Any] = {"python": sys.version.split()[0], "rounds": args.rounds,
                           "cpus": os.cpu_count(), "trees": {}}
    for tree in trees:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                             capture_output=True, text=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=tree, capture_output=True, text=True, check=False).stdout
        med = {c: round(statistics.median(v), 3) for c, v in walls[str(tree)].items()}
        out["trees"][str(tree)] = {"commit": rev + ("+changes" if dirty.strip() else ""),
                                   "median_s": med, "walls_s": walls[str(tree)]}
        print(f"{rev}{'+changes' if dirty.strip() else ''} ({tree}): "
              + ", ".join(f"{c} {v:.3f} s" for c, v in med.items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
