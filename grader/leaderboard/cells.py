"""HTML pieces of the leaderboard's pages: numbers, intervals, tables, verdict labels and
the hardware and software table.

Every string that can come from a submission or a sandbox goes through
:func:`html.escape` here; callers pass text, never markup, except the rows they built
from these pieces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from grader.leaderboard.aggregate import Interval, Stat
from grader.leaderboard.state import EvalRow

__all__ = ["VERDICTS", "environment_table", "num", "stat_cell", "table", "time_cell"]


VERDICTS = {"ok": "correct", "failed": "failed", "anomaly": "ANOMALY (below roofline floor)",
            "disqualified": "DISQUALIFIED", "not_entered": "not entered", "skipped": "skipped"}


def num(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


def ci(text: str) -> str:
    return f'<br><span class="ci">{escape(text)}</span>'


def stat_cell(s: Stat | None) -> str:
    """A statistic and its interval; a degenerate interval is said in words (``1 [1, 1]``
    tells a reader nothing: it is one task, or no task faster than the reference)."""
    if s is None or s.value is None:
        return "<td>—</td>"
    if s.low is None or s.high is None:
        return f"<td>{num(s.value)}</td>"
    if s.low == s.high:
        why = ("one task: no interval" if s.n < 2 else
               "no task faster than the reference" if s.key == "floored_geomean" and s.value == 1
               else "no spread over tasks")
        return f"<td>{num(s.value)}{ci(why)}</td>"
    return f"<td>{num(s.value)}{ci(f'[{num(s.low)}, {num(s.high)}]')}</td>"


def time_cell(iv: Interval | None) -> str:
    """A median time in ms with its 95% interval (order statistics over the samples)."""
    if iv is None:
        return "<td>—</td>"
    if iv.low is None or iv.high is None:
        why = iv.note or f"n={iv.n}: too few samples for an interval"
        return f"<td>{num(iv.value, 4)} ms{ci(why)}</td>"
    return f"<td>{num(iv.value, 4)} ms{ci(f'[{num(iv.low, 4)}, {num(iv.high, 4)}] n={iv.n}')}</td>"


def table(headers: Sequence[str], rows: Sequence[str], tid: str,
          empty: str = "no entries yet") -> str:
    head = "".join(f'<th class="l">{escape(h)}</th>' if i == 0 or h == "submission" else
                   f"<th>{escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(rows) or (f'<tr><td class="l empty" colspan="{len(headers)}">'
                             f"{escape(empty)}</td></tr>")
    return f'<table id="{tid}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _env_of(rep: Mapping[str, Any]) -> tuple[str, str]:
    """(hardware, software) of one report, from what the judge recorded in the sandbox."""
    env = rep.get("environment")
    env = env if isinstance(env, Mapping) else {}
    hw = [str(rep.get("device") or "device unknown")]
    gpu = [f"{label} {env[k]}" for k, label in (("driver", "driver"), ("cuda", "CUDA"),
                                                ("sm", "sm"), ("memory_gib", "GiB"))
           if env.get(k) not in (None, "")]
    if gpu:
        hw[0] += f" ({', '.join(gpu)})"
    if env.get("cpu_name"):
        hw.append(f"CPU {env['cpu_name']}")
    if env.get("cpu_count"):
        hw.append(f"{env['cpu_count']} CPUs visible")
    sw = [f"{label} {env[k]}" for k, label in (("torch", "torch"), ("triton", "Triton"),
                                               ("python", "Python")) if env.get(k)]
    if env.get("triton_interpret"):
        sw.append("Triton interpreter (TRITON_INTERPRET=1)")
    box = rep.get("sandbox")
    backend = box.get("backend") if isinstance(box, Mapping) else None
    sw.append(f"sandbox backend {backend or 'unknown'}")
    return " · ".join(hw), " · ".join(sw)


def environment_table(rows: Sequence[EvalRow]) -> str:
    """Where the page's figures were measured: one line per distinct hardware and
    software set among the evaluations, with how many evaluations each holds."""
    seen: dict[tuple[str, str], int] = {}
    for r in rows:
        try:
            rep = json.loads(r.report_json) if r.report_json else None
        except ValueError:
            rep = None
        if isinstance(rep, dict) and rep.get("environment"):
            key = _env_of(rep)
            seen[key] = seen.get(key, 0) + 1
    out = [f'<tr><td class="l">{escape(hw)}</td><td class="l">{escape(sw)}</td><td>{n}</td></tr>'
           for (hw, sw), n in sorted(seen.items(), key=lambda kv: -kv[1])]
    return table(["hardware", "software", "evaluations"], out, "environment",
                  empty="no evaluation yet: nothing was measured")
