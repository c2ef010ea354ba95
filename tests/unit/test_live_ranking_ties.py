"""A re-run the host could not time (``tied_within_noise``) has no speed-up: it ranks after
every measured entry, however slow, level with the other unmeasured ones; measured
neighbours share a rank only when their intervals overlap."""

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


def test_an_unmeasured_rerun_ranks_after_every_measured_one() -> None:
    unmeasured = _runs("ann", TIED, None)
    # a measured 185x-slower entry still ranks above it (CI: a 3x-slower entry, unmeasured
    # on a loaded host, was ranked as a speed-up of 1 above a measured good one)
    assert _order(unmeasured, _runs("ben", None, 0.0054, 0.0052, 0.0055)) == \
        [("ben", 1, False), ("ann", 2, False)]
    assert _order(unmeasured, _runs("cat", None, 3.0, 2.9, 3.1)) == \
        [("cat", 1, False), ("ann", 2, False)]
    # an interval that holds 1 is no tie with an unmeasured entry
    assert _order(unmeasured, _runs("dan", None, 1.01, 0.95, 1.08)) == \
        [("dan", 1, False), ("ann", 2, False)]
    # unmeasured entries share one rank, after the measured ones
    assert _order(unmeasured, _runs("eve", TIED, None), _runs("fay", None, 0.5, 0.4, 0.6)) == \
        [("fay", 1, False), ("ann", 2, True), ("eve", 2, True)]


def test_measured_neighbours_share_a_rank_only_when_their_intervals_overlap() -> None:
    assert _order(_runs("ann", None, 2.0, 1.8, 2.2), _runs("ben", None, 1.9, 1.7, 2.1),
                  _runs("cat", None, 1.0, 0.9, 1.1)) == \
        [("ann", 1, True), ("ben", 1, True), ("cat", 3, False)]


def test_the_page_says_the_unmeasured_speedup_and_why_it_ranks_last() -> None:
    (ranking,) = rankings(_runs("ann", TIED, None) + _runs("ben", None, 0.5, 0.4, 0.6))
    line = ranking.lines[-1]
    assert line.entry == "ann" and "ranked after every measured entry" in line.note
    from grader.service.board_page import _line
    row = _line(line)
    assert "unmeasured (the host could not time it)" in row and "tied within" not in row
