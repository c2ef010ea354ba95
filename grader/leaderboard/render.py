"""The static leaderboard site: ``index.html``, plots, and one page per evaluation.

Every string that can come from a submission (its name, messages, reports) goes through
:func:`html.escape`; file names of generated pages are hashes, never names; a Content
Security Policy forbids scripts and remote loads, as a second line behind the escaping.

Every valid submission is on the page: ranked, not re-measured, pending (with the
infrastructure error that kept an evaluation out of the state, which the runner keeps
in the state's ``infra_errors`` meta), disqualified, or in *Problems*. A table with no
row says so in words. :func:`render_state` renders from an open :class:`State` (a live
board calls it); :func:`render_site` opens the file and calls it.

**Hidden shapes never reach the published page.** Every row's report and message go
through :func:`grader.grading.redact.redact` with its task's shape facts (which the run
keeps in the state's ``task_shapes`` meta; a state without them is redacted as if every
shape not known to be public were hidden). ``private=True`` (``kgrader leaderboard render
--private``) renders the operator's own page from the full reports, marked as such: it
holds the hidden shapes and must not be published.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from grader.grading.redact import ShapeFacts, facts_for, redact, redact_text, scrub_text
from grader.leaderboard.aggregate import (
    FAST_PS,
    INFRA_META,
    Board,
    Entry,
    Pending,
    at_clock_floor,
    board,
    row_times,
)
from grader.leaderboard.cells import (
    VERDICTS,
    environment_table,
    num,
    stat_cell,
    table,
    time_cell,
)
from grader.leaderboard.job import TIED
from grader.leaderboard.plots import write_plots
from grader.leaderboard.seeds import TaskPayload
from grader.leaderboard.state import EvalRow, State
from grader.report.model import Report
from grader.task import TaskSpec

SHAPES_META = "task_shapes"
PRIVATE_BANNER = ("<p><strong>Operator's private page</strong>: it shows the hidden shapes and "
                  "every message in full. Do not publish it; publish the page rendered "
                  "without --private.</p>")

CSP = ("default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")
STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}td.l,th.l{text-align:left}.anomaly{background:#fde}.failed{color:#a00}
.ok{color:#060}.pending{background:#ffe}.empty{color:#666;font-style:italic}
.ci{color:#666;font-size:85%}pre{white-space:pre-wrap;background:#f6f6f6;padding:1em}img{max-width:100%;border:1px solid #ddd}"""
STAT_KEYS = ["geomean", "floored_geomean", "median"] + \
    [f"fast_{p:g}".replace(".", "_") for p in FAST_PS]
STAT_HEADERS = ["geomean over solved (95% CI)", "floored geomean", "median"] + \
    [f"fast_{p:g}" for p in FAST_PS]


def eval_page_name(row: EvalRow) -> str:
    """A page name from the row's key: a hash, so no submission text reaches a path."""
    key = "\0".join(row.key).encode()
    return f"eval/{hashlib.sha256(key).hexdigest()[:20]}.html"


def _doc(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
            f"<body>\n{body}\n</body></html>\n")


def _ranking_rows(entries: Sequence[Entry], n_tasks: int) -> list[str]:
    rows = []
    for e in entries:
        rank = str(e.rank) if e.rank is not None else "—"
        if e.tied:
            rank += " (tied within noise)"
        cells = "".join(stat_cell(e.stats.get(k)) for k in STAT_KEYS)
        rate = f"{e.correct_count}/{n_tasks}"
        rows.append(f'<tr><td class="l">{rank}</td><td class="l">{escape(e.submission)}</td>'
                    f"<td>{rate}</td>{cells}</tr>")
    return rows


def _reason(p: Pending) -> str:
    return f"{p.task} ({p.round}): {p.reason}"


def _awaiting_rows(b: Board) -> list[str]:
    """Selected for the re-run whose re-run is not complete: listed in the ranking's
    place, with why, so that "top K" shows every entry selected."""
    ranked = {e.submission for e in b.ranked}
    cols = 2 + len(STAT_KEYS)
    out = []
    for s in b.top:
        if s in ranked:
            continue
        why = "; ".join(_reason(p) for p in b.pending if p.submission == s and p.round == "rerun")
        out.append(f'<tr class="pending"><td class="l">—</td><td class="l">{escape(s)}</td>'
                   f'<td class="l" colspan="{cols - 1}">re-run not finished, not ranked yet: '
                   f"{escape((why or 'waiting for the re-run')[:400])}</td></tr>")
    return out


def _task_table(b: Board, task: str, rows_by_key: dict[tuple[str, str], EvalRow]) -> str:
    out = []
    for e in b.ranked + b.unranked:
        f = e.figures[task]
        row = rows_by_key.get((e.submission, task + "\0" + e.round))
        link = f'<a href="{eval_page_name(row)}">report</a>' if row is not None else ""
        cls = "anomaly" if f.verdict == "anomaly" else ("ok" if f.solved else "failed")
        code = f"{f.code}: {f.message[:160]}" if f.code else ""
        out.append(f'<tr class="{cls}"><td class="l">{escape(e.submission)}</td>'
                   f'<td class="l">{escape(e.round)}</td>'
                   f'<td class="l">{escape(VERDICTS.get(f.verdict, f.verdict))}</td>'
                   f"{time_cell(f.time_ms)}{time_cell(f.reference_ms)}"
                   f"<td>{num(f.speedup if f.solved else None, 4)}</td>"
                   f'<td class="l">{escape(code)}</td><td class="l">{link}</td></tr>')
    for p in b.pending:
        if p.task == task:
            out.append(f'<tr class="pending"><td class="l">{escape(p.submission)}</td>'
                       f'<td class="l">{escape(p.round)}</td><td class="l">pending</td>'
                       f'<td>—</td><td>—</td><td>—</td><td class="l">{escape(p.reason[:300])}'
                       "</td><td></td></tr>")
    return table(["submission", "round", "verdict", "time (median, 95% CI)",
                   "reference time (same run)", "speed-up", "why", "report"], out,
                  f"task-{hashlib.sha256(task.encode()).hexdigest()[:8]}")


def shape_meta(tasks: Iterable[TaskPayload]) -> dict[str, object]:
    """The state's ``task_shapes`` meta: each task's shape facts, for the public page."""
    return {t.name: facts_for(TaskSpec.model_validate_json(t.task_json)).to_json() for t in tasks}


def _task_facts(state: State) -> dict[str, ShapeFacts]:
    meta = state.meta(SHAPES_META, {})
    return {k: ShapeFacts.from_json(v) for k, v in meta.items()} if isinstance(meta, Mapping) else {}


def public_row(r: EvalRow, facts: ShapeFacts) -> EvalRow:
    """``r`` as a submitter may see it: its report and message redacted."""
    report = None
    if r.report_json:
        try:
            report = Report.model_validate_json(r.report_json)
        except ValueError:  # pydantic's ValidationError is one
            report = None
    if report is None:
        early = r.stage in ("scan", "compile") or not facts.has_hidden
        msg = r.message if early else f"{r.stage} failed ({r.code}); the message is withheld"
        return replace(r, message=scrub_text(msg, facts),
                       report_json=None if not r.report_json else '"(withheld: not a valid report)"')
    full = facts.with_report(report)
    return replace(r, message=redact_text(r.message, report, full),
                   report_json=redact(report, full).model_dump_json())


def _problems(state: State, facts: dict[str, ShapeFacts] | None) -> str:
    def msg(task: str, text: str) -> str:  # a reference's failure may name a hidden shape
        return text if facts is None else scrub_text(text, facts.get(task, ShapeFacts(None)))

    rows = [f'<tr><td class="l">{escape(s.name)}</td><td class="l">{escape(s.status)}</td>'
            f'<td class="l">{escape(s.message)}</td></tr>'
            for s in state.submissions() if s.status != "valid" or s.message != "ok"]
    tasks = [f'<tr><td class="l">{escape(t.name)}</td><td class="l">reference fails</td>'
             f'<td class="l">{escape(msg(t.name, t.message)[:500])}</td></tr>'
             for t in state.task_checks() if not t.reference_ok]
    if not rows and not tasks:
        return ""
    return "<h2>Problems</h2>" + table(["name", "status", "message"], tasks + rows, "problems")


def render_site(state_path: Path, out_dir: Path, *, private: bool = False) -> Path:
    """Write the site for the state at ``state_path`` into ``out_dir``; returns index.html.

    The page is the public one (hidden shapes redacted) unless ``private``."""
    with State.open(state_path, create=False) as state:
        return render_state(state, out_dir, private=private)


def _infra(state: State, facts: dict[str, ShapeFacts] | None) -> dict[str, str]:
    """The runner's infrastructure errors (meta :data:`INFRA_META`), capped and, on the
    public page, scrubbed of hidden dimension values like every other message."""
    raw = state.meta(INFRA_META, {})
    out: dict[str, str] = {}
    for k, v in (raw.items() if isinstance(raw, Mapping) else ()):
        text = f"infrastructure error, retried by the next run: {v}"[:400]
        task = str(k).split("\0")[1] if str(k).count("\0") == 2 else ""
        out[str(k)] = text if facts is None else scrub_text(text, facts.get(task, ShapeFacts(None)))
    return out


def render_state(state: State, out_dir: Path, *, private: bool = False) -> Path:
    """Write the site for an open ``state`` into ``out_dir``; returns index.html. The one
    renderer: :func:`render_site` and a live board both call it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval").mkdir(exist_ok=True)
    facts = None if private else _task_facts(state)
    rows = state.evaluations()
    if facts is not None:
        rows = [public_row(r, facts.get(r.task, ShapeFacts(None))) for r in rows]
    tasks = state.meta("usable_tasks", []) or state.meta("tasks", [])
    subs = {s.name: s.files for s in state.submissions() if s.status == "valid"}
    top = state.meta("top")
    b = board(rows, subs, tasks, top or [], _infra(state, facts))
    problems = _problems(state, facts)
    top_k = state.meta("top_k")
    plots = write_plots(b, out_dir)
    by_key = {(r.submission, r.task + "\0" + r.round): r for r in rows}
    for r in rows:
        (out_dir / eval_page_name(r)).write_text(_eval_page(r, private), encoding="utf-8")
    index = out_dir / "index.html"
    body = _index_body(b, rows, tasks, private, plots, by_key, problems,
                       _ranking_head(b, top_k, top is not None))
    index.write_text(_doc("kgrader leaderboard", body), encoding="utf-8")
    return index


def _ranking_head(b: Board, top_k: object, selected: bool) -> str:
    k = top_k if isinstance(top_k, int) else len(b.top)
    head = f"<h2>Ranking (top {escape(str(k))}, figures from an independent re-run)</h2>"
    note = ""
    if not selected:
        note = "The top entries are selected when every main-round evaluation is in."
    elif len(b.top) < k:
        note = (f"Top {k} asked; {len(b.top)} "
                f"{'entry has' if len(b.top) == 1 else 'entries have'} at least one correct, "
                "timed task.")
    if any(e.tied for e in b.ranked):
        note += (" Entries that share a rank are tied within noise: their re-run figures do "
                 "not separate them.")
    if any(f.code == TIED for e in b.ranked for f in e.figures.values()):
        note += (" A task marked tied within noise was correct in the re-run, but the host's "
                 "timing could not separate it from the reference (no speed-up is claimed).")
    if b.none_faster:
        note += (" No entry is faster than the reference on any task: every floored geomean "
                 "is 1 and every fast_1 is 0, so the geomean over solved tasks orders them.")
    return head + (f'<p id="ranking-note">{escape(note.strip())}</p>' if note else "")


def _index_body(b: Board, rows: Sequence[EvalRow], tasks: Sequence[str], private: bool,
                plots: dict[str, str], by_key: dict[tuple[str, str], EvalRow], problems: str,
                ranking_head: str) -> str:
    headers = ["rank", "submission", "correct", *STAT_HEADERS]
    n = len(tasks)
    body = [f"<h1>kgrader leaderboard</h1>{PRIVATE_BANNER if private else ''}<p>Rendered "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
            f"Tasks: {escape(', '.join(tasks)) or 'none yet'}. Speed-up = reference time / "
            "submission time, both timed in the same sandbox, interleaved. Times: the median "
            "of the timed calls, with a distribution-free 95% interval (order statistics). "
            "Correct: tasks whose verdict is correct (checked on every seed and hidden "
            "shape, then timed), of all the run's tasks. Intervals of the aggregates: 95% "
            "percentile bootstrap over tasks (seeded). Unsolved tasks (failed, anomalous, not "
            "entered) count as speed-up 0 for fast_p and the median, are excluded from the "
            "geomean (its n says how many are left) and count as 1 in the floored geomean.</p>",
            "<h2>Hardware and software</h2>", environment_table(rows),
            ranking_head,
            table(headers, _ranking_rows(b.ranked, n) + _awaiting_rows(b), "ranking",
                   empty="no ranked entries yet (the top-K re-run has not finished)"),
            "<h2>Not re-measured (selection round; not ranked)</h2>",
            table(headers, _ranking_rows(b.unranked, n), "unranked"),
            "<h2>Pending (not graded yet, or hit by an infrastructure error; retried by "
            "the next run)</h2>",
            table(["submission", "task", "round", "reason"],
                   [f"<tr><td class='l'>{escape(p.submission)}</td><td class='l'>{escape(p.task)}"
                    f"</td><td class='l'>{escape(p.round)}</td><td class='l'>"
                    f"{escape(p.reason[:400])}</td></tr>" for p in b.pending], "pending",
                   empty="none: every evaluation of every valid submission is recorded"),
            "<h2>Disqualified (an integrity violation on any task; not ranked at all)</h2>",
            table(["submission", "task", "code", "reason"],
                   [f"<tr><td class='l'>{escape(d.submission)}</td><td class='l'>{escape(d.task)}"
                    f"</td><td class='l'>{escape(d.code or '')}</td><td class='l'>"
                    f"{escape(d.message[:300])}</td></tr>" for d in b.disqualified],
                   "disqualified", empty="none"),
            "<h2>Plots</h2>",
            f'<img id="plot-by-task" src="{plots["by_task"]}" alt="speed-up distribution per task">',
            f'<img id="plot-top" src="{plots["top"]}" alt="per-task speed-ups of ranked entries">',
            "<h2>Per task</h2>"]
    if not tasks:
        body.append('<p class="empty">no tasks yet</p>')
    for t in tasks:
        body.append(f"<h3>{escape(t)}</h3>" + _task_table(b, t, by_key))
    body.append(problems)
    return "\n".join(body)


def _report_verdict(r: EvalRow, rep: Mapping[str, Any] | None) -> str:
    """One sentence that reconciles the leaderboard's verdict with the report's ``ok``
    (which is the acceptance rule's: a correct submission slower than the reference is
    correct here and ``"ok": false`` there)."""
    label = VERDICTS.get(r.verdict, r.verdict)
    if rep is None:
        return f"Leaderboard verdict: {label}."
    ok = rep.get("ok")
    acc = rep.get("acceptance")
    reason = acc.get("reason") if isinstance(acc, Mapping) else None
    if r.verdict == "ok" and ok is False:
        return (f"Leaderboard verdict: {label} (checked, then timed against the reference). "
                "The report below says \"ok\": false because its acceptance rule did not "
                "accept the submission as faster than the reference"
                f"{': ' + str(reason)[:300] if reason else ''}; the leaderboard ranks it by "
                "its speed-up instead.")
    if r.verdict != "ok" and ok is True:
        return f"Leaderboard verdict: {label} ({r.code or 'see the message'}), although the report says \"ok\": true."
    return f"Leaderboard verdict: {label}; the report says \"ok\": {json.dumps(ok)}."


def _eval_page(r: EvalRow, private: bool = False) -> str:
    try:
        rep = json.loads(r.report_json) if r.report_json else None
        pretty = json.dumps(rep, indent=2) if r.report_json else "(none)"
    except ValueError:
        rep, pretty = None, r.report_json or ""
    rep = rep if isinstance(rep, dict) else None
    sub_t, ref_t = row_times(r.report_json)
    floor = at_clock_floor(r)
    facts = [("submission", r.submission), ("task", r.task), ("round", r.round),
             ("verdict", VERDICTS.get(r.verdict, r.verdict)), ("stage", r.stage or ""),
             ("code", r.code or ""),
             ("speed-up", num(r.speedup, 5) if floor is None else f"not measured: {floor}"),
             ("speed-up from", r.speedup_source or ""), ("file sha256", r.file_sha),
             ("engine", r.engine), ("wall s", str(r.wall_s)), ("finished", r.finished_at),
             ("message", r.message)]
    rows = [f'<tr><th class="l">{escape(k)}</th><td class="l">{escape(v)}</td></tr>'
            for k, v in facts]
    rows += [f'<tr><th class="l">{k}</th>{time_cell(t)}</tr>'
             for k, t in (("time", sub_t), ("reference time", ref_t))]
    body = (f"<h1>{escape(r.submission)} on {escape(r.task)}</h1>{PRIVATE_BANNER if private else ''}"
            f'<p><a href="../index.html">back</a></p>'
            f'<p id="verdict">{escape(_report_verdict(r, rep))}</p><table>{"".join(rows)}</table>'
            f"<h2>Full report</h2><pre>{escape(pretty)}</pre>")
    return _doc(f"{r.submission} / {r.task}", body)
