"""The leaderboard page in a real headless Chromium: what an operator and a submitter read.

The states are built from fixed rows whose reports are real ``Report`` models (the
evaluations themselves are irrelevant here; real ones are in test_leaderboard_run.py).
Each test reads the page as Chromium laid it out (``--dump-dom``: the DOM after
parsing, with no script allowed to run) and asserts the visible text of every item the
page must show: the hardware and software line, absolute times with intervals, the
correctness rate, honest aggregates when every entry is slower than the reference, "top
K" with K rows, every entry accounted for (infrastructure errors with their reason),
verdicts consistent with the embedded report, empty states, and escaping. Screenshots
are kept under tests/artifacts/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grader.leaderboard.aggregate import INFRA_META, infra_key
from grader.leaderboard.render import render_site
from grader.leaderboard.state import EvalRow, State, SubmissionRow, TaskCheck
from grader.limits import Limits
from grader.report.model import (
    AcceptanceResult,
    Report,
    ReportError,
    SandboxInfo,
    TimingStats,
)
from tests.e2e._chromium import LOCAL_ONLY

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
EVIL = "<script>document.title='pwned'</script>"
EVIL_IMG = '<img src=x onerror="document.title=1">'
TASKS = ["vector_add_small", "softmax", "matmul"]
SHA = "a" * 64
ENV = {"device_name": "NVIDIA H200", "driver": "550.54.15", "cuda": "12.4", "sm": "9.0",
       "torch": "2.5.1", "triton": "3.1.0", "python": "3.11.7", "cpu_name": "AMD EPYC 9654"}

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(apt-get install -y chromium); CI installs it")


def _timing(median: float) -> TimingStats:
    samples = [median * (1 + (i - 20) / 400) for i in range(41)]  # 41 samples around median
    return TimingStats(samples=41, mean_ms=median, median_ms=median, p95_ms=median * 1.05,
                       std_ms=median / 50, min_ms=min(samples), cv=0.02,
                       device="cuda: NVIDIA H200", clock="cuda_event", mode="events",
                       cache="cold", clocks={"samples_ms": samples})


def _row(sub: str, task: str, rnd: str, verdict: str, s: float | None,
         code: str | None = None) -> EvalRow:
    errors = [] if code is None else [ReportError(stage="benchmark", code=code,
                                                  origin="candidate", message=f"{EVIL} {code}")]
    slower = s is not None and s < 1
    acc = None if s is None else AcceptanceResult(
        accepted=not slower, rule="seed", improvement_fraction=1 - 1 / s, pairs=20,
        positive_fraction=0.1 if slower else 0.9,
        reason="seed rule: median improvement below 0.01" if slower else "seed rule: accepted")
    t_ref = 1.0
    report = Report(ok=code is None and not slower, stage="accept", task=task, errors=errors,
                    device="cuda: NVIDIA H200", environment=ENV,
                    timing=_timing(t_ref / s) if s else None,
                    timing_current=_timing(t_ref) if s else None, acceptance=acc,
                    sandbox=SandboxInfo(backend="bwrap", limits=Limits()))
    return EvalRow(submission=sub, task=task, file_sha=SHA, round=rnd, verdict=verdict,
                   stage="accept", code=code, message=f"msg {EVIL_IMG}", speedup=s,
                   speedup_source="replicate" if s else None,
                   t_sub_ms=t_ref / s if s else None,
                   report_json=report.model_dump_json(), wall_s=3.0, engine="local")


def _base(st: State, top: list[str], top_k: int) -> None:
    st.set_meta("tasks", TASKS)
    st.set_meta("usable_tasks", TASKS)
    st.set_meta("top_k", top_k)
    st.set_meta("top", top)
    for t in TASKS:
        st.record_task_check(TaskCheck(t, "x", True, None, "correct", None))


def _submit(st: State, name: str, speeds: list[float | None] | None,
            rerun: float | None = None, skip: tuple[str, ...] = ()) -> None:
    st.record_submission(SubmissionRow(name, name.encode().hex()[:64].ljust(64, "0"), "valid",
                                       "ok", None, dict.fromkeys(TASKS, SHA)))
    for t, s in zip(TASKS, speeds or [], strict=True):
        if t in skip:
            continue
        if s is None:
            st.record_evaluation(_row(name, t, "main", "anomaly", None, "below_roofline_floor"))
        else:
            st.record_evaluation(_row(name, t, "main", "ok", s))
        if rerun is not None and (name, t) != (EVIL, "matmul"):
            st.record_evaluation(_row(name, t, "rerun", "ok", (s or 1) * rerun))


def build_state(path: Path) -> None:
    with State.open(path) as st:
        _base(st, ["fast", EVIL, EVIL_IMG], 3)
        _submit(st, "fast", [2.0, 1.6, 3.0], rerun=0.95)
        _submit(st, EVIL, [1.2, 0.9, 1.1], rerun=0.95)  # its matmul re-run: infra error
        _submit(st, EVIL_IMG, [0.5, 0.4, 0.6], rerun=1.0)  # correct, slower: report ok false
        _submit(st, "cheater", [None, 1.3, 1.0])
        _submit(st, "flaky", [1.1, 1.1, 1.1], skip=("softmax",))  # main hit an infra error
        st.record_submission(SubmissionRow("sneaky", "d" * 64, "valid", "ok", None,
                                           dict.fromkeys(TASKS, SHA)))
        st.record_evaluation(_row("sneaky", "softmax", "main", "disqualified", None,
                                  "work_escaped_timing"))
        st.record_submission(SubmissionRow("copycat", "c" * 64, "duplicate",
                                           "same content as 'fast'", "fast", {}))
        st.set_meta(INFRA_META, {
            infra_key("flaky", "softmax", "main"): "sandbox_unavailable: bwrap could not start",
            infra_key(EVIL, "matmul", "rerun"): "internal error: RuntimeError: disk full"})


class Page(HTMLParser):
    """Text of every <td> per table id (rows kept), of every element with an id, and of
    the whole body; every <img src>; every <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.rows: dict[str, list[list[str]]] = {}
        self.ids: dict[str, str] = {}
        self.imgs: list[str] = []
        self.scripts = 0
        self.text = ""
        self._in_td = False
        self._open_ids: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self._open_ids.append((tag, a["id"] or ""))
            self.ids[a["id"] or ""] = ""
        if tag == "table":
            self.table = a.get("id") or ""
            self.rows.setdefault(self.table, [])
        elif tag == "tr" and self.table is not None:
            self.rows[self.table].append([])
        elif tag == "td":
            self._in_td = True
            if self.table is not None and self.rows[self.table]:
                self.rows[self.table][-1].append("")
        elif tag == "img":
            self.imgs.append(a.get("src") or "")
        elif tag == "script":
            self.scripts += 1
        elif tag == "br":
            self.handle_data(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_td = False
        elif tag == "table":
            self.table = None
        if self._open_ids and self._open_ids[-1][0] == tag:
            self._open_ids.pop()

    def handle_data(self, data: str) -> None:
        self.text += data
        for _, i in self._open_ids:
            self.ids[i] += data
        if self._in_td and self.table is not None and self.rows[self.table]:
            row = self.rows[self.table][-1]
            if row:
                row[-1] += data

    def cells(self, table: str) -> list[str]:
        return [c for r in self.rows.get(table, []) for c in r]

    def body_rows(self, table: str) -> list[list[str]]:
        return [r for r in self.rows.get(table, []) if r]


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            *LOCAL_ONLY, f"--user-data-dir={tmp / 'profile'}", "--window-size=1280,2400",
            *extra, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)


def read(url: str, tmp: Path) -> tuple[Page, str]:
    dom = chromium(url, tmp, "--dump-dom").stdout
    page = Page()
    page.feed(dom)
    assert page.scripts == 0, "a submission's text injected a <script>"
    return page, dom


def screenshot(url: str, tmp: Path, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    shot.unlink(missing_ok=True)
    chromium(url, tmp, f"--screenshot={shot}")
    from PIL import Image

    with Image.open(shot) as img:
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50, "the screenshot is blank"


def _spaced(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_page_shows_hardware_times_correctness_every_entry_and_escapes(tmp_path: Path) -> None:
    state = tmp_path / "lb.sqlite"
    build_state(state)
    site = tmp_path / "site"
    index = render_site(state, site)
    page, dom = read(index.as_uri(), tmp_path)
    assert "<title>kgrader leaderboard</title>" in dom  # no script changed the title

    # Hardware and software line, from the reports' environment.
    env = _spaced(" ".join(page.cells("environment")))
    for part in ("cuda: NVIDIA H200", "driver 550.54.15", "CUDA 12.4", "CPU AMD EPYC 9654",
                 "torch 2.5.1", "Triton 3.1.0", "sandbox backend bwrap"):
        assert part in env, (part, env)

    # Top 3 asked, 3 selected: three rows, the one whose re-run failed says why.
    ranking = page.body_rows("ranking")
    assert [r[1] for r in ranking] == ["fast", EVIL_IMG, EVIL], ranking
    assert ranking[0][0] == "1" and ranking[1][0] == "2" and ranking[2][0] == "—"
    assert "re-run not finished" in ranking[2][2] and "disk full" in ranking[2][2]
    # Correctness rate per entry; real geomean with its interval.
    assert ranking[0][2] == "3/3" and ranking[1][2] == "3/3"
    slow_gm = _spaced(ranking[1][3])
    assert slow_gm.startswith("0.") and re.search(r"\[0\.\d+, 0\.\d+\]", slow_gm), slow_gm
    assert "no task faster than the reference" in ranking[1][4]
    assert "1 [1, 1]" not in _spaced(page.text)

    # Every entry accounted for: the unranked, the pending ones with their reason.
    # EVIL's re-run is incomplete: its selection figures stay here, unranked.
    unranked = {r[1]: r for r in page.body_rows("unranked")}
    assert sorted(unranked) == sorted([EVIL, "cheater"]), unranked
    assert unranked["cheater"][2] == "2/3"  # the anomaly is not correct
    pending = {(r[0], r[1], r[2]): r[3] for r in page.body_rows("pending")}
    assert "bwrap could not start" in pending[("flaky", "softmax", "main")]
    assert "disk full" in pending[(EVIL, "matmul", "rerun")]
    assert ("flaky", "vector_add_small", "main") not in pending  # that one is recorded
    assert any("sneaky" in c for c in page.cells("disqualified"))
    assert any("copycat" in c for c in page.cells("problems"))

    # Absolute times with intervals, per task, the reference's beside each.
    task_rows = [r for t, rs in page.rows.items() if t.startswith("task-") for r in rs if r]
    fast_va = next(r for r in task_rows if r[0] == "fast" and r[1] == "rerun")
    assert fast_va[2] == "correct"
    assert re.fullmatch(r"0\.\d+ ms \[0\.\d+, 0\.\d+\] n=41", _spaced(fast_va[3])), fast_va
    assert re.fullmatch(r"1 ms \[0\.9\d*, 1\.0\d*\] n=41", _spaced(fast_va[4])), fast_va
    assert any("ANOMALY" in r[2] for r in task_rows)
    assert any(r[0] == "flaky" and r[2] == "pending" and "bwrap" in r[6] for r in task_rows)

    assert {"speedups_by_task.png", "top_submissions.png"} <= set(page.imgs)
    for src in page.imgs:
        png = site / src
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Evaluation pages: the verdict agrees with (and explains) the embedded report's ok.
    links = re.findall(r'href="(eval/[0-9a-f]+\.html)"', index.read_text())
    assert links and all((site / link).is_file() for link in links)
    explained = 0
    for link in sorted(set(links)):
        ev, ev_dom = read((site / link).as_uri(), tmp_path)
        assert "<script" not in (site / link).read_text()
        report = json.loads(re.search(r"<pre>(.*)</pre>", ev_dom, re.S).group(1)  # type: ignore[union-attr]
                            .replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
                            .replace("&#x27;", "'").replace("&amp;", "&"))
        verdict = _spaced(ev.ids["verdict"])
        assert f'"ok": {json.dumps(report["ok"])}' in verdict, verdict
        if "Leaderboard verdict: correct" in verdict and report["ok"] is False:
            assert "acceptance rule did not accept" in verdict
            explained += 1
    assert explained >= 3  # EVIL_IMG's three tasks (and EVIL's slower one)

    screenshot(index.as_uri(), tmp_path, "leaderboard_page.png")


def test_all_slower_than_the_reference_shows_the_real_geomean(tmp_path: Path) -> None:
    state = tmp_path / "slow.sqlite"
    with State.open(state) as st:
        _base(st, ["a", "b"], 2)
        _submit(st, "a", [0.8, 0.7, 0.9], rerun=1.0)
        _submit(st, "b", [0.5, 0.45, 0.6], rerun=1.0)
    index = render_site(state, tmp_path / "site")
    page, _ = read(index.as_uri(), tmp_path)
    ranking = page.body_rows("ranking")
    assert [r[:2] for r in ranking] == [["1", "a"], ["2", "b"]]
    for r in ranking:
        gm = _spaced(r[3])
        assert re.fullmatch(r"0\.\d+ \[0\.\d+, 0\.\d+\]", gm), gm
        assert "no task faster than the reference" in r[4]
    assert "geomean over solved tasks orders them" in page.ids["ranking-note"]
    assert "1 [1, 1]" not in _spaced(page.text)
    screenshot(index.as_uri(), tmp_path, "leaderboard_page_all_slower.png")


def test_an_empty_board_says_so_in_every_table(tmp_path: Path) -> None:
    state = tmp_path / "empty.sqlite"
    with State.open(state) as st:
        _base(st, [], 3)
    index = render_site(state, tmp_path / "site")
    page, _ = read(index.as_uri(), tmp_path)
    assert page.cells("environment") == ["no evaluation yet: nothing was measured"]
    assert page.cells("ranking") == ["no ranked entries yet (the top-K re-run has not finished)"]
    assert page.cells("unranked") == ["no entries yet"]
    assert page.cells("disqualified") == ["none"]
    assert page.cells("pending") == ["none: every evaluation of every valid submission is recorded"]
    per_task = [t for t in page.rows if t.startswith("task-")]
    assert len(per_task) == len(TASKS) and all(page.cells(t) == ["no entries yet"] for t in per_task)
    screenshot(index.as_uri(), tmp_path, "leaderboard_page_empty.png")
