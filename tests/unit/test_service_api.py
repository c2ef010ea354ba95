"""The HTTP API's refusals and routes, with a fake grader (no sandbox: the real ones are in
tests/e2e/test_service_e2e.py). Every refusal is a typed ``{code, message}`` 4xx."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")  # starlette's TestClient
import itertools

from starlette.testclient import TestClient

from grader.evaluate import EvalRequest
from grader.report.model import Report
from grader.service.auth import Limits, add_token
from grader.service.config import ServiceConfig
from grader.service.server import build
from grader.service.store import Store

TASK = Path(__file__).resolve().parents[2] / "examples" / "vector_add_small"
GOOD = (TASK / "candidates" / "good.py").read_text()
seen: list[EvalRequest] = []


def fake_grade(req: EvalRequest) -> Report:
    seen.append(req)
    return Report(ok=False, stage="compile", task=req.task.name)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Store]]:
    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / "vector_add_small")
    cfg = ServiceConfig(tasks_dir=tasks, data_dir=tmp_path / "data", device="cpu",
                        backend="bwrap", max_source_bytes=4096, read_per_min=1000)
    app = build(cfg, grader=fake_grade)
    store = Store(cfg.store_path)
    toks = {"alice": add_token(store, "alice", "submitter")[0],
            "bob": add_token(store, "bob", "submitter", Limits(submit_per_min=1))[0],
            "ops": add_token(store, "ops", "operator")[0]}
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, toks, store


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _wait(client: TestClient, token: str, job_id: str) -> dict[str, Any]:
    for _ in range(200):
        job: dict[str, Any] = client.get(f"/v1/submissions/{job_id}", headers=_auth(token)).json()
        if job["state"] in ("done", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def _error(r: Any, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"code", "message"} and body["code"] == code and body["message"]
    assert "Traceback" not in r.text


def test_a_submission_is_graded_once_and_its_report_and_events_are_the_owners(env: Any) -> None:
    client, toks, store = env
    r = client.post("/v1/submissions", headers=_auth(toks["alice"]),
                    json={"task": "vector_add_small", "mode": "bench", "source": GOOD})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "queued" and job["view_url"].startswith(f"/r/{job['id']}/")
    done = _wait(client, toks["alice"], job["id"])
    assert done["state"] == "done" and done["verdict"] == "failed" and done["attempts"] == 1
    assert seen[-1].current is not None and seen[-1].current_trusted  # bench: vs the reference
    rep = client.get(f"/v1/submissions/{job['id']}/report", headers=_auth(toks["alice"]))
    assert rep.status_code == 200 and rep.json()["report"]["task"] == "vector_add_small"
    ev = client.get(f"/v1/submissions/{job['id']}/events", headers=_auth(toks["alice"]))
    assert ev.headers["content-type"].startswith("text/event-stream")
    assert [ln[7:] for ln in ev.text.splitlines() if ln.startswith("event: ")] == \
        ["queued", "running", "done"]
    # Another submitter cannot tell the job exists; an operator sees it.
    _error(client.get(f"/v1/submissions/{job['id']}", headers=_auth(toks["bob"])), 404,
           "not_found")
    assert client.get(f"/v1/submissions/{job['id']}/report",
                      headers=_auth(toks["ops"])).status_code == 200
    page = client.get(job["view_url"])
    assert page.status_code == 200 and "Verdict: failed (report: FAIL" in page.text
    head = page.text.split("<h2>Report</h2>")[0]  # words above the JSON: no Python literal
    assert "None" not in head and "; not timed)" in head, head
    assert "script-src" not in page.headers["content-security-policy"]
    _error(client.get(job["view_url"][:-2] + "xx"), 404, "not_found")
    assert store.stats()["max_grades_per_job"] == 1


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"task": "nope", "source": GOOD}, 404, "unknown_task"),
    ({"task": "vector_add_small", "source": GOOD, "mode": "profile"}, 400, "bad_request"),
    ({"task": "vector_add_small", "source": 3}, 400, "bad_request"),
    ({"task": "vector_add_small"}, 400, "bad_request"),
    ({"task": "vector_add_small", "source": GOOD, "path": "/etc/passwd"}, 400, "bad_request"),
    ({"task": "vector_add_small", "source": GOOD, "label": "../x"}, 400, "bad_request"),
    ({"task": "vector_add_small", "source": "   \n"}, 422, "bad_candidate"),
    ({"task": "vector_add_small", "source": "x = 1\0"}, 422, "bad_candidate"),
    ({"task": "vector_add_small", "source": "#" * 5000}, 413, "too_large"),
])
def test_bad_submissions_are_typed_4xx(env: Any, body: dict[str, Any], status: int,
                                       code: str) -> None:
    client, toks, store = env
    _error(client.post("/v1/submissions", headers=_auth(toks["alice"]), json=body), status, code)
    assert store.counts()["queued"] == 0


def test_bodies_that_are_not_json_objects_or_too_large_are_refused(env: Any) -> None:
    client, toks, _ = env
    h = _auth(toks["alice"])
    _error(client.post("/v1/submissions", headers=h, content=b"{nope"), 400, "bad_request")
    _error(client.post("/v1/submissions", headers=h, json=[1, 2]), 400, "bad_request")
    _error(client.post("/v1/submissions", headers=h, content=b"x" * 200_000), 413, "too_large")


def test_tokens_roles_and_unknown_routes(env: Any) -> None:
    client, toks, _ = env
    _error(client.get("/v1/tasks"), 401, "unauthenticated")
    _error(client.get("/v1/tasks", headers=_auth(toks["alice"] + "x")), 401, "bad_token")
    _error(client.get("/v1/queue", headers=_auth(toks["alice"])), 403, "forbidden")
    assert client.get("/v1/queue", headers=_auth(toks["ops"])).json()["jobs"]["queued"] == 0
    _error(client.get("/v1/nothing"), 404, "not_found")
    _error(client.delete("/v1/submissions"), 405, "method_not_allowed")
    _error(client.get("/v1/submissions/../../etc", headers=_auth(toks["alice"])), 404, "not_found")
    _error(client.get("/board/eval/abc.html"), 403, "forbidden")
    _error(client.get("/board/../service.sqlite"), 404, "not_found")
    assert [t["name"] for t in client.get("/v1/tasks", headers=_auth(toks["alice"])).json()[
        "tasks"]] == ["vector_add_small"]


def test_the_submit_rate_is_limited_per_token_with_retry_after(env: Any) -> None:
    client, toks, _ = env
    body = {"task": "vector_add_small", "source": GOOD}
    assert client.post("/v1/submissions", headers=_auth(toks["bob"]), json=body).status_code == 201
    r = client.post("/v1/submissions", headers=_auth(toks["bob"]), json=body)
    _error(r, 429, "rate_limited")
    assert int(r.headers["retry-after"]) >= 1
    assert client.post("/v1/submissions", headers=_auth(toks["alice"]), json=body).status_code == 201


def test_a_bug_is_a_typed_500_without_a_traceback(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    client, _, store = env

    def broken() -> dict[str, int]:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(store.__class__, "counts", lambda self: broken())
    r = client.get("/v1/health")
    _error(r, 500, "internal")
    assert "secret internals" not in r.text


def test_the_active_jobs_quota_is_a_429_until_a_job_finishes(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / "vector_add_small")
    cfg = ServiceConfig(tasks_dir=tasks, data_dir=tmp_path / "data", device="cpu",
                        backend="bwrap", workers=1)
    release = threading.Event()

    def slow_grade(req: EvalRequest) -> Report:
        release.wait(30)
        return Report(ok=False, stage="compile", task=req.task.name)

    app = build(cfg, grader=slow_grade)
    tok = add_token(Store(cfg.store_path), "carol", "submitter", Limits(max_active=1))[0]
    body = {"task": "vector_add_small", "source": GOOD}
    with TestClient(app, raise_server_exceptions=False) as client:
        first = client.post("/v1/submissions", headers=_auth(tok), json=body)
        assert first.status_code == 201
        _error(client.post("/v1/submissions", headers=_auth(tok), json=body), 429,
               "quota_exceeded")
        release.set()
        _wait(client, tok, first.json()["id"])
        assert client.post("/v1/submissions", headers=_auth(tok), json=body).status_code == 201


def _one_job(tmp_path: Path, store: Store, mode: str = "run", **workers_kw: Any) -> Any:
    """One job of vector_add_small (``run`` unless named) through real worker threads: its
    row once final."""
    from grader.leaderboard.seeds import Secret
    from grader.service.worker import Slot, Workers, load_tasks

    workers = Workers(store, load_tasks(tmp_path / "tasks", Secret(b"k" * 32, "t")),
                      [Slot("cpu0", "bwrap", "cpu")], **workers_kw)
    job = store.submit(token_id="t", task="vector_add_small", mode=mode, label="", source=GOOD,
                       source_sha="s", view_sha="v", max_active=5, max_per_day=5)
    assert not isinstance(job, str)
    workers.start()
    try:
        for _ in range(100):
            row = store.job(job.id)
            if row is not None and row.state in ("done", "failed"):
                return row
            time.sleep(0.1)
        raise AssertionError(f"job {job.id} did not finish: {store.job(job.id)}")
    finally:
        workers.stop()


def test_a_worker_survives_a_store_error_and_grades_the_next_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    store = Store(tmp_path / "s.sqlite")
    real_claim, calls = Store.claim, []

    def flaky(self: Store, worker: str) -> Any:
        calls.append(worker)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        return real_claim(self, worker)

    monkeypatch.setattr(Store, "claim", flaky)
    row = _one_job(tmp_path, store, grader=fake_grade)
    assert row.state == "done" and len(calls) >= 2


def test_two_accepts_racing_for_one_old_best_are_both_graded_against_the_winner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers grade two accepts at once against no best; the first to finish becomes
    the best, and the second is graded again against it before it may replace it."""
    from grader.leaderboard.seeds import Secret
    from grader.service import worker as worker_mod
    from grader.service.worker import Slot, Workers, load_tasks

    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    store = Store(tmp_path / "s.sqlite")
    both_started = threading.Barrier(2, timeout=20)
    calls: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    def grade(req: EvalRequest) -> Report:
        with lock:
            calls.append((req.candidate.text, None if req.current is None else req.current.text))
            first_round = len(calls) <= 2
        if first_round:
            both_started.wait()
            if "b = 2" in req.candidate.text:
                time.sleep(0.5)  # finishes second
        return Report(ok=True, stage="benchmark", task=req.task.name)

    monkeypatch.setattr(worker_mod, "verdict", lambda mode, report: "accepted")
    srcs = {"a": GOOD + "\na = 1\n", "b": GOOD + "\nb = 2\n"}
    ids = {}
    for k, src in srcs.items():
        job = store.submit(token_id="t", task="vector_add_small", mode="accept", label=k,
                           source=src, source_sha=k, view_sha=k, max_active=5, max_per_day=5)
        assert not isinstance(job, str)
        ids[k] = job.id
    workers = Workers(store, load_tasks(tmp_path / "tasks", Secret(b"k" * 32, "t")),
                      [Slot("cpu0", "bwrap", "cpu"), Slot("cpu1", "bwrap", "cpu")], grader=grade)
    workers.start()
    try:
        for _ in range(200):
            if all((r := store.job(i)) is not None and r.state == "done" for i in ids.values()):
                break
            time.sleep(0.05)
    finally:
        workers.stop()
    assert [store.job(i).state for i in ids.values()] == ["done", "done"]  # type: ignore[union-attr]
    # a and b were graded against no best; b again, against a (the winner), then became best
    assert calls[:2] and {c[1] for c in calls[:2]} == {None}
    assert calls[2:] == [(srcs["b"], srcs["a"])]
    assert store.best("vector_add_small") == srcs["b"]


def test_an_infrastructure_failure_is_retried_after_a_growing_backoff_then_graded(
        tmp_path: Path) -> None:
    from grader.report.model import ReportError
    from grader.service.worker import retry_delay

    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    store = Store(tmp_path / "s.sqlite")
    graded_at: list[float] = []

    def loaded_twice(req: EvalRequest) -> Report:  # a loaded host spoils the first two runs
        graded_at.append(time.monotonic())
        if len(graded_at) <= 2:
            return Report(ok=False, stage="benchmark", task=req.task.name, errors=[ReportError(
                stage="benchmark", code="timing_unreliable", origin="infrastructure",
                message="the host is too loaded to measure on")])
        return fake_grade(req)

    row = _one_job(tmp_path, store, grader=loaded_twice, max_attempts=3, retry_backoff_s=0.4)
    assert row.state == "done" and row.attempts == 3
    gaps = [b - a for a, b in itertools.pairwise(graded_at)]
    assert gaps[0] >= 0.4 and gaps[1] >= 0.8  # 0.4 s, then doubled
    delays = [d["delay_s"] for _, _, k, d in store.events(row.id) if k == "requeued"]
    assert delays == [0.4, 0.8]
    assert [retry_delay(n, 10.0) for n in (1, 2, 3, 9)] == [10.0, 20.0, 40.0, 300.0]
    assert retry_delay(3, 0.0) == 0.0


@pytest.mark.parametrize("mode", ["rerun", "leaderboard"])
def test_a_board_job_the_host_cannot_time_is_retried_and_tied_only_on_its_last_attempt(
        tmp_path: Path, mode: str) -> None:
    """A re-run, and an entry's own run (on a 2-core CPU an honest entry failed all six
    attempts idle: the task's reference, a torch add, sits inside the judge clock's noise)."""
    from grader.report.model import CorrectnessResult, ReportError

    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    store = Store(tmp_path / "s.sqlite")
    graded: list[str] = []

    def always_loaded(req: EvalRequest) -> Report:  # correct, never timed apart
        graded.append(req.task.name)
        return Report(ok=False, stage="accept", task=req.task.name,
                      correctness=CorrectnessResult(passed=True, checks=4),
                      errors=[ReportError(stage="accept", code="timing_unreliable",
                                          origin="infrastructure", message="too loaded")])

    row = _one_job(tmp_path, store, mode=mode, grader=always_loaded, max_attempts=3,
                   retry_backoff_s=0.0)
    assert len(graded) == 3 and row.attempts == 3  # retried, not a tie at the first try
    assert row.state == "done" and row.verdict == "ok"  # then tied within noise: a result


def _config(tmp_path: Path) -> ServiceConfig:
    """A service over vector_add_small in ``tmp_path`` (the ``env`` fixture's settings)."""
    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / "vector_add_small")
    return ServiceConfig(tasks_dir=tasks, data_dir=tmp_path / "data", device="cpu",
                         backend="bwrap", max_source_bytes=4096, read_per_min=1000)


def test_cancelling_a_running_job_stops_its_evaluation(tmp_path: Path) -> None:
    """The cancel route sets the running evaluation's ``cancel`` (the backends kill its
    sandbox on it: tests/unit/test_backend_cancel.py), and the late grade is not recorded."""
    cfg = _config(tmp_path)
    started, stopped = threading.Event(), threading.Event()

    def blocking(req: EvalRequest) -> Report:  # a long evaluation, until it is cancelled
        started.set()
        assert req.cancel is not None
        if req.cancel.wait(30):
            stopped.set()
        return fake_grade(req)

    app = build(cfg, grader=blocking)
    store = Store(cfg.store_path)
    tok = add_token(store, "alice", "submitter")[0]
    with TestClient(app, raise_server_exceptions=False) as client:
        job = client.post("/v1/submissions", headers=_auth(tok),
                          json={"task": "vector_add_small", "source": GOOD}).json()
        assert started.wait(30)
        t0 = time.monotonic()
        out = client.post(f"/v1/submissions/{job['id']}/cancel", headers=_auth(tok))
        assert out.status_code == 200 and out.json()["was"] == "running", out.text
        assert stopped.wait(5) and time.monotonic() - t0 < 5
        for _ in range(100):
            row = store.job(job["id"])
            if row is not None and store.events(job["id"])[-1][2] == "cancelled":
                break
            time.sleep(0.05)
        assert row is not None and row.state == "cancelled" and row.verdict is None


def test_a_running_jobs_page_lists_the_judges_steps_so_far(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    started = threading.Event()

    def blocking(req: EvalRequest) -> Report:
        started.set()
        assert req.cancel is not None
        req.cancel.wait(30)
        return fake_grade(req)

    app = build(cfg, grader=blocking)
    store = Store(cfg.store_path)
    tok = add_token(store, "alice", "submitter")[0]
    with TestClient(app, raise_server_exceptions=False) as client:
        job = client.post("/v1/submissions", headers=_auth(tok),
                          json={"task": "vector_add_small", "source": GOOD}).json()
        assert started.wait(30)
        assert store.add_step(job["id"], 1, {"step": "judge: compile <b>", "s": 0.5})
        page = client.get(job["view_url"])
        assert page.status_code == 200 and page.headers["refresh"] == "3"
        assert "<li>judge: compile &lt;b&gt; (0.50 s)</li>" in page.text  # escaped
        client.post(f"/v1/submissions/{job['id']}/cancel", headers=_auth(tok))


def test_cancel_tasks_test_mode_and_the_operators_owner_column(env: Any) -> None:
    client, toks, store = env
    seen.clear()
    r = client.post("/v1/submissions", headers=_auth(toks["alice"]),
                    json={"task": "vector_add_small", "mode": "test", "source": GOOD})
    assert r.status_code == 201, r.text
    tested = _wait(client, toks["alice"], r.json()["id"])
    assert tested["mode"] == "test" and seen[-1].stages == ("compile", "correctness")
    listed = client.get("/v1/tasks", headers=_auth(toks["alice"])).json()["tasks"]
    assert [t["name"] for t in listed] == ["vector_add_small"] and "test" in listed[0]["modes"]
    # A queued job is cancelled (the workers are halted so that it stays queued).
    client.app.state.svc.workers.halt()  # type: ignore[attr-defined]
    job = client.post("/v1/submissions", headers=_auth(toks["alice"]),
                      json={"task": "vector_add_small", "source": GOOD}).json()
    _error(client.post(f"/v1/submissions/{job['id']}/cancel", headers=_auth(toks["bob"])),
           404, "not_found")  # another submitter's job does not exist for bob
    out = client.post(f"/v1/submissions/{job['id']}/cancel", headers=_auth(toks["alice"]))
    assert out.status_code == 200, out.text
    assert out.json()["was"] == "queued" and out.json()["submission"]["state"] == "cancelled"
    _error(client.post(f"/v1/submissions/{job['id']}/cancel", headers=_auth(toks["alice"])),
           409, "already_finished")
    _error(client.get(f"/v1/submissions/{job['id']}/cancel", headers=_auth(toks["alice"])),
           405, "method_not_allowed")
    kinds = [ln[7:] for ln in client.get(f"/v1/submissions/{job['id']}/events",
                                         headers=_auth(toks["alice"])).text.splitlines()
             if ln.startswith("event: ")]
    assert kinds == ["queued", "cancelled"]  # the stream ends with the cancel
    rep = client.get(f"/v1/submissions/{job['id']}/report", headers=_auth(toks["alice"]))
    assert rep.status_code == 200 and rep.json()["report"] is None
    own = client.get("/v1/submissions", headers=_auth(toks["alice"])).json()["submissions"]
    assert own and all("owner" not in j for j in own)
    every = client.get("/v1/submissions", headers=_auth(toks["ops"])).json()["submissions"]
    assert {j["owner"] for j in every} == {"alice"}
    one = client.get(f"/v1/submissions/{job['id']}", headers=_auth(toks["ops"])).json()
    assert one["owner"] == "alice" and one["state"] == "cancelled"
    assert store.counts()["cancelled"] == 1
