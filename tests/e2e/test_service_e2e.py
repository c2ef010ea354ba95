"""``kgrader serve`` for real: a uvicorn server on 127.0.0.1, real evaluations in bwrap,
the client CLI, a SIGKILL mid-job and a restart, and the live board in headless Chromium.

Each test grades one or two candidates (the machine has 2 cores): the API's refusals are
unit-tested (tests/unit/test_service_api.py) with a fake grader.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e._backends import backend_or_skip
from tests.e2e._chromium import LOCAL_ONLY
from tests.e2e.conftest import retried

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _kgrader(*args: str, token: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"KGRADER_TOKEN": token} if token else {})}
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


class Server:
    """A ``kgrader serve`` process on a free port, its data folder kept across restarts."""

    def __init__(self, tmp: Path, *extra: str):
        self.extra = extra  # more `kgrader serve` arguments (e.g. --db URL)
        self.tasks = tmp / "tasks"
        shutil.copytree(TASK, self.tasks / TASK.name)
        self.data = tmp / "data"
        self.log = tmp / "server.log"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def token(self, name: str, role: str = "submitter") -> str:
        r = _kgrader("serve", *self.extra, "token", "add", "--data", str(self.data), "--name", name,
                     "--role", role, "--json")
        assert r.returncode == 0, r.stderr
        return str(json.loads(r.stdout)["token"])

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.cli", "serve", "--tasks", str(self.tasks),
                 "--data", str(self.data), "--port", str(self.port), "--backend", "bwrap",
                 "--device", "cpu", "--board-refresh", "2", *self.extra], cwd=ROOT,
                stdout=log, stderr=log)
        # Under load a restarted server can accept the connection and answer late (its
        # start-up sweep of what the killed one left): a slow answer is waited for again.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if requests.get(self.url + "/v1/health", timeout=10).ok:
                    return
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.3)
        raise AssertionError("the server did not start: " + self.log.read_text())

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def get(self, path: str, token: str) -> dict[str, Any]:
        r = requests.get(self.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out


@pytest.fixture
def server(tmp_path: Path) -> Any:
    backend_or_skip("bwrap")
    srv = Server(tmp_path)
    yield srv
    srv.stop(signal.SIGKILL)


def test_submit_waits_for_the_real_report_and_a_wrong_candidate_exits_1(server: Server) -> None:
    tok = server.token("alice")
    server.start()
    ok = _kgrader("submit", "--server", server.url, "--json", TASK.name,
                  str(TASK / "candidates" / "good.py"), token=tok)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    result = json.loads(ok.stdout)
    assert result["submission"]["state"] == "done" and result["submission"]["verdict"] == "passed"
    report = result["report"]
    assert report["ok"] and report["correctness"]["passed"] and report["sandbox"]["backend"] == "bwrap"
    # The submitter's copy: hidden shapes are redacted ("hidden shape #k").
    assert all("hidden" not in json.dumps(s) or "hidden_shape" in json.dumps(s)
               for s in report["correctness"].get("shapes", []))
    bad = _kgrader("submit", "--server", server.url, TASK.name,
                   str(TASK / "candidates" / "wrong.py"), token=tok)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "verdict failed" in bad.stdout
    listed = _kgrader("status", "--server", server.url, "--json", token=tok)
    assert [j["verdict"] for j in json.loads(listed.stdout)["submissions"]] == ["failed", "passed"]
    refused = _kgrader("submit", "--server", server.url, "no_such_task",
                       str(TASK / "candidates" / "good.py"), token=tok)
    assert refused.returncode == 2 and "unknown_task" in refused.stderr
    assert "Traceback" not in refused.stderr


def _wait_state(server: Server, tok: str, job_id: str, states: tuple[str, ...],
                timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = server.get(f"/v1/submissions/{job_id}", tok)
        if job["state"] in states:
            return job
        time.sleep(0.5)
    raise AssertionError(f"{job_id} never reached {states}")


def test_a_server_killed_mid_job_re_runs_it_after_restart_and_records_it_once(
        server: Server) -> None:
    tok, ops = server.token("alice"), server.token("ops", "operator")
    server.start()
    job = _kgrader("submit", "--server", server.url, "--no-wait", "--json", TASK.name,
                   str(TASK / "candidates" / "good.py"), token=tok)
    job_id = json.loads(job.stdout)["id"]
    _wait_state(server, tok, job_id, ("running",), 60)
    time.sleep(0.2)  # claimed and started: killed before an idle machine finishes it
    server.stop(signal.SIGKILL)
    server.start()
    done = _wait_state(server, tok, job_id, ("done", "failed"), 600)
    assert done["state"] == "done" and done["verdict"] == "passed" and done["attempts"] == 2
    kinds = [ln[7:] for ln in requests.get(
        f"{server.url}/v1/submissions/{job_id}/events",
        headers={"Authorization": f"Bearer {tok}"}, timeout=30).text.splitlines()
        if ln.startswith("event: ")]
    # The judge's live steps (``step``) come between a claim and its end; the job's moves:
    assert [k for k in kinds if k != "step"] == ["queued", "running", "requeued", "running", "done"]
    assert kinds[-2] == "step"  # the second attempt's steps, before its final event
    stats = server.get("/v1/queue", ops)
    assert stats["jobs"]["done"] == 1 and stats["grades"] == 1 and stats["max_grades_per_job"] == 1
    # A second restart grades nothing again: a finished job is final.
    server.stop(signal.SIGKILL)
    server.start()
    time.sleep(2)
    assert server.get("/v1/queue", ops)["claims"] == 2


def _chromium(url: str, tmp: Path) -> str:
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", *LOCAL_ONLY,
            f"--user-data-dir={tmp / 'profile'}", "--dump-dom", url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y "
                    "chromium); CI installs it")
def test_the_live_board_shows_a_leaderboard_entry_and_its_report_only_by_its_link(
        server: Server, tmp_path: Path) -> None:
    tok = server.token("alice")
    server.start()
    before = _chromium(server.url + "/board/", tmp_path)
    assert "kgrader leaderboard" in before and "alice/v1" not in before
    # Exit 2: the service could not grade it (under load: timing_unreliable on each of its
    # attempts); a submitter sends it again, as here, a little later each time.
    r = retried(lambda: _kgrader("submit", "--server", server.url, "--mode", "leaderboard",
                                 "--label", "v1", "--json", TASK.name,
                                 str(TASK / "candidates" / "good.py"), token=tok),
                lambda r: r.returncode == 2, wait_s=10)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["submission"]["verdict"] == "ok"
    page = requests.get(server.url + "/board/", timeout=30)
    assert page.headers["refresh"] == "2"  # the open page reloads itself as results land
    dom = _chromium(server.url + "/board/", tmp_path)
    assert "alice/v1" in dom and "<script" not in dom
    assert "/r/" not in dom  # the board links to no one's report
    job_id = result["submission"]["id"]
    own = _chromium(result["view_url"], tmp_path)
    assert f"Submission {job_id}" in own and "<script" not in own
    assert '<p id="verdict">Verdict: ok (report: ' in own
    assert requests.get(result["view_url"][:-3] + "abc", timeout=30).status_code == 404
    listed = requests.get(f"{server.url}/v1/submissions/{job_id}/report",
                          headers={"Authorization": f"Bearer {tok}"}, timeout=30).json()
    assert listed["report"]["ok"] is not None
    job = _kgrader("status", "--server", server.url, "--json", job_id, token=tok)
    assert json.loads(job.stdout)["verdict"] == "ok"
    other = server.token("bob")
    assert requests.get(f"{server.url}/v1/submissions/{job_id}/report",
                        headers={"Authorization": f"Bearer {other}"}, timeout=30).status_code == 404
    assert requests.get(f"{server.url}/board/eval/x.html", timeout=30).status_code == 403


def test_a_server_with_a_warm_pool_grades_as_the_cold_path_and_uses_a_warm_sandbox(
        tmp_path: Path) -> None:
    backend_or_skip("bwrap")
    srv = Server(tmp_path, "--warm", "1")
    try:
        tok = srv.token("alice")
        srv.start()
        first = _kgrader("submit", "--server", srv.url, "--json", TASK.name,
                         str(TASK / "candidates" / "good.py"), token=tok)
        assert first.returncode == 0, first.stdout + first.stderr  # cold: the pool starts
        second = _kgrader("submit", "--server", srv.url, "--json", TASK.name,
                          str(TASK / "candidates" / "wrong.py"), token=tok)
        assert second.returncode == 1, second.stdout + second.stderr
        result = json.loads(second.stdout)
        assert result["submission"]["verdict"] == "failed"
        assert result["report"]["errors"][0]["stage"] == "correctness"
        phases = result["report"]["sandbox"]["phases"]
        assert "warm_idle" in phases, f"the second job was not graded warm: {phases}"
    finally:
        srv.stop(signal.SIGTERM)
        srv.stop(signal.SIGKILL)
    assert srv.proc is not None and srv.proc.returncode in (0, 143, -signal.SIGKILL)


def test_a_waiting_submit_shows_the_judges_steps_as_they_happen(server: Server) -> None:
    """The worker records the judge's live steps as the job's ``step`` events, and the
    waiting client prints each when it arrives (read with its time), well before the end."""
    import threading

    tok = server.token("carol")
    server.start()
    p = subprocess.Popen([sys.executable, "-m", "grader.cli", "submit", "--server", server.url,
                          "--json", TASK.name, str(TASK / "candidates" / "good.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                         env={**os.environ, "KGRADER_TOKEN": tok})
    assert p.stdout is not None and p.stderr is not None
    arrived: list[tuple[float, str]] = []

    def read() -> None:
        assert p.stderr is not None
        for raw in p.stderr:
            arrived.append((time.monotonic(), raw.decode("utf-8", "replace")))

    reader = threading.Thread(target=read)
    reader.start()
    out = p.stdout.read()
    assert p.wait(timeout=600) == 0, arrived
    ended = time.monotonic()
    reader.join(10)
    result = json.loads(out)
    assert result["submission"]["verdict"] == "passed"
    compiled = next(t for t, ln in arrived if "judge: compile s=" in ln)
    timed = next(t for t, ln in arrived if "judge: timing s=" in ln)
    # Held back to the end, the compile line would arrive with the rest. Streamed, it
    # arrives before the later stages ran: by most of their seconds, as the judge itself
    # told them (a fixed figure would fail as the grader gets faster).
    later = sum(float(m.group(1)) for t, ln in arrived if t > compiled
                for m in [re.search(r"judge: \w+ s=([0-9.]+)", ln)] if m)
    assert later > 0 and compiled < timed and ended - compiled > 0.5 * later, arrived
    with requests.get(f"{server.url}/v1/submissions/{result['submission']['id']}/events",
                      headers={"Authorization": f"Bearer {tok}"}, stream=True, timeout=30) as r:
        kinds_steps = [(ln.split(": ", 1)[1]) for ln in r.iter_lines(decode_unicode=True)
                       if ln and ln.startswith(("event: ", "data: "))]
    events = list(zip(kinds_steps[::2], (json.loads(d) for d in kinds_steps[1::2]), strict=True))
    steps = [d["step"] for k, d in events if k == "step"]
    assert [k for k, _ in events][:2] == ["queued", "running"] and events[-1][0] == "done"
    assert steps.index("judge: compile running") < steps.index("judge: compile") \
        < steps.index("judge: timing"), steps
    assert all(d["attempt"] == 1 for k, d in events if k == "step")
