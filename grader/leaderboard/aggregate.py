"""Honest aggregates: per-task speed-ups, per-submission statistics with intervals, ranking.

Definitions (each statistic carries its label on the page):

* **speed-up** of a submission on a task: reference time / submission time, both timed in
  the same sandbox run, interleaved (see :mod:`grader.leaderboard.job`);
* a task is **solved** when its verdict is ``ok`` with a measured speed-up. Failed,
  anomalous (faster than the roofline floor: never a record) and not-entered tasks are
  unsolved;
* ``geomean``: geometric mean (log space) over *solved tasks only*; ``n`` says how many;
  unsolved tasks are excluded (they have no time), which is why it is never shown alone;
* ``median``: median over *all* tasks, unsolved = 0;
* ``fast_p`` for p in 0, 1, 1.5, 2: share of all tasks solved with speed-up > p (unsolved =
  speed-up 0; :func:`grader.measure.accept.fast_p`);
* ``floored_geomean``: geometric mean of max(speed-up, 1) over all tasks, unsolved = 1
  (:func:`grader.measure.accept.floored_geomean`): no task can pull it below "no gain";
* 95% intervals: percentile bootstrap over tasks (:func:`grader.measure.accept.bootstrap_ci`,
  seed 0, so a page is reproducible). With few tasks the intervals are wide; that is the
  honest answer.

Ranking key: floored geomean, then fast_1, then geomean (None as 0). The published
ranking holds only entries whose figures come from the independent ``rerun`` round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from grader.leaderboard.state import EvalRow
from grader.measure.accept import bootstrap_ci, fast_p, floored_geomean, geomean

FAST_PS = (0.0, 1.0, 1.5, 2.0)
CI_SEED = 0


@dataclass(frozen=True)
class TaskFigure:
    """One submission on one task, from one round (``not_entered`` when it had no file)."""

    task: str
    verdict: str
    speedup: float | None
    code: str | None = None
    message: str = ""
    round: str | None = None

    @property
    def solved(self) -> bool:
        return self.verdict == "ok" and self.speedup is not None and self.speedup > 0

    @property
    def value(self) -> float:
        """Speed-up for aggregates: 0 when unsolved."""
        return float(self.speedup) if self.solved and self.speedup is not None else 0.0


@dataclass(frozen=True)
class Stat:
    """A labelled statistic with its 95% bootstrap interval (None when undefined)."""

    key: str
    label: str
    value: float | None
    low: float | None
    high: float | None
    n: int


@dataclass
class Entry:
    """One submission's row: per-task figures and statistics, from one round."""

    submission: str
    round: str
    figures: dict[str, TaskFigure]
    stats: dict[str, Stat] = field(default_factory=dict)
    rank: int | None = None

    def sort_key(self) -> tuple[float, float, float]:
        def v(k: str) -> float:
            s = self.stats.get(k)
            return s.value if s is not None and s.value is not None else 0.0
        return (v("floored_geomean"), v("fast_1"), v("geomean"))


def figures_for(rows: Sequence[EvalRow], submission: str, files: Mapping[str, str],
                tasks: Sequence[str], rnd: str) -> dict[str, TaskFigure] | None:
    """Per-task figures of ``submission`` in round ``rnd``; None while a task is pending.

    ``files`` maps each entered task to the file's sha256: rows of an older version of a
    file are ignored. A task without a file counts as ``not_entered`` (unsolved).
    """
    mine = {r.task: r for r in rows if r.submission == submission and r.round == rnd
            and files.get(r.task) == r.file_sha}
    out: dict[str, TaskFigure] = {}
    for t in tasks:
        r = mine.get(t)
        if t not in files:
            out[t] = TaskFigure(t, "not_entered", None, "not_entered", "no file for this task")
        elif r is None:
            return None
        else:
            out[t] = TaskFigure(t, r.verdict, r.speedup, r.code, r.message, rnd)
    return out


def _ci(values: list[float], stat: Callable[[Sequence[float]], float]) -> tuple[float, float]:
    return bootstrap_ci(values, stat, seed=CI_SEED)


def summarize(figs: Sequence[TaskFigure]) -> dict[str, Stat]:
    """The labelled statistics of one submission (see the module docstring)."""
    vals = [f.value for f in figs]
    solved = [f.value for f in figs if f.solved]
    n = len(vals)
    out: dict[str, Stat] = {}
    if solved:
        lo, hi = _ci(solved, geomean)
        out["geomean"] = Stat("geomean", f"geomean over solved tasks ({len(solved)}/{n})",
                              geomean(solved), lo, hi, len(solved))
    else:
        out["geomean"] = Stat("geomean", f"geomean over solved tasks (0/{n})", None, None, None, 0)
    if not vals:
        return out
    lo, hi = _ci(vals, statistics.median)
    out["median"] = Stat("median", "median over all tasks (unsolved = 0)",
                         statistics.median(vals), lo, hi, n)
    for p in FAST_PS:
        def fp(xs: Sequence[float], p: float = p) -> float:
            return fast_p(xs, [x > 0 for x in xs], p)
        lo, hi = _ci(vals, fp)
        key = f"fast_{p:g}".replace(".", "_")
        out[key] = Stat(key, f"fast_{p:g}: share solved with speed-up > {p:g}", fp(vals), lo, hi, n)

    def fg(xs: Sequence[float]) -> float:
        return floored_geomean(xs, 1.0, [x > 0 for x in xs])
    lo, hi = _ci(vals, fg)
    out["floored_geomean"] = Stat("floored_geomean",
                                  "floored geomean: max(speed-up, 1), unsolved = 1",
                                  fg(vals), lo, hi, n)
    return out


def entries(rows: Sequence[EvalRow], submissions: Mapping[str, Mapping[str, str]],
            tasks: Sequence[str], rnd: str) -> list[Entry]:
    """Entries of every submission (name -> {task: file sha}) whose round ``rnd`` is
    complete, best first."""
    out = []
    banned = {d.submission for d in disqualified(rows)}
    for s, files in submissions.items():
        if s in banned:
            continue
        figs = figures_for(rows, s, files, tasks, rnd)
        if figs is None or all(f.verdict == "not_entered" for f in figs.values()):
            continue
        out.append(Entry(s, rnd, figs, summarize(list(figs.values()))))
    out.sort(key=lambda e: (tuple(-x for x in e.sort_key()), e.submission))
    return out


def select_top(rows: Sequence[EvalRow], submissions: Mapping[str, Mapping[str, str]],
               tasks: Sequence[str], k: int) -> list[str]:
    """The K best by the ``main`` round (the selection measurement), with at least one solve."""
    ranked = [e for e in entries(rows, submissions, tasks, "main")
              if any(f.solved for f in e.figures.values())]
    return [e.submission for e in ranked[:k]]


@dataclass(frozen=True)
class Disqualification:
    """A submission not ranked at all, and the evaluation that showed why."""

    submission: str
    task: str
    code: str | None
    message: str


def disqualified(rows: Sequence[EvalRow]) -> list[Disqualification]:
    """One line per disqualified submission (its first violating evaluation, any round)."""
    seen: dict[str, Disqualification] = {}
    for r in sorted(rows, key=lambda r: (r.submission, r.task, r.round)):
        if r.verdict == "disqualified" and r.submission not in seen:
            seen[r.submission] = Disqualification(r.submission, r.task, r.code, r.message)
    return [seen[s] for s in sorted(seen)]


@dataclass
class Board:
    """What the page shows: the published ranking, the entries not re-measured, and the
    submissions disqualified as a whole (listed apart, with the reason)."""

    ranked: list[Entry]
    unranked: list[Entry]
    tasks: list[str]
    disqualified: list[Disqualification] = field(default_factory=list)


def board(rows: Sequence[EvalRow], submissions: Mapping[str, Mapping[str, str]],
          tasks: Sequence[str], top: Sequence[str]) -> Board:
    """Ranked: the top-K entries by their re-run figures. Unranked: the rest (main round)."""
    ranked = entries(rows, {s: submissions[s] for s in top if s in submissions}, tasks, "rerun")
    for i, e in enumerate(ranked, 1):
        e.rank = i
    done = {e.submission for e in ranked}
    unranked = [e for e in entries(rows, submissions, tasks, "main") if e.submission not in done]
    return Board(ranked, unranked, list(tasks), disqualified(rows))
