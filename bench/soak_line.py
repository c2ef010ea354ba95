"""One summary line from a soak bench's JSONL (bench/soak.py --out), for gpu_integrity.sh.

    python3 bench/soak_line.py bench/results/soak-DATE.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def line(summary: dict[str, Any]) -> str:
    load = summary.get("load_avg_1m") or {}
    lbs = summary.get("leaderboard") or []
    counts = {k: len(summary[k]) if isinstance(summary.get(k), list) else summary.get(k)
              for k in ("left_behind", "not_swept_by_next_command", "wrong_blame", "cheats_passed",
                        "honest_no_fault_failed", "tracebacks", "not_private_after_kill")}
    return (f"{summary.get('iterations')} evaluations, {summary.get('lanes')} lanes on "
            f"{summary.get('cores')} cores, {summary.get('evaluations_per_min')}/min, load "
            f"{load.get('mean')} mean {load.get('peak')} peak, "
            + " ".join(f"{k}={v}" for k, v in counts.items())
            + f" leaderboard={sum(bool(r.get('ok')) for r in lbs)}/{len(lbs)} ok"
            + (" INTERRUPTED" if summary.get("interrupted") else ""))


def main() -> int:
    path = Path(sys.argv[1])
    try:
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        print(f"no summary: {e}")
        return 1
    summaries = [r for r in rows if r.get("summary")]
    if not summaries:
        print(f"no summary in {path} ({len(rows)} rows)")
        return 1
    print(line(summaries[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
