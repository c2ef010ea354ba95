"""The submitter's report page: every value escaped, no script, a CSP that forbids them."""

from __future__ import annotations

import json
from html import escape
from typing import Any

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# The board's page holds its plots ('self'); its own <meta> CSP says the same.
BOARD_CSP = CSP + "; img-src 'self'"
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1100px}td,th{border:1px solid #ccc;"
          "padding:3px 8px;text-align:left}table{border-collapse:collapse}"
          "pre{white-space:pre-wrap;background:#f6f6f6;padding:1em}")


def report_page(job: dict[str, Any], report: dict[str, Any] | None,
                steps: list[dict[str, Any]] | None = None) -> str:
    """The job's facts and its (candidate-facing) report; while it runs, a waiting note
    with the judge's steps so far (the response's ``Refresh`` header reloads it)."""
    keys = [k for k in ("id", "entry", "task", "mode", "label", "state", "verdict", "attempts",
                        "error") if k in job]
    rows = "".join(f'<tr><th>{escape(k)}</th><td id="job-{escape(k)}">'
                   f"{escape('' if job.get(k) is None else str(job[k]))}</td></tr>" for k in keys)
    if report is None:
        shown = [escape(str(st.get("step", "")))
                 + (f" ({float(st['s']):.2f} s)" if isinstance(st.get("s"), int | float) else "")
                 for st in (steps or [])]
        items = "".join(f"<li>{x}</li>" for x in shown)
        progress = f'<p>Steps so far:</p><ol id="steps">{items}</ol>' if shown else ""
        tail = f"<p>Not finished yet: this page reloads itself.</p>{progress}" \
            if job.get("state") not in ("done", "failed", "cancelled") else \
            ("<p>Cancelled: no report.</p>" if job.get("state") == "cancelled" else "<p>No report.</p>")
    else:
        errors = "".join(f"<li>{escape(str(e.get('stage')))} / {escape(str(e.get('code')))}: "
                         f"{escape(str(e.get('message', ''))[:500])}</li>"
                         for e in report.get("errors", []))
        timing = report.get("timing") or {}
        # The job's verdict leads: a leaderboard entry slower than the reference is "ok"
        # (correct, ranked by its speed-up) while its report's pairing says ok: false.
        median = timing.get("median_ms")
        said = f"median {median} ms" if isinstance(median, int | float) else "not timed"
        stage = report.get("stage")
        tail = (f'<p id="verdict">Verdict: {escape(str(job.get("verdict") or "none yet"))} '
                f'(report: {"PASS" if report.get("ok") else "FAIL"} at stage '
                f'{escape(str(stage) if stage else "none reached")}; {escape(said)})</p>'
                f"<ul>{errors}</ul><h2>Report</h2><pre>{escape(json.dumps(report, indent=2))}</pre>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>kgrader submission {escape(str(job.get('id')))}</title>"
            f"<style>{_STYLE}</style></head><body><h1>Submission "
            f"{escape(str(job.get('id')))}</h1><table>{rows}</table>{tail}</body></html>\n")
