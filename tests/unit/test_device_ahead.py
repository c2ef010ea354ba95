"""The compile stage's CUDA contexts made at once (sandbox.judge.prestart.device_ahead):
the request goes to the runner take() will give, once, and its answer is taken before
that runner's setup, so that every later answer stays paired with its request."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.judge import prestart
from sandbox.launcher.proc import RunnerFailure


class FakeRunner:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.received = 0
        self.installed = False
        self.fail = fail

    def send(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)

    def receive(self, timeout: float, code: str = "timeout") -> dict[str, Any]:
        self.received += 1
        if self.fail:
            raise RunnerFailure("signal", "runner killed by SIGKILL")
        return {"ok": True}

    def install(self) -> None:
        self.installed = True


@pytest.fixture
def ahead(monkeypatch: pytest.MonkeyPatch) -> list[FakeRunner]:
    runners = [FakeRunner(), FakeRunner()]
    monkeypatch.setattr(prestart, "_ready", {"cand.py": list(runners)})
    monkeypatch.setattr(prestart, "_device_sent", set())
    monkeypatch.setattr(prestart, "_device", "cuda")
    return runners


def test_the_first_runner_is_asked_once_and_answers_before_it_is_taken(ahead: list[FakeRunner]) -> None:
    prestart.device_ahead("cand.py")
    prestart.device_ahead("cand.py")  # a second ask sends nothing more
    assert ahead[0].sent == [{"op": "device"}] and ahead[1].sent == []
    assert prestart.take("cand.py", 5.0) is ahead[0]  # type: ignore[comparison-overlap]
    assert ahead[0].received == 1 and ahead[0].installed
    assert prestart.take("cand.py", 5.0) is ahead[1]  # type: ignore[comparison-overlap]
    assert ahead[1].received == 0  # never asked: its first answer is its setup's


def test_device_done_takes_the_answer_once(ahead: list[FakeRunner]) -> None:
    prestart.device_ahead("cand.py")
    prestart.device_done("cand.py", 5.0)
    prestart.device_done("cand.py", 5.0)
    prestart.take("cand.py", 5.0)
    assert ahead[0].received == 1


def test_a_runner_that_fails_to_answer_is_left_to_its_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = FakeRunner(fail=True)
    monkeypatch.setattr(prestart, "_ready", {"cand.py": [bad]})
    monkeypatch.setattr(prestart, "_device_sent", set())
    monkeypatch.setattr(prestart, "_device", "cuda")
    prestart.device_ahead("cand.py")
    assert prestart.take("cand.py", 5.0) is bad  # type: ignore[comparison-overlap]
    assert bad.received == 1


def test_nothing_is_asked_on_the_cpu_or_without_a_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    r = FakeRunner()
    monkeypatch.setattr(prestart, "_ready", {"cand.py": [r]})
    monkeypatch.setattr(prestart, "_device_sent", set())
    monkeypatch.setattr(prestart, "_device", "cpu")
    prestart.device_ahead("cand.py")
    prestart.device_ahead("other.py")
    assert r.sent == [] and prestart.take("other.py") is None
