"""Opening and pairing runners: ``sandbox.judge.sides.open_sides`` sends every runner's set-up
and load before reading any answer and blames a failure on the right module; joint first
calls check processes once all have answered; a pair's time is the median of its calls.
Fake runners and evaluations: pure ordering logic."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge import prestart
from sandbox.judge import sides as sides_mod
from sandbox.launcher.proc import RunnerFailure


class _Runner:
    def __init__(self, log: list[str], name: str, load_error: str | None) -> None:
        self.log, self.name, self.load_error = log, name, load_error

    def send(self, msg: dict[str, Any]) -> None:
        self.log.append(f"send {msg['op']} {self.name}")

    def receive(self, timeout: float, code: str = "timeout") -> dict[str, Any]:
        self.log.append(f"receive load {self.name}")
        if self.load_error:
            raise RunnerFailure(self.load_error, f"{self.name} failed")
        return {"ok": True, "threads": 3}


class _Side:
    log: ClassVar[list[str]] = []
    fail: ClassVar[dict[str, str]] = {}

    def __init__(self, path: str, *a: Any, wait: bool = True, **kw: Any) -> None:
        assert wait is False
        self.path = path
        self.runner = _Runner(self.log, path, self.fail.get(path))
        self.startup = {"ready": 1.0}
        self.base_threads = -1
        self.base_caught = -1  # not watched (sandbox.judge.idle): no process behind it
        self.prefix = ()
        self.log.append(f"send setup {path}")

    def await_setup(self, timeout: float) -> None:
        self.log.append(f"receive setup {self.path}")


class _Task:
    entrypoint, benchmark, audit_ops = "launch", None, False


class _Ev:
    def __init__(self) -> None:
        self.task, self.dev, self.nbytes, self.compile_deadline = _Task(), "cpu", 0, 0.0
        self.req = type("R", (), {"limits": type("L", (), {"compile_s": 60.0, "gpu_memory_mib": None})()})()
        self.sides: list[Any] = []
        self.runners_opened = 0
        self.phases: dict[str, float] = {}
        self.problem = type("P", (), {"runner_setup": lambda self: {}})()

    def left(self, deadline: float) -> float:
        return 10.0

    def trusted(self, path: str) -> bool:
        return False

    def phase(self, name: str, t0: float) -> None:
        self.phases[name] = 0.0

    def failure(self, stage: str, e: RunnerFailure) -> StageFailure:
        return StageFailure(stage, e.code, e.message)  # type: ignore[arg-type]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[_Side]:
    _Side.log, _Side.fail = [], {}
    monkeypatch.setattr(sides_mod, "Side", _Side)
    monkeypatch.setattr(prestart, "take", lambda path: None)
    return _Side


def test_both_runners_get_set_up_and_loaded_before_any_answer_is_awaited(fake: type[_Side]) -> None:
    ev = _Ev()
    out = sides_mod.open_sides(ev, [("cand.py", ()), ("cur.py", ())], "accept")  # type: ignore[arg-type]
    assert [s.path for s in out] == ["cand.py", "cur.py"] and ev.sides == out
    assert fake.log == ["send setup cand.py", "send setup cur.py",
                        "receive setup cand.py", "receive setup cur.py",
                        "send load cand.py", "send load cur.py",
                        "receive load cand.py", "receive load cur.py"]
    assert ev.runners_opened == 2 and {"runner1_load", "runner2_load"} <= set(ev.phases)
    # the harness's threads are the judge's own count after set-up, never the runner's word
    assert all(s.base_threads == -1 for s in out)


def test_the_current_bests_load_failure_is_blamed_on_it(fake: type[_Side]) -> None:
    fake.fail = {"cur.py": "import"}
    with pytest.raises(StageFailure) as e:
        sides_mod.open_sides(_Ev(), [("cand.py", ()), ("cur.py", ())], "accept",  # type: ignore[arg-type]
                             [("", ""), ("current_", "the current best failed to load: ")])
    assert e.value.error.code == "current_import"
    assert e.value.error.message.startswith("the current best failed to load: ")


def test_when_both_fail_the_candidate_is_blamed_and_every_answer_is_read(fake: type[_Side]) -> None:
    fake.fail = {"cand.py": "import", "cur.py": "syntax"}
    with pytest.raises(StageFailure) as e:
        sides_mod.open_sides(_Ev(), [("cand.py", ()), ("cur.py", ())], "accept",  # type: ignore[arg-type]
                             [("", ""), ("current_", "")])
    assert e.value.error.code == "import"
    assert fake.log[-2:] == ["receive load cand.py", "receive load cur.py"]


def test_first_calls_together_check_processes_only_after_every_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """While one runner answers, the other may still run Triton's gcc under its own uid: the
    process check of a joint warm-up call runs once, after every runner has answered."""
    from sandbox.judge import evaluation
    from sandbox.judge.evaluation import Evaluation

    log: list[str] = []
    ev = object.__new__(Evaluation)
    ev.bench_dims = {}
    ev.run_deadline = 0.0
    monkeypatch.setattr(ev, "inputs", lambda slots: {}, raising=False)
    monkeypatch.setattr(ev, "reference", lambda slots, inputs: {}, raising=False)
    def send(_ev: Any, side: str, *a: Any, **k: Any) -> str:
        log.append(f"send {side}")
        return side

    monkeypatch.setattr(evaluation, "send_call", send)
    monkeypatch.setattr(evaluation, "finish_call",
                        lambda _ev, p, isolation=True: log.append(f"finish {p} isolation={isolation}"))
    monkeypatch.setattr(evaluation, "check_beside",
                        lambda ev, stage: log.append(f"processes {stage}"))
    ev.timed_together(["cand", "cur"], [], "accept")  # type: ignore[list-item]
    assert log == ["send cand", "send cur", "finish cand isolation=False",
                   "finish cur isolation=False", "processes accept"]


def test_a_pairs_time_is_the_median_of_its_calls() -> None:
    from sandbox.judge.acceptance import per_pair

    assert per_pair([1.0, 3.0, 2.0, 9.0, 7.0, 8.0], 3) == [2.0, 8.0]
    assert per_pair([1.0, 2.0, 3.0], 1) == [1.0, 2.0, 3.0]
    assert per_pair([1.0, 2.0, 3.0, 4.0], 3) == [2.0]  # an unfinished pair is not a pair


def test_scrub_poisons_what_a_side_wrote_in_a_buffer_its_peer_maps() -> None:
    """Paired runners on CUDA map each other's buffers and a pair's two calls share their
    inputs: after the first call is checked, its outputs (and writable inputs) are poisoned
    so the second side cannot copy them. A buffer no peer maps (the CPU's) is left alone."""
    import torch

    from sandbox.judge.acceptance import scrub
    from sandbox.judge.evaluation import Evaluation
    from sandbox.judge.sides import Side
    from sandbox.problem.tensors import Slot

    slots = [Slot("x", "input", "float32", (4,), 0, 16), Slot("s", "input", "float32", (4,), 16, 16),
             Slot("out", "output", "float32", (4,), 32, 16)]
    ev = object.__new__(Evaluation)
    ev.problem = type("P", (), {"scratch": frozenset({"s"})})()

    def side(n_buffers: int) -> Side:
        s = object.__new__(Side)
        s.bases = [torch.ones(48, dtype=torch.uint8) for _ in range(n_buffers)]
        s.base = s.bases[0]
        return s

    paired = side(2)
    scrub(ev, paired, slots, 1)
    v = paired.views(slots, 1)
    assert torch.isnan(v["out"]).all() and torch.isnan(v["s"]).all()
    assert not torch.isnan(v["x"]).any()  # a read-only input: the peer gets the same anyway
    assert not torch.isnan(paired.views(slots, 0)["out"]).any()  # only the buffer it used
    alone = side(1)
    scrub(ev, alone, slots, 0)
    assert not torch.isnan(alone.views(slots, 0)["out"]).any()


def test_each_pair_times_calls_per_pair_rounds_interleaved_on_shared_inputs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_pairs with k = 3: per pair, three rounds of one call per side in the pair's
    order (AB.., then BA..), each round's two calls on the same fresh inputs, the first
    call's writes scrubbed before the second; the pair's time for a side is the median of
    its three calls."""
    import random
    from types import SimpleNamespace

    from sandbox.contract.wire import AcceptanceWire
    from sandbox.judge import acceptance
    from sandbox.judge.acceptance import measure_pairs

    calls: list[tuple[str, int]] = []
    times = {"cand": iter([1.0, 5.0, 3.0] * 4), "cur": iter([2.0, 9.0, 4.0] * 4)}
    n_inputs = [0]

    def inputs(slots: Any) -> dict[str, Any]:
        n_inputs[0] += 1
        return {"seed": n_inputs[0]}

    def timed(side: Any, slots: Any, check: bool, stage: str, inputs: Any = None,
              buf: int = 0) -> dict[str, Any]:
        calls.append((side.path, inputs["seed"] if inputs else None))
        t = next(times[side.path])
        return {"ms": t, "judge_ms": t + 1.0, "tail_ms": 0.0, "threads": 1, "host_ms": (0.0, 0.0)}

    acc = AcceptanceWire(rule="seed", min_improvement_fraction=0.01, min_pairs=1,
                         min_positive_fraction=0.6, pairs=2, alpha=0.01, looks=(25,),
                         calls_per_pair=3)
    ev = SimpleNamespace(
        task=SimpleNamespace(acceptance=acc, correctness=SimpleNamespace(timed_check_fraction=1.0)),
        slots=lambda: [], inputs=inputs, rng=random.Random(0), timed=timed, dev="cpu",
        noop=lambda side, stage: (1.0, 0.0, 0.0, (0.0, 0.0), 0.0), name_current=lambda side: None)
    monkeypatch.setattr(acceptance, "scrub",
                        lambda ev, side, slots, buf: calls.append((f"scrub {side.path}", buf)))
    cand = SimpleNamespace(path="cand", bases=[None])
    cur = SimpleNamespace(path="cur", bases=[None])
    rec = measure_pairs(ev, cand, cur, 2, False)  # type: ignore[arg-type]
    assert calls == [("cand", 1), ("scrub cand", 0), ("cur", 1), ("cand", 2), ("scrub cand", 0),
                     ("cur", 2), ("cand", 3), ("scrub cand", 0), ("cur", 3),
                     ("cur", 4), ("scrub cur", 0), ("cand", 4), ("cur", 5), ("scrub cur", 0),
                     ("cand", 5), ("cur", 6), ("scrub cur", 0), ("cand", 6),
                     # then calls for the escape check alone, up to 10 per side on the CPU
                     *[("cand", None)] * 4, *[("cur", None)] * 4]
    # the CPU decides on the judge's clock less the empty calls' round trip (1.0)
    assert rec.t_cand == (3.0, 3.0) and rec.t_cur == (4.0, 4.0)
