"""Honest aggregates: per-task speed-ups, per-submission statistics with intervals, ranking.

Definitions (each statistic carries its label on the page):

* **speed-up** of a submission on a task: reference time / submission time, both timed in
  the same sandbox run, interleaved (see :mod:`grader.leaderboard.job`);
* a task is **solved** when its verdict is ``ok`` with a measured speed-up. Failed,
  anomalous (faster than the roofline floor: never a record) and not-entered tasks are
  unsolved, and so is a correct one whose pair speed-up rests on a paired median at the
  CPU judge clock's floor (:func:`at_clock_floor`: a ratio of noise, never published);
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
ranking holds only entries whose figures come from the independent ``rerun`` round;
entries with equal keys share a rank ("tied within noise": :func:`assign_ranks`), e.g.
when the re-run's timing could not separate them from the reference on a noisy host.
When no entry beats the reference on any task, every floored geomean is exactly 1 and
fast_1 is 0: the geomean over solved tasks decides, and the page says so.

Every valid submission is accounted for: an entry whose round is incomplete (an
evaluation not run yet, or hit by an infrastructure error, which is never committed and
is retried by the next run) is listed in :attr:`Board.pending` with the reason, never
dropped. Absolute times come from each row's report: the submission's and the
reference's medians with a distribution-free 95% interval on each (order statistics,
:func:`median_ci`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grader.leaderboard.state import EvalRow
from grader.measure.accept import bootstrap_ci, fast_p, floored_geomean, geomean
from sandbox.contract.rules import median_bounds

FAST_PS = (0.0, 1.0, 1.5, 2.0)
CI_SEED = 0
# The CPU judge times a call as its round trip less an empty call's, floored at this
# (sandbox.judge.benchmark): a paired median there is "too short to tell", not a time.
CLOCK_FLOOR_MS = 1e-6
# The state's meta key of the evaluations an infrastructure error kept from being
# committed: {"<submission>\0<task>\0<round>": "<reason>"} (written by the runner).
INFRA_META = "infra_errors"


def infra_key(submission: str, task: str, rnd: str) -> str:
    """The key of one evaluation in the :data:`INFRA_META` mapping."""
    return "\0".join((submission, task, rnd))


@dataclass(frozen=True)
class Interval:
    """A median with its 95% interval (``low``/``high`` None when ``n`` is too small:
    with fewer than 6 samples no order statistic bounds the median at that level, or
    when the samples were not kept: ``note`` then says why)."""

    value: float
    low: float | None
    high: float | None
    n: int
    note: str = ""


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> Interval | None:
    """The median of ``samples`` and a distribution-free interval on it: the order
    statistics ``x_(n+1-k)``, ``x_(k)`` with ``k`` from the sign test at (1-confidence)/2
    on each side (:func:`sandbox.contract.rules.sign_test_rank`)."""
    xs = [float(x) for x in samples]
    if not xs:
        return None
    bounds = median_bounds(xs, confidence)
    if bounds is None:
        return Interval(statistics.median(xs), None, None, len(xs))
    return Interval(statistics.median(xs), bounds[0], bounds[1], len(xs))


def _side_time(t: Any) -> Interval | None:
    if not isinstance(t, dict) or not isinstance(t.get("median_ms"), int | float):
        return None
    clocks = t.get("clocks")
    raw = clocks.get("samples_ms") if isinstance(clocks, dict) else None
    if isinstance(raw, list) and raw and all(isinstance(x, int | float) for x in raw):
        ci = median_ci(raw)
        if ci is not None:  # the report's median is the judge's; keep it, with the interval
            return Interval(float(t["median_ms"]), ci.low, ci.high, ci.n)
    n = t.get("samples")
    kept = clocks.get("median_ci_ms") if isinstance(clocks, dict) else None
    if isinstance(kept, list) and len(kept) == 2 and all(isinstance(x, int | float) for x in kept):
        # a candidate's copy: the samples withheld, the interval kept coarse (report/withhold)
        return Interval(float(t["median_ms"]), float(kept[0]), float(kept[1]),
                        n if isinstance(n, int) else 0)
    return Interval(float(t["median_ms"]), None, None, n if isinstance(n, int) else 0)


def row_times(report_json: str | None) -> tuple[Interval | None, Interval | None]:
    """(submission, reference) median times of one row's report, None where not timed."""
    try:
        rep = json.loads(report_json) if report_json else None
    except ValueError:
        return None, None
    if not isinstance(rep, dict):
        return None, None
    return _side_time(rep.get("timing")), (_side_time(rep.get("timing_current"))
                                           or _paired_reference(rep.get("acceptance")))


def _paired_reference(acc: Any) -> Interval | None:
    """The reference's median over the interleaved pairs (the seed rule's numbers) when
    the reference was not timed on its own (a leaderboard evaluation): the pairs' samples
    are not kept in the report, so no interval."""
    rules = acc.get("rules") if isinstance(acc, dict) else None
    for r in rules if isinstance(rules, list) else ():
        nums = r.get("numbers") if isinstance(r, dict) and r.get("rule") == "seed" else None
        v = nums.get("median_current_ms") if isinstance(nums, dict) else None
        if isinstance(v, int | float) and not isinstance(v, bool):
            n = nums.get("pairs") if isinstance(nums, dict) else None
            n = n if isinstance(n, int) else 0
            return Interval(float(v), None, None, n,
                            f"median of {n} interleaved pairs; their samples are not kept")
    return None


@dataclass(frozen=True)
class TaskFigure:
    """One submission on one task, from one round (``not_entered`` when it had no file)."""

    task: str
    verdict: str
    speedup: float | None
    code: str | None = None
    message: str = ""
    round: str | None = None
    time_ms: Interval | None = None
    reference_ms: Interval | None = None

    @property
    def correct(self) -> bool:
        """Checked correct and timed (``ok``), whatever its speed-up."""
        return self.verdict == "ok"

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
    tied: bool = False  # shares its rank: the figures cannot separate it from another entry

    @property
    def correct_count(self) -> int:
        return sum(f.correct for f in self.figures.values())

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
            sub_t, ref_t = row_times(r.report_json)
            floor = at_clock_floor(r) if r.verdict == "ok" else None
            if floor is not None:  # correct, but no speed-up to publish (unsolved)
                out[t] = TaskFigure(t, r.verdict, None, "speedup_unmeasured", floor, rnd,
                                    sub_t, ref_t)
            else:
                out[t] = TaskFigure(t, r.verdict, r.speedup, r.code, r.message, rnd, sub_t, ref_t)
    return out


def at_clock_floor(r: EvalRow) -> str | None:
    """Why ``r``'s pair speed-up is no measurement, or None: a side's paired median at the
    CPU judge clock's floor (:data:`CLOCK_FLOOR_MS`) makes the ratio a made-up number."""
    if r.speedup_source != "pairs" or not r.report_json:
        return None
    try:
        acc = json.loads(r.report_json).get("acceptance")
    except (ValueError, AttributeError):
        return None
    rules = acc.get("rules") if isinstance(acc, dict) else None
    for rule in rules if isinstance(rules, list) else ():
        nums = rule.get("numbers") if isinstance(rule, dict) and rule.get("rule") == "seed" else None
        for side, key in (("reference", "median_current_ms"), ("submission", "median_candidate_ms")):
            v = nums.get(key) if isinstance(nums, dict) else None
            if isinstance(v, int | float) and 0 <= v <= 2 * CLOCK_FLOOR_MS:
                return (f"correct; the {side}'s paired median is at the judge clock's floor "
                        f"({CLOCK_FLOOR_MS} ms), so the speed-up is not measured")
    return None


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


def assign_ranks(ranked: list[Entry]) -> None:
    """Competition ranks (1, 1, 3, ...) over ``ranked`` (best first): entries whose ranking
    key is equal share a rank and are marked ``tied`` -- a re-run whose timing could not
    separate them (each task ``tied_within_noise``, or none faster than the reference) gives
    a tie, never a missing ranking."""
    for i, e in enumerate(ranked):
        prev = ranked[i - 1] if i else None
        if prev is not None and prev.sort_key() == e.sort_key():
            e.rank, e.tied, prev.tied = prev.rank, True, True
        else:
            e.rank = i + 1


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


@dataclass(frozen=True)
class Pending:
    """An evaluation a submission is waiting for: never run yet, or kept from the state by
    an infrastructure error (``reason``), which the next run retries."""

    submission: str
    task: str
    round: str
    reason: str


@dataclass
class Board:
    """What the page shows: the published ranking, the entries not re-measured, the
    submissions disqualified as a whole (listed apart, with the reason), and the
    evaluations still pending (so that no valid submission vanishes)."""

    ranked: list[Entry]
    unranked: list[Entry]
    tasks: list[str]
    disqualified: list[Disqualification] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    top: list[str] = field(default_factory=list)

    @property
    def none_faster(self) -> bool:
        """Entries exist and none beats the reference on any task (every floored geomean
        is exactly 1): the geomean over solved tasks is what orders them."""
        es = self.ranked + self.unranked
        return bool(es) and not any(f.solved and f.value > 1.0
                                    for e in es for f in e.figures.values())


def _pending(rows: Sequence[EvalRow], submissions: Mapping[str, Mapping[str, str]],
             tasks: Sequence[str], rounds: Mapping[str, Sequence[str]],
             infra: Mapping[str, str]) -> list[Pending]:
    have = {(r.submission, r.task, r.round, r.file_sha) for r in rows}
    out = []
    for s in sorted(submissions):
        for rnd in rounds.get(s, ()):
            for t in tasks:
                sha = submissions[s].get(t)
                if sha is not None and (s, t, rnd, sha) not in have:
                    why = infra.get(infra_key(s, t, rnd), "not evaluated yet")
                    out.append(Pending(s, t, rnd, why))
    return out


def board(rows: Sequence[EvalRow], submissions: Mapping[str, Mapping[str, str]],
          tasks: Sequence[str], top: Sequence[str],
          infra: Mapping[str, str] | None = None) -> Board:
    """Ranked: the top-K entries by their re-run figures. Unranked: the rest (main round).
    Pending: each evaluation of a valid, not disqualified submission that its round still
    lacks, with ``infra``'s reason where one is known (:data:`INFRA_META`)."""
    ranked = entries(rows, {s: submissions[s] for s in top if s in submissions}, tasks, "rerun")
    assign_ranks(ranked)
    done = {e.submission for e in ranked}
    unranked = [e for e in entries(rows, submissions, tasks, "main") if e.submission not in done]
    dq = disqualified(rows)
    banned = {d.submission for d in dq}
    live = {s: f for s, f in submissions.items() if s not in banned}
    rounds = {s: ("main", "rerun") if s in top else ("main",) for s in live}
    pending = _pending(rows, live, tasks, rounds, infra or {})
    return Board(ranked, unranked, list(tasks), dq, pending, [s for s in top if s in live])
