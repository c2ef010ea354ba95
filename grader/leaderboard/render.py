"""The static leaderboard site: ``index.html``, plots, and one page per evaluation.

Every string that can come from a submission (its name, messages, reports) goes through
:func:`html.escape`; file names of generated pages are hashes, never names; a Content
Security Policy forbids scripts and remote loads, as a second line behind the escaping.

**Hidden shapes never reach the published page.** Every row's report and message go
through :func:`grader.report.redact.redact` with its task's shape facts (which the run
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

from grader.leaderboard.aggregate import FAST_PS, Board, Entry, Stat, board
from grader.leaderboard.plots import write_plots
from grader.leaderboard.seeds import TaskPayload
from grader.leaderboard.state import EvalRow, State
from grader.report.model import Report
from grader.report.redact import ShapeFacts, facts_for, redact, redact_text, scrub_text
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
.ok{color:#060}.ci{color:#666;font-size:85%}pre{white-space:pre-wrap;background:#f6f6f6;
padding:1em}img{max-width:100%;border:1px solid #ddd}"""
STAT_KEYS = ["floored_geomean", "geomean", "median"] + \
    [f"fast_{p:g}".replace(".", "_") for p in FAST_PS]


def eval_page_name(row: EvalRow) -> str:
    """A page name from the row's key: a hash, so no submission text reaches a path."""
    key = "\0".join(row.key).encode()
    return f"eval/{hashlib.sha256(key).hexdigest()[:20]}.html"


def _doc(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
            f"<body>\n{body}\n</body></html>\n")


def _num(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


def _stat_cell(s: Stat | None) -> str:
    if s is None or s.value is None:
        return "<td>—</td>"
    ci = f'<br><span class="ci">[{_num(s.low)}, {_num(s.high)}]</span>' if s.low is not None else ""
    return f"<td>{_num(s.value)}{ci}</td>"


def _table(headers: Sequence[str], rows: Iterable[str], tid: str) -> str:
    head = "".join(f'<th class="l">{escape(h)}</th>' if i == 0 or h == "submission" else
                   f"<th>{escape(h)}</th>" for i, h in enumerate(headers))
    return f'<table id="{tid}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _ranking_rows(entries: Sequence[Entry], labels: dict[str, str]) -> list[str]:
    rows = []
    for e in entries:
        rank = str(e.rank) if e.rank is not None else "—"
        cells = "".join(_stat_cell(e.stats.get(k)) for k in STAT_KEYS)
        rows.append(f'<tr><td class="l">{rank}</td><td class="l">{escape(e.submission)}</td>'
                    f"{cells}</tr>")
        for k in STAT_KEYS:
            if k in e.stats:
                labels.setdefault(k, e.stats[k].label.split(" (")[0])
    return rows


def _task_table(b: Board, task: str, rows_by_key: dict[tuple[str, str], EvalRow]) -> str:
    out = []
    for e in b.ranked + b.unranked:
        f = e.figures[task]
        row = rows_by_key.get((e.submission, task + "\0" + e.round))
        link = f'<a href="{eval_page_name(row)}">report</a>' if row is not None else ""
        cls = "anomaly" if f.verdict == "anomaly" else ("ok" if f.solved else "failed")
        verdict = "ANOMALY (below roofline floor)" if f.verdict == "anomaly" else f.verdict
        code = f"{f.code}: {f.message[:160]}" if f.code else ""
        out.append(f'<tr class="{cls}"><td class="l">{escape(e.submission)}</td>'
                   f'<td class="l">{escape(e.round)}</td><td class="l">{escape(verdict)}</td>'
                   f"<td>{_num(f.speedup if f.solved else None, 4)}</td>"
                   f'<td class="l">{escape(code)}</td><td class="l">{link}</td></tr>')
    return _table(["submission", "round", "verdict", "speed-up", "why", "report"], out,
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
    return "<h2>Problems</h2>" + _table(["name", "status", "message"], tasks + rows, "problems")


def render_site(state_path: Path, out_dir: Path, *, private: bool = False) -> Path:
    """Write the site for the state at ``state_path`` into ``out_dir``; returns index.html.

    The page is the public one (hidden shapes redacted) unless ``private``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval").mkdir(exist_ok=True)
    with State.open(state_path, create=False) as state:
        facts = None if private else _task_facts(state)
        rows = state.evaluations()
        if facts is not None:
            rows = [public_row(r, facts.get(r.task, ShapeFacts(None))) for r in rows]
        tasks = state.meta("usable_tasks", []) or state.meta("tasks", [])
        subs = {s.name: s.files for s in state.submissions() if s.status == "valid"}
        b = board(rows, subs, tasks, state.meta("top", []))
        problems = _problems(state, facts)
        top_k = state.meta("top_k")
    plots = write_plots(b, out_dir)
    by_key = {(r.submission, r.task + "\0" + r.round): r for r in rows}
    for r in rows:
        (out_dir / eval_page_name(r)).write_text(_eval_page(r, private), encoding="utf-8")
    labels: dict[str, str] = {}
    ranked = _ranking_rows(b.ranked, labels)
    unranked = _ranking_rows(b.unranked, labels)
    headers = ["rank", "submission"] + [labels.get(k, k) for k in STAT_KEYS]
    body = [f"<h1>kgrader leaderboard</h1>{PRIVATE_BANNER if private else ''}<p>Rendered {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
            f"Tasks: {escape(', '.join(tasks))}. Speed-up = reference time / submission "
            "time, both timed in the same sandbox, interleaved. Intervals: 95% percentile "
            "bootstrap over tasks (seeded). Unsolved tasks (failed, anomalous, not entered) "
            "count as speed-up 0 for fast_p and the median, are excluded from the geomean "
            "(its n says how many are left) and count as 1 in the floored geomean.</p>",
            f"<h2>Ranking (top {escape(str(top_k))}, figures from an independent re-run)</h2>",
            _table(headers, ranked, "ranking"),
            "<h2>Not re-measured (selection round; not ranked)</h2>",
            _table(headers, unranked, "unranked"),
            "<h2>Disqualified (an integrity violation on any task; not ranked at all)</h2>",
            _table(["submission", "task", "code", "reason"],
                   [f"<tr><td class='l'>{escape(d.submission)}</td><td class='l'>{escape(d.task)}"
                    f"</td><td class='l'>{escape(d.code or '')}</td><td class='l'>"
                    f"{escape(d.message[:300])}</td></tr>" for d in b.disqualified],
                   "disqualified"),
            "<h2>Plots</h2>",
            f'<img id="plot-by-task" src="{plots["by_task"]}" alt="speed-up distribution per task">',
            f'<img id="plot-top" src="{plots["top"]}" alt="per-task speed-ups of ranked entries">',
            "<h2>Per task</h2>"]
    for t in tasks:
        body.append(f"<h3>{escape(t)}</h3>" + _task_table(b, t, by_key))
    body.append(problems)
    index = out_dir / "index.html"
    index.write_text(_doc("kgrader leaderboard", "\n".join(body)), encoding="utf-8")
    return index


def _eval_page(r: EvalRow, private: bool = False) -> str:
    try:
        pretty = json.dumps(json.loads(r.report_json), indent=2) if r.report_json else "(none)"
    except ValueError:
        pretty = r.report_json or ""
    facts = [("submission", r.submission), ("task", r.task), ("round", r.round),
             ("verdict", r.verdict), ("stage", r.stage or ""), ("code", r.code or ""),
             ("speed-up", _num(r.speedup, 5)), ("speed-up from", r.speedup_source or ""),
             ("file sha256", r.file_sha), ("engine", r.engine), ("wall s", str(r.wall_s)),
             ("finished", r.finished_at), ("message", r.message)]
    rows = [f'<tr><th class="l">{escape(k)}</th><td class="l">{escape(v)}</td></tr>'
            for k, v in facts]
    body = (f"<h1>{escape(r.submission)} on {escape(r.task)}</h1>{PRIVATE_BANNER if private else ''}"
            f'<p><a href="../index.html">back</a></p><table>{"".join(rows)}</table>'
            f"<h2>Full report</h2><pre>{escape(pretty)}</pre>")
    return _doc(f"{r.submission} / {r.task}", body)
