"""The page's plots (matplotlib, Agg backend, PNG): no display, no network, no fonts fetched.

Labels come from submission names (untrusted): they are truncated and their ``$`` are
escaped so that matplotlib's mathtext never interprets them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from grader.leaderboard.aggregate import Board, Entry


def _label(name: str, width: int = 24) -> str:
    name = name if len(name) <= width else name[: width - 1] + "…"
    return name.replace("\\", "\\\\").replace("$", r"\$")


def speedups_by_task(entries: Sequence[Entry], tasks: Sequence[str], out: Path) -> Path:
    """One strip of points per task: every solved entry's speed-up (log scale)."""
    fig, ax = plt.subplots(figsize=(max(4.0, 1.8 * len(tasks)), 4.0), dpi=100)
    any_point = False
    for i, t in enumerate(tasks):
        vals = [e.figures[t].value for e in entries if t in e.figures and e.figures[t].solved]
        if vals:
            any_point = True
            xs = [i + 0.15 * math.sin(j * 2.4) for j in range(len(vals))]
            ax.scatter(xs, vals, alpha=0.7, s=28)
            ax.boxplot([vals], positions=[i], widths=0.5, showfliers=False)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(tasks)), [_label(t) for t in tasks])
    ax.set_xlim(-0.7, len(tasks) - 0.3)
    if any_point:
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no solved entries yet", transform=ax.transAxes, ha="center")
    ax.set_ylabel("speed-up vs reference (log)")
    ax.set_title("Speed-up per task (solved entries)", fontsize="medium")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def top_submissions(entries: Sequence[Entry], tasks: Sequence[str], out: Path) -> Path:
    """Grouped bars: each ranked entry's per-task speed-up (unsolved: no bar, marked x)."""
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(entries) * max(1, len(tasks)) / 2), 4.0),
                           dpi=100)
    width = 0.8 / max(1, len(tasks))
    for j, t in enumerate(tasks):
        xs = [i + (j - (len(tasks) - 1) / 2) * width for i in range(len(entries))]
        vals = [e.figures[t].value if t in e.figures else 0.0 for e in entries]
        ax.bar(xs, [v if v > 0 else math.nan for v in vals], width, label=_label(t))
        for x, v in zip(xs, vals, strict=True):
            if v <= 0:
                ax.plot([x], [1.0], marker="x", color="red")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(entries)), [_label(e.submission) for e in entries],
                  rotation=20, ha="right")
    if any(f.solved for e in entries for f in e.figures.values()):
        ax.set_yscale("log")
    if not entries:
        ax.text(0.5, 0.5, "no ranked entries yet", transform=ax.transAxes, ha="center")
    ax.set_ylabel("speed-up vs reference (log)")
    ax.set_title("Ranked entries, re-run figures (x: unsolved)", fontsize="medium")
    if tasks and entries:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


def write_plots(b: Board, out_dir: Path) -> dict[str, str]:
    """Write both plots; returns {plot key: file name} for the page."""
    published = b.ranked + b.unranked
    speedups_by_task(published, b.tasks, out_dir / "speedups_by_task.png")
    top_submissions(b.ranked, b.tasks, out_dir / "top_submissions.png")
    return {"by_task": "speedups_by_task.png", "top": "top_submissions.png"}
