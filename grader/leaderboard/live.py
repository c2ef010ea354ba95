"""The live board's rankings: one per task and device kind, from the re-runs it schedules.

The service grades each leaderboard submission once (a ``main`` run). Per entry, task and
device kind, the **selection** is the entry's best correct main run (highest speed-up,
then the earliest); the board queues one ``rerun`` of the selection's file (a new job:
fresh phase seeds, runners and buffers, correctness again under the memory checker), and
the **published figure** is the entry's latest re-run. The selection measurement never
becomes the record, so sending the same file again until a lucky draw lands does not pay:
its re-run exists already and is not repeated; a different file earns a re-run only by
beating the entry's best main run.

A ranking lists, best first: the entries with a published correct re-run (ranked;
neighbours whose speed-up intervals overlap share a rank: "tied within noise"; a correct
re-run the host could not time (``tied_within_noise``: no speed-up measured) ranks after
every measured one, level with the other unmeasured ones, as the batch board's floored
geomean ranks it), then those awaiting their re-run (not
ranked: their selection figure is shown as such), then those with no correct run. An entry
with a disqualified run on any task is in none: it is listed apart, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from grader.leaderboard.job import TIED

MAIN, RERUN = "main", "rerun"


@dataclass(frozen=True)
class Run:
    """One finished board job: an entry's main run or re-run of one file on one task."""

    job_id: str
    entry: str
    task: str
    device: str
    file_sha: str
    kind: str  # MAIN or RERUN
    verdict: str  # ok, failed, anomaly, disqualified
    code: str | None
    message: str
    speedup: float | None
    low: float | None = None  # the speed-up's interval, where the report gives one
    high: float | None = None
    conf: float | None = None  # that interval's confidence (0.98 paired; 0.95 one side's)
    at: float = 0.0

    @property
    def correct(self) -> bool:
        return self.verdict == "ok"

    @property
    def unmeasured(self) -> bool:
        """Correct, and the host could not time it (``tied_within_noise``): no speed-up is
        known, not even "about 1" -- its timing was too noisy to measure, or a candidate
        made it so. It never ranks above a measured entry."""
        return self.code == TIED


@dataclass
class Line:
    """One entry in one ranking. ``state``: ``ranked``, ``awaiting_rerun``, ``not_correct``."""

    entry: str
    state: str
    run: Run  # the published re-run, else the selection, else the latest run
    runs: int  # how many finished runs of this entry the table rests on
    rank: int | None = None
    tied: bool = False
    note: str = ""


@dataclass
class Ranking:
    task: str
    device: str
    lines: list[Line] = field(default_factory=list)


def selection(runs: Iterable[Run]) -> Run | None:
    """The best correct main run (highest speed-up, a measured one before none; then the
    earliest), or None."""
    ok = [r for r in runs if r.kind == MAIN and r.correct]
    if not ok:
        return None
    return min(ok, key=lambda r: (r.speedup is None, -(r.speedup or 0.0), r.at, r.job_id))


def needs_rerun(runs: Sequence[Run], scheduled: set[str]) -> Run | None:
    """The selection of one entry's runs on one task and device when its file has no re-run
    (finished or in ``scheduled``: file shas of re-runs queued, running or failed)."""
    sel = selection(runs)
    if sel is None or sel.file_sha in scheduled:
        return None
    if any(r.kind == RERUN and r.file_sha == sel.file_sha for r in runs):
        return None
    return sel


def _overlap(a: Run, b: Run) -> bool:
    if a.speedup is None or b.speedup is None:
        return a.speedup is None and b.speedup is None
    if a.speedup == b.speedup:
        return True
    if None in (a.low, a.high, b.low, b.high):
        return False
    return max(a.low or 0.0, b.low or 0.0) <= min(a.high or 0.0, b.high or 0.0)


def _rank(lines: list[Line]) -> None:
    """Competition ranks over ``lines`` (best first); a line whose figure cannot be told
    apart from the one above shares its rank."""
    for i, line in enumerate(lines):
        prev = lines[i - 1] if i else None
        if prev is not None and _overlap(prev.run, line.run):
            line.rank, line.tied, prev.tied = prev.rank, True, True
        else:
            line.rank = i + 1


def disqualified(runs: Iterable[Run]) -> dict[str, Run]:
    """Each disqualified entry and its first disqualifying run."""
    out: dict[str, Run] = {}
    for r in sorted(runs, key=lambda r: (r.at, r.job_id)):
        if r.verdict == "disqualified" and r.entry not in out:
            out[r.entry] = r
    return out


def rankings(runs: Sequence[Run], tasks: Sequence[str] = ()) -> list[Ranking]:
    """One ranking per task and device kind with a run (and an empty one per task in
    ``tasks`` that has none yet), in task then device order."""
    banned = disqualified(runs)
    groups: dict[tuple[str, str], dict[str, list[Run]]] = {}
    for r in runs:
        if r.entry not in banned:
            groups.setdefault((r.task, r.device), {}).setdefault(r.entry, []).append(r)
    seen = {t for t, _ in groups}
    out = [Ranking(t, d, _lines(groups[(t, d)])) for t, d in sorted(groups)]
    out += [Ranking(t, "") for t in tasks if t not in seen]
    return sorted(out, key=lambda k: (k.task, k.device))


def _lines(by_entry: dict[str, list[Run]]) -> list[Line]:
    ranked, waiting, wrong = [], [], []
    for entry, runs in by_entry.items():
        reruns = sorted((r for r in runs if r.kind == RERUN), key=lambda r: (r.at, r.job_id))
        sel = selection(runs)
        latest = reruns[-1] if reruns else None
        if latest is not None and latest.correct:
            notes = ["a newer, faster file awaits its re-run"] \
                if sel is not None and sel.file_sha != latest.file_sha else []
            if latest.speedup is None:
                notes.append("speed-up unmeasured: the host could not time the re-run; ranked "
                             "after every measured entry")
            note = "; ".join(notes)
            ranked.append(Line(entry, "ranked", latest, len(runs), note=note))
        elif sel is not None and latest is None:
            waiting.append(Line(entry, "awaiting_rerun", sel, len(runs),
                                note="selection run only; ranked once its re-run lands"))
        else:
            last = latest if latest is not None else max(runs, key=lambda r: (r.at, r.job_id))
            note = "its re-run failed" if latest is not None else ""
            wrong.append(Line(entry, "not_correct", last, len(runs), note=note))

    def by_speed(line: Line) -> tuple[bool, float, str]:
        # An unmeasured re-run is no speed-up of 1: ranked as "about 1", it put an entry 3x
        # slower than another above it on a loaded CI host, and a submitter who makes its
        # own timing noisy would buy that rank. It goes after every measured entry.
        speedup = line.run.speedup
        return (speedup is None, -(speedup or 0.0), line.entry)

    ranked.sort(key=by_speed)
    waiting.sort(key=by_speed)
    wrong.sort(key=lambda line: line.entry)
    _rank(ranked)
    return ranked + waiting + wrong
