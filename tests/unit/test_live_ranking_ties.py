"""A re-run tied with the reference ranks as a speed-up of 1 within noise: above a measured
slower entry, below a measured faster one, level with one whose interval holds 1."""

from __future__ import annotations

from grader.leaderboard.job import TIED
from grader.leaderboard.live import MAIN, RERUN, Run, rankings


def _runs(entry: str, code: str | None, speedup: float | None, low: float | None = None,
          high: float | None = None) -> list[Run]:
    common = {"entry": entry, "task": "t", "device": "cpu", "file_sha": entry * 8,
              "verdict": "ok", "message": ""}
    return [Run(job_id=f"{entry}-m", kind=MAIN, code=None, speedup=2.0, at=1.0, **common),
            Run(job_id=f"{entry}-r", kind=RERUN, code=code, speedup=speedup, low=low,
                high=high, at=2.0, **common)]


def _order(*runs: list[Run]) -> list[tuple[str, int | None, bool]]:
    (ranking,) = rankings([r for rs in runs for r in rs])
    return [(line.entry, line.rank, line.tied) for line in ranking.lines]


def test_a_tie_with_the_reference_ranks_as_one() -> None:
    tied = _runs("ann", TIED, None)
    assert _order(tied, _runs("ben", None, 0.33, 0.31, 0.35)) == \
        [("ann", 1, False), ("ben", 2, False)]
    assert _order(tied, _runs("cat", None, 3.0, 2.9, 3.1)) == \
        [("cat", 1, False), ("ann", 2, False)]
    assert _order(tied, _runs("dan", None, 1.01, 0.95, 1.08)) == \
        [("dan", 1, True), ("ann", 1, True)]
