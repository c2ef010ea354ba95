"""The leaderboard page in a real headless Chromium: tables, plots, and no injection.

The state is built from fixed rows (the evaluations themselves are irrelevant here);
real evaluations are in test_leaderboard_run.py. The screenshot is kept under
tests/artifacts/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grader.leaderboard.render import render_site
from grader.leaderboard.state import EvalRow, State, SubmissionRow, TaskCheck

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
EVIL = "<script>document.title='pwned'</script>"
EVIL_IMG = '<img src=x onerror="document.title=1">'
TASKS = ["vector_add_small", "softmax", "matmul"]
SHA = "a" * 64

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(apt-get install -y chromium); CI installs it")


def _row(sub: str, task: str, rnd: str, verdict: str, s: float | None, code: str | None = None) -> EvalRow:
    report = {"ok": verdict == "ok", "task": task, "errors": [] if code is None else
              [{"stage": "benchmark", "code": code, "message": f"{EVIL} {code}"}]}
    return EvalRow(submission=sub, task=task, file_sha=SHA, round=rnd, verdict=verdict,
                   stage="accept", code=code, message=f"msg {EVIL_IMG}", speedup=s,
                   speedup_source="replicate" if s else None, t_sub_ms=1.0,
                   report_json=json.dumps(report), wall_s=3.0, engine="local")


def build_state(path: Path) -> None:
    subs = {"fast": [2.0, 1.6, 3.0], EVIL: [1.2, 0.9, 1.1], EVIL_IMG: [0.5, 0.4, 0.6],
            "cheater": [None, 1.3, 1.0]}
    with State.open(path) as st:
        st.set_meta("tasks", TASKS)
        st.set_meta("usable_tasks", TASKS)
        st.set_meta("top_k", 2)
        st.set_meta("top", ["fast", EVIL])
        for t in TASKS:
            st.record_task_check(TaskCheck(t, "x", True, None, "correct", None))
        for name, speeds in subs.items():
            st.record_submission(SubmissionRow(name, "c" * 64, "valid", "ok", None,
                                               dict.fromkeys(TASKS, SHA)))
            for t, s in zip(TASKS, speeds, strict=True):
                if s is None:
                    st.record_evaluation(_row(name, t, "main", "anomaly", None, "below_roofline_floor"))
                else:
                    st.record_evaluation(_row(name, t, "main", "ok", s))
                if name in ("fast", EVIL):
                    st.record_evaluation(_row(name, t, "rerun", "ok", (s or 1) * 0.95))
        st.record_submission(SubmissionRow("copycat", "c" * 64, "duplicate",
                                           "same content as 'fast'", "fast", {}))


class Cells(HTMLParser):
    """Text of every <td> per table id, and every <img src>."""

    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.cells: dict[str, list[str]] = {}
        self.imgs: list[str] = []
        self.scripts = 0
        self._in_td = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id") or ""
            self.cells.setdefault(self.table, [])
        elif tag == "td":
            self._in_td = True
            if self.table is not None:
                self.cells[self.table].append("")
        elif tag == "img":
            self.imgs.append(a.get("src") or "")
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_td = False
        elif tag == "table":
            self.table = None

    def handle_data(self, data: str) -> None:
        if self._in_td and self.table is not None:
            self.cells[self.table][-1] += data


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp / 'profile'}", "--window-size=1280,2000",
            *extra, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


def test_page_renders_ranking_plots_and_escapes_submission_names(tmp_path: Path) -> None:
    state = tmp_path / "lb.sqlite"
    build_state(state)
    site = tmp_path / "site"
    index = render_site(state, site)
    dom = chromium(index.as_uri(), tmp_path, "--dump-dom").stdout
    parsed = Cells()
    parsed.feed(dom)
    assert parsed.scripts == 0, "a submission name injected a <script>"
    assert "<title>kgrader leaderboard</title>" in dom  # no script changed the title
    ranking = parsed.cells["ranking"]
    assert ranking[0:2] == ["1", "fast"] and EVIL in ranking  # shown as text, escaped
    assert EVIL_IMG in parsed.cells["unranked"]
    assert "cheater" in parsed.cells["unranked"]
    assert any("ANOMALY" in c for t, cs in parsed.cells.items() if t.startswith("task-") for c in cs)
    assert any("copycat" in c for c in parsed.cells["problems"])
    assert {"speedups_by_task.png", "top_submissions.png"} <= set(parsed.imgs)
    for src in parsed.imgs:
        png = site / src
        assert png.is_file() and png.stat().st_size > 1000
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    links = re.findall(r'href="(eval/[0-9a-f]+\.html)"', index.read_text())
    assert links and all((site / link).is_file() for link in links)
    pages = [(site / link).read_text() for link in set(links)]
    assert not any("<script" in p for p in pages)
    assert any("&lt;script&gt;" in p for p in pages)

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "leaderboard_page.png"
    shot.unlink(missing_ok=True)
    chromium(index.as_uri(), tmp_path, f"--screenshot={shot}")
    from PIL import Image

    with Image.open(shot) as img:
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50, "the screenshot is blank"
        # The plots must have been drawn (images that failed to load leave no pixels of the
        # matplotlib default blue).
        assert any(abs(r - 31) < 12 and abs(g - 119) < 12 and abs(b - 180) < 12
                   for _, (r, g, b) in colours), "no plot pixels in the screenshot"
