"""The live board's page: a ranking per task and device kind, what is pending, what was
disqualified. Every value is escaped; no script (the response's CSP forbids them); the
page reloads itself (the response's ``Refresh`` header)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from html import escape

from grader.leaderboard.live import Line, Ranking, Run, disqualified, rankings
from grader.service.store import JobRow

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}td,th{border:1px solid #ccc;"
          "padding:3px 8px;text-align:left}table{border-collapse:collapse;margin-bottom:1em}"
          "tr.ranked td{background:#f3fbf3}tr.tied td.rank{font-weight:bold}"
          ".note{color:#555;font-size:90%}")
_STATE = {"ranked": "ranked (re-run)", "awaiting_rerun": "awaiting re-run",
          "not_correct": "not correct"}


def _speedup(r: Run) -> str:
    if r.speedup is None:
        return "unmeasured (the host could not time it)" if r.unmeasured else "—"
    text = f"{r.speedup:.3g}x"
    if r.low is not None and r.high is not None:
        text += f" ({100 * (r.conf or 0.95):.0f}% CI {r.low:.3g}-{r.high:.3g})"
    return text


def _link(r: Run) -> str:
    return f'<a href="run/{escape(r.job_id)}.html">report</a>'


def _line(line: Line) -> str:
    r = line.run
    rank = "—" if line.rank is None else str(line.rank)
    if line.tied:
        rank += " (tied within noise)"
    why = r.message if not r.correct else ""
    note = "; ".join(x for x in (line.note, why[:200]) if x)
    return (f'<tr class="{escape(line.state)}{" tied" if line.tied else ""}">'
            f'<td class="rank">{escape(rank)}</td><td class="entry">{escape(line.entry)}</td>'
            f"<td>{escape(_speedup(r))}</td><td>{escape(_STATE[line.state])}: "
            f"{escape(r.verdict)}</td><td>{line.runs}</td>"
            f'<td class="note">{escape(note)}</td><td>{_link(r)}</td></tr>')


def _ranking(k: Ranking) -> str:
    ident = hashlib.sha256(f"{k.task}\0{k.device}".encode()).hexdigest()[:10]
    head = f"<h2>{escape(k.task)}" + (f" on {escape(k.device)}" if k.device else "") + "</h2>"
    if not k.lines:
        return head + f'<p id="ranking-{ident}" class="empty">No entry graded on this task yet.</p>'
    rows = "".join(_line(line) for line in k.lines)
    return (head + f'<table id="ranking-{ident}" class="ranking"><tr><th>rank</th><th>entry'
            "</th><th>speed-up over the reference</th><th>status</th><th>runs</th><th>note"
            f"</th><th>report</th></tr>{rows}</table>")


def _pending(pending: Sequence[tuple[JobRow, str]], failed: Sequence[tuple[JobRow, str]]) -> str:
    now = time.time()
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{escape(j.task)}</td><td>"
        f"{'re-run' if j.mode == 'rerun' else 'submission'}</td><td>{escape(j.state)}"
        f"{' (attempt ' + str(j.attempts) + ')' if j.attempts > 1 else ''}</td>"
        f"<td>{max(0, round(now - j.created_at))} s</td></tr>" for j, name in pending)
    out = "<h2>Pending</h2>"
    out += (f'<table id="pending"><tr><th>entry</th><th>task</th><th>what</th><th>state</th>'
            f"<th>waiting</th></tr>{rows}</table>" if pending
            else '<p id="pending">Nothing queued or running.</p>')
    if failed:
        frows = "".join(f"<tr><td>{escape(name)}</td><td>{escape(j.task)}</td><td>"
                        f"{escape((j.error or '')[:300])}</td></tr>" for j, name in failed)
        out += ("<h3>Re-runs the service could not grade (the entry stays awaiting re-run)</h3>"
                f'<table id="failed-reruns"><tr><th>entry</th><th>task</th><th>why</th></tr>'
                f"{frows}</table>")
    return out


def _disqualified(runs: Sequence[Run]) -> str:
    dq = disqualified(runs)
    if not dq:
        return '<h2>Disqualified</h2><p id="disqualified">No entry is disqualified.</p>'
    rows = "".join(f"<tr><td>{escape(name)}</td><td>{escape(r.task)}</td><td>"
                   f"{escape(r.code or '')}</td><td>{escape(r.message[:300])}</td>"
                   f"<td>{_link(r)}</td></tr>" for name, r in sorted(dq.items()))
    return ("<h2>Disqualified (an integrity violation on any task: in no ranking)</h2>"
            f'<table id="disqualified"><tr><th>entry</th><th>task</th><th>code</th><th>why</th>'
            f"<th>report</th></tr>{rows}</table>")


def index(runs: Sequence[Run], tasks: Sequence[str], pending: Sequence[tuple[JobRow, str]],
          failed: Sequence[tuple[JobRow, str]]) -> str:
    """The board's whole page."""
    body = "".join(_ranking(k) for k in rankings(runs, tasks))
    intro = ("<p>One ranking per task and device kind. An entry is ranked by a re-run the "
             "service schedules for its best submission (a fresh, independent measurement); "
             "resubmitting a file does not earn another. Entries whose re-run figures cannot "
             "be told apart share a rank (tied within noise); a correct re-run the host could not "
             "time has no speed-up and ranks after the measured ones. The page reloads "
             "itself.</p>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>kgrader leaderboard</title><style>{_STYLE}</style></head><body>"
            f"<h1>kgrader leaderboard</h1>{intro}{body}{_pending(pending, failed)}"
            f"{_disqualified(runs)}</body></html>\n")
