"""``kgrader serve`` and its client keep the CLI's conventions, for real: a server on
127.0.0.1 grading in bwrap on the CPU, the client as a user runs it.

A stop signal ends the server in under 2 s with a client connected and a job running (no
traceback); a bad or taken port is a typed error with its documented exit code, and nothing
is announced before the socket is bound; a waiting ``submit`` rides out a server restart
and says what became of its job; Ctrl-C on it says the job goes on; ``report`` on a running
job exits 75; ``tasks``, ``cancel``, ``--mode test``, ``--output``, ``status --json`` and
the operator's owner column.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e._backends import backend_or_skip
from tests.e2e.test_service_e2e import ROOT, TASK, Server, _kgrader

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
GOOD = str(TASK / "candidates" / "good.py")
EXIT_PENDING = 75


@pytest.fixture
def server(tmp_path: Path) -> Any:
    backend_or_skip("bwrap")
    srv = Server(tmp_path)
    yield srv
    srv.stop(signal.SIGKILL)


def _serve_json(srv: Server) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """``kgrader serve --json`` on ``srv``'s port: the process and its startup line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader.cli", "serve", "--json", "--tasks", str(srv.tasks),
         "--data", str(srv.data), "--port", str(srv.port), "--backend", "bwrap",
         "--device", "cpu"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.communicate(timeout=30)
    return proc, json.loads(line)


def _state(srv: Server, tok: str, job_id: str, states: tuple[str, ...],
           timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = srv.get(f"/v1/submissions/{job_id}", tok)
        if job["state"] in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"{job_id} never reached {states}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_ends_the_server_in_under_2_s_with_a_client_streaming_and_a_job_running(
        server: Server, sig: int) -> None:
    tok = server.token("alice")
    proc, started = _serve_json(server)
    try:
        assert started["event"] == "serving" and started["url"] == server.url + "/"
        job = requests.post(server.url + "/v1/submissions", json={
            "task": TASK.name, "source": Path(GOOD).read_text()},
            headers={"Authorization": f"Bearer {tok}"}, timeout=30).json()
        streamed: list[bytes] = []

        def follow() -> None:  # a connected client: the job's open event stream
            r = requests.get(f"{server.url}/v1/submissions/{job['id']}/events", stream=True,
                             headers={"Authorization": f"Bearer {tok}"}, timeout=60)
            streamed.extend(r.iter_lines())

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        _state(server, tok, job["id"], ("running",))
        time.sleep(0.3)  # the sandbox is starting: a stop meets a job being graded
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 2.0, f"the stop took {took:.2f} s: {err}"
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "CancelledError" not in err, err
    stopped = json.loads(out.strip().splitlines()[-1])
    assert stopped["event"] == "stopped" and stopped["signal"] == signal.Signals(sig).name
    assert stopped["exit_code"] == 128 + sig and stopped["stop_s"] < 2.0
    t.join(5)
    assert not t.is_alive() and b"event: running" in streamed  # the stream ended with the stop
    # The job being graded was not taken for a result: it runs again at the next start.
    server.start()
    done = _state(server, tok, job["id"], ("done", "failed"), 600)
    assert done["state"] == "done" and done["verdict"] == "passed" and done["attempts"] == 2


def test_a_bad_or_taken_port_is_a_typed_error_before_any_banner(tmp_path: Path) -> None:
    backend_or_skip("bwrap")
    srv = Server(tmp_path)
    base = ["serve", "--tasks", str(srv.tasks), "--data", str(srv.data), "--backend", "bwrap",
            "--device", "cpu"]
    bad = _kgrader(*base, "--port", "99999", timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") <= 4, bad.stderr
    assert "99999" in bad.stderr and "Traceback" not in bad.stderr
    assert "OverflowError" not in bad.stderr and "serving" not in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = _kgrader(*base, "--port", port, "--json", timeout=60)
    assert busy.returncode == 2, busy.stderr
    assert busy.stderr.startswith(f"error: 127.0.0.1:{port} is in use")
    assert "serving" not in busy.stderr and "Traceback" not in busy.stderr
    doc = json.loads(busy.stdout)
    assert doc["exit_code"] == 2 and doc["error"]["code"] == "address_unavailable"
    assert doc["error"]["origin"] == "usage"


def test_a_waiting_submit_rides_out_a_server_restart_and_says_what_became_of_its_job(
        server: Server, tmp_path: Path) -> None:
    tok = server.token("alice")
    server.start()
    out = tmp_path / "result.json"
    client = subprocess.Popen(
        [sys.executable, "-m", "grader.cli", "submit", "--server", server.url, "--json",
         "--output", str(out), TASK.name, GOOD], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "KGRADER_TOKEN": tok})
    try:
        job_id = ""
        deadline = time.monotonic() + 60
        while not job_id and time.monotonic() < deadline:
            jobs = server.get("/v1/submissions", tok)["submissions"]
            job_id = jobs[0]["id"] if jobs else ""
            time.sleep(0.1)
        _state(server, tok, job_id, ("running",))
        server.stop(signal.SIGKILL)
        time.sleep(2)  # the client meets a refused connection and retries
        server.start()
        stdout, stderr = client.communicate(timeout=600)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 0, stderr
    assert "Max retries" not in stderr and "HTTPConnectionPool" not in stderr, stderr
    assert "lost the server" in stderr
    assert f"the server restarted; submission {job_id} continues as attempt 2" in stderr, stderr
    result = json.loads(stdout)
    assert result["submission"]["attempts"] == 2 and result["submission"]["verdict"] == "passed"
    assert json.loads(out.read_text())["submission"]["id"] == job_id  # --output: the same


def test_ctrl_c_cancel_report_tasks_test_mode_status_and_the_owner_column(
        server: Server, tmp_path: Path) -> None:
    tok, ops = server.token("alice"), server.token("ops", "operator")
    server.start()
    env = {**os.environ, "KGRADER_TOKEN": tok, "KGRADER_SERVER": server.url}
    client = subprocess.Popen([sys.executable, "-m", "grader.cli", "submit", TASK.name, GOOD],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    assert client.stderr is not None
    queued = client.stderr.readline()  # "submission ID queued; view: ..."
    job_id = queued.split()[1]
    _state(server, tok, job_id, ("running",))
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=30)
    assert client.returncode == 130, err
    assert f"submission {job_id} keeps running on the server" in err
    assert f"kgrader cancel {job_id}" in err and "stopped every sandbox" not in err
    # The job went on: `report` says it is running and exits 75 (not finished yet).
    running = _kgrader("report", "--server", server.url, job_id, token=tok)
    assert running.returncode == EXIT_PENDING, running.stderr
    assert f"submission {job_id}: running" in running.stderr
    cancelled = _kgrader("cancel", "--server", server.url, "--json", job_id, token=tok)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["was"] == "running"
    again = _kgrader("cancel", "--server", server.url, "--json", job_id, token=tok)
    assert again.returncode == 2 and json.loads(again.stdout)["error"]["code"] == "already_finished"
    gone = _kgrader("report", "--server", server.url, job_id, token=tok)
    assert gone.returncode == 2 and "cancelled by its submitter" in gone.stdout
    listed = _kgrader("tasks", "--server", server.url, "--json", token=tok)
    assert listed.returncode == 0 and json.loads(listed.stdout)["tasks"][0]["name"] == TASK.name
    out = tmp_path / "test.json"
    tested = _kgrader("submit", "--server", server.url, "--mode", "test", "--output", str(out),
                      TASK.name, GOOD, token=tok)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    result = json.loads(out.read_text())
    assert result["submission"]["mode"] == "test" and result["report"]["timing"] is None
    assert result["report"]["correctness"]["passed"]
    mine = json.loads(_kgrader("status", "--server", server.url, "--json", token=tok).stdout)
    assert [j["state"] for j in mine["submissions"]] == ["done", "cancelled"]
    table = _kgrader("status", "--server", server.url, token=ops)
    assert table.returncode == 0
    assert all(" alice " in line for line in table.stdout.splitlines()), table.stdout
    unreachable = _kgrader("status", "--server", "http://127.0.0.1:1", token=tok)
    assert unreachable.returncode == 2 and "Max retries" not in unreachable.stderr
    assert unreachable.stderr.startswith("infrastructure error: cannot reach http://127.0.0.1:1: "
                                         "connection refused")
    # `--timeout` ran out: exit 75, the job goes on (here: cancelled so it costs nothing more).
    late = _kgrader("submit", "--server", server.url, "--timeout", "0.5", TASK.name, GOOD,
                    token=tok)
    assert late.returncode == EXIT_PENDING, late.stderr
    assert "did not finish in 0.5 s" in late.stderr and "kgrader cancel" in late.stderr
    late_id = late.stderr.split()[1]
    assert _kgrader("cancel", "--server", server.url, late_id, token=tok).returncode == 0
