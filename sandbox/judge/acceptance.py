"""The accept stage (judge side): paired, interleaved timing of current best and candidate.

Both sides get the same fresh inputs in each pair, in alternating order (AB, BA, ...),
each in its own runner with its own buffer. Every timed call of either side is checked
like a benchmark call, each side's times pass the escape check, and on the CPU the
judge's clock gives both sides' times. The judge stops a controlled comparison at its
looks, and spends an independent replicate only when the task's deciding rule (the same
function the host decides with) accepts the deciding run; the host owns the decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sandbox.contract import rules, stats
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import AcceptanceRecord, AcceptanceWire, PairsRecord
from sandbox.judge import gpu_idle
from sandbox.judge.benchmark import ESCAPE_MIN_CALLS, ESCAPE_MIN_CALLS_CPU, SideClock, pace, warm_up
from sandbox.judge.contention import held_outside
from sandbox.judge.evaluation import Evaluation
from sandbox.judge.gpu_idle import IdleProbe
from sandbox.judge.isolation import foreign_on_device
from sandbox.judge.sides import Side, paired_buffers
from sandbox.problem.tensors import Slot, poison


def measure_pairs(ev: Evaluation, cand: Side, cur: Side, n_max: int, sequential: bool,
                  calls_per_pair: int | None = None,
                  empty: dict[str, float] | None = None) -> PairsRecord:
    """Up to ``n_max`` interleaved pairs; a controlled rule stops at a decisive look.

    Each pair is ``calls_per_pair`` rounds (the task's unless given) of one call per side,
    in the pair's order, each round on fresh inputs; a side's time in the pair is the
    median of its calls. ``empty`` (calibration) receives each side's median event time of
    its interleaved empty calls (``cur``, ``cand``): a runner's own timing path, no kernel."""
    acc = ev.task.acceptance
    k = max(1, acc.calls_per_pair if calls_per_pair is None else calls_per_pair)
    slots = ev.slots()
    frac = ev.task.correctness.timed_check_fraction
    clocks = {id(cand): SideClock(ev, cand, "accept"), id(cur): SideClock(ev, cur, "accept")}
    ev.name_current(cur)
    seq = rules.SequentialSignTest(delta=acc.min_improvement_fraction, alpha=acc.alpha,
                                   looks=acc.looks, point_margin=acc.rule == "gain",
                                   offset_ms=acc.pair_offset_us / 1e3) \
        if sequential else None
    probe = gpu_idle.probe() if ev.dev == "cuda" else None
    last: Side | None = None
    pair_s: list[float] = []  # each pair's wall time, for the judge's look at the clock
    for i in range(n_max):
        if seq is not None and i > 0 and seq.decision() == "continue" and (
                stop_at_look(ev, seq, i, n_max, k, pace(pair_s)) if i in seq.looks
                else stop_between_looks(ev, i, k, pace(pair_s))):
            break
        t_pair = time.monotonic()
        order = (cand, cur) if i % 2 == 0 else (cur, cand)
        swap = (i // 2) % 2  # every other pair of pairs, the sides trade buffers
        for _ in range(k):
            inputs = ev.inputs(slots)
            for j, side in enumerate(order):
                check = frac >= 1.0 or ev.rng.random() < frac
                if probe is not None and last is not None:
                    check_idle(probe, last, cur, lambda: foreign_on_device(ev) or held_outside(ev))
                last = side
                try:
                    r = ev.timed(side, slots, check, "accept", inputs=inputs, buf=swap)
                except StageFailure as e:
                    raise blamed(e, side is cur) from None
                clocks[id(side)].add(r)
                if j == 0:  # the other side gets the same inputs next: nothing to copy
                    scrub(ev, side, slots, swap)
        pair_s.append(time.monotonic() - t_pair)
        if seq is not None:
            t_cur = stats.median(clocks[id(cur)].ms[-k:])
            t_cand = stats.median(clocks[id(cand)].ms[-k:])
            if seq.decision() == "continue" and t_cur > 0 and t_cand > 0:
                seq.add(t_cur, t_cand)
            if seq.decision() != "continue" and i + 1 >= acc.pairs:
                break
    for side, who in ((cand, "candidate: "), (cur, "current best: ")):
        try:
            clocks[id(side)].top_up(slots)
            clocks[id(side)].raise_if_escaped(who)
        except StageFailure as e:
            raise blamed(e, side is cur) from None
    if empty is not None:
        for side, name in ((cur, "cur"), (cand, "cand")):
            c = clocks[id(side)]
            empty[name] = stats.median([j - o for j, o in zip(c.noop_judge, c.noop_overhead,
                                                               strict=True)])
    base = stats.median(clocks[id(cur)].empty_ms() + clocks[id(cand)].empty_ms())
    return PairsRecord(t_cur=tuple(per_pair(clocks[id(cur)].samples(base), k)),
                       t_cand=tuple(per_pair(clocks[id(cand)].samples(base), k)))


# Margin on the pair time when the judge asks whether the next pairs still fit.
LOOK_TIME_MARGIN = 1.25
# Pairs of room the judge keeps between looks: the pair it is about to start and one more.
ROOM_PAIRS = 2


# The codes of a stage that ran out (sandbox.judge.clock.overrun).
OVERRUN_CODES = frozenset({"timeout", "harness_timeout"})


def blamed(e: StageFailure, by_current: bool) -> StageFailure:
    """``e``, raised in a call of the current best's (``by_current``) or the candidate's,
    as the report names it: ``current_<code>`` when it is the current best's. A stage that
    ran out (:func:`sandbox.judge.clock.overrun`) names the side whose answers used its time,
    or the harness, whichever side was about to call. Only the stage clock's own codes are
    read so (a runner's failure detail is built by the judge, never by the runner, but a
    side's failure is never moved to the other side on anything else)."""
    by = (e.error.detail or {}).get("overrun_by")
    if e.error.code in OVERRUN_CODES and by in ("candidate", "current", "harness"):
        by_current = by == "current"
    return e.renamed("current_") if by_current else e


def top_up_pairs(ev: Evaluation, n: int, k: int) -> float:
    """The escape check's top-up after ``n`` pairs of ``k`` rounds, in pairs."""
    least = ESCAPE_MIN_CALLS if ev.dev == "cuda" else ESCAPE_MIN_CALLS_CPU
    return max(0, least - n * k) / k


def stop_at_look(ev: Evaluation, seq: rules.SequentialSignTest, i: int, n_max: int, k: int,
                 pair_s: float) -> bool:
    """Whether the deciding run stops at the planned look it just took (``i`` pairs, the
    test said "continue") because the pairs up to the next look would not fit in what is
    left of the stage's ``run_s``: a loaded machine gives a verdict on fewer pairs, never a
    timeout of an honest kernel. Stopping at a look already taken adds no chance to accept
    (its accept test failed on these very pairs; ``finish`` then rejects), so the
    controlled rule's error bound is unchanged whoever made the pairs slow. The estimate is
    the :func:`pace` of a pair, with :data:`LOOK_TIME_MARGIN`, plus the escape check's
    top-up."""
    nxt = min([n for n in seq.looks if n > i] + [n_max])
    need = pair_s * LOOK_TIME_MARGIN * (nxt - i + top_up_pairs(ev, nxt, k))
    left = ev.left(ev.run_deadline)
    if left >= need:
        return False
    ev.warnings.append(f"accept: the deciding run stopped at its look of {i} pairs (up to {n_max} "
                       f"planned): the {nxt - i} pairs to the next look would need ~{need:.0f} s, "
                       f"{left:.0f} s of the stage's run_s were left (a pair took {pair_s:.2f} s "
                       "on average); not accepted at that look, so not accepted")
    return True


def stop_between_looks(ev: Evaluation, i: int, k: int, pair_s: float) -> bool:
    """Whether the deciding run stops after ``i`` pairs, between its planned looks, because
    the load rose after the last look: what is left of ``run_s`` no longer holds
    :data:`ROOM_PAIRS` more pairs and the escape check's top-up at the :func:`pace` of a
    pair. The rule then takes its final look at ``i`` pairs in place of the next planned
    one (``SequentialSignTest.finish``: still at most ``len(looks)`` looks, each at its
    share of alpha), and the stop depends on the clock, not on the pairs' signs; so the
    error bound holds, and a machine that slowed down gives a verdict on fewer pairs
    instead of a timeout blamed on a side."""
    need = pair_s * LOOK_TIME_MARGIN * (ROOM_PAIRS + top_up_pairs(ev, i + ROOM_PAIRS, k))
    left = ev.left(ev.run_deadline)
    if left >= need:
        return False
    ev.warnings.append(f"accept: the deciding run stopped after {i} pairs, between its planned "
                       f"looks: {left:.0f} s of the stage's run_s were left and a pair now takes "
                       f"{pair_s:.2f} s; the rule took its final look at {i} pairs")
    return True


# A probe this slow is a time slice of another context (a millisecond or more), not the
# host's scheduling or another process's short kernel: only then is the last side blamed.
# On an H200 an honest paired softmax, with other evaluations using the GPU and all 16
# cores, saw a probe of 0.346 ms against the 0.25 ms limit.
BLAME_MS = 1.0


def check_idle(probe: IdleProbe, last: Side, cur: Side,
               foreign_on: Callable[[], str | None]) -> None:
    """The device must be idle before the next timed call (:mod:`sandbox.judge.gpu_idle`): work
    still running in a context of ``last``'s would time-slice the other side's call.

    ``foreign_on()`` (asked only when the device is busy): why its work cannot be
    attributed to this sandbox (NVML sees compute processes the judge did not start, or
    cannot tell). A busy device is the last side's fault only when NVML shows none and the
    probe waited a time slice (BLAME_MS) beyond the judge's own wait for a CPU during it
    (``probe.cpu_wait_ms``: a host whose CPUs are all busy lengthens a probe as another
    context's kernel does); otherwise the timing is unreliable (infrastructure, retried):
    never a pass either."""
    busy = probe.busy()
    if busy is None:
        return
    foreign = foreign_on()
    wait = probe.cpu_wait_ms
    if foreign is not None or busy - wait < BLAME_MS:
        why = foreign or (
            f"a probe of {busy:.3f} ms, {wait:.3f} ms of it the judge's wait for a CPU, leaves "
            f"under the {BLAME_MS} ms of a time slice of another context: the host's load or "
            "another process's kernel")
        raise StageFailure("accept", "timing_unreliable",
                           f"the device was not idle between paired calls (probe {busy:.3f} ms "
                           f"against {probe.limit_ms:.3f} ms) and the work is not attributable "
                           f"to either side: {why}", origin="infrastructure",
                           detail={"probe_ms": busy, "limit_ms": probe.limit_ms,
                                   "judge_cpu_wait_ms": wait})
    e = StageFailure("accept", "gpu_busy_between_calls",
                     f"after this side's call returned, the device stayed busy: the judge's own "
                     f"probe took {busy:.3f} ms against {probe.limit_ms:.3f} ms on an idle device "
                     "(work left running in a CUDA context of the runner's own would slow the "
                     "other side's timed calls)",
                     detail={"probe_ms": busy, "limit_ms": probe.limit_ms, "idle_ms": probe.idle_ms,
                             "judge_cpu_wait_ms": wait})
    raise (e.renamed("current_") if last is cur else e)


def scrub(ev: Evaluation, side: Side, slots: list[Slot], buf: int) -> None:
    """Poison what ``side`` wrote (outputs, writable inputs) in buffer ``buf``, once the
    judge has checked it. On CUDA each paired runner also maps the other side's buffer
    (they trade buffers); the second side of a pair gets the same inputs, and could
    otherwise read the first side's fresh outputs instead of computing its own. The
    judge's sync before the next call orders this before it."""
    if len(side.bases) < 2:
        return  # a buffer no other runner maps (the CPU's memfds)
    views = side.views(slots, buf)
    for s in slots:
        if s.role != "input" or s.name in ev.problem.scratch:
            poison(views[s.name])


def per_pair(samples: list[float], k: int) -> list[float]:
    """Each pair's time for one side: the median of its ``k`` consecutive calls."""
    return [stats.median(samples[i:i + k]) for i in range(0, len(samples) - k + 1, k)]


def open_pair(ev: Evaluation, cand: Side | None = None) -> tuple[Side, Side]:
    """A current-best runner beside ``cand`` (or a fresh candidate).

    On CUDA both runners are fresh and each also maps the other's buffer (handed over at
    spawn), so that paired timing can swap buffers; ``cand`` is closed. On the CPU the
    sides keep their own buffers and ``cand`` is reused."""
    assert ev.req.candidate is not None and ev.req.current is not None
    bufs: tuple[tuple[object, ...], tuple[object, ...]] = ((), ())
    if ev.dev == "cuda":
        if cand is not None:
            ev.close_side(cand)
            cand = None
        bufs = paired_buffers(ev.nbytes)
    blame = ("current_", "the current best failed to load: ")
    ev.start_open_clock()  # starting runners now is a compile stage's work: compile_s
    if cand is not None:
        (cur,) = ev.open_sides([(ev.req.current, bufs[1])], "accept", [blame])
    else:
        # Both fresh: their set-up and module loads overlap (a second or more per runner on
        # a GPU: CUDA context, imports); a failure is the candidate's when both fail.
        cand, cur = ev.open_sides([(ev.req.candidate, bufs[0]), (ev.req.current, bufs[1])],
                                  "accept", [("", ""), blame])
    ev.start_run_clock()  # the pairs that follow have run_s of their own
    return cand, cur


def accepts(acc: AcceptanceWire, pairs: PairsRecord) -> bool:
    return rules.rule_accepts(pairs.t_cur, pairs.t_cand, rule=acc.rule, min_pairs=acc.min_pairs,
                              min_improvement_fraction=acc.min_improvement_fraction,
                              min_positive_fraction=acc.min_positive_fraction, alpha=acc.alpha,
                              looks=acc.looks, offset_ms=acc.pair_offset_us / 1e3)


def acceptance_stage(ev: Evaluation, cand: Side) -> AcceptanceRecord:
    ev.stage = "accept"
    acc = ev.task.acceptance
    cand, cur = open_pair(ev, cand)
    n_seed = max(acc.pairs, acc.min_pairs)
    controlled = acc.rule in ("controlled", "gain")
    n_max = max(n_seed, max(acc.looks)) if controlled else n_seed
    warm_up(ev, [cand, cur], ev.slots(), "accept")  # discarded pairs: a steady power state
    deciding = measure_pairs(ev, cand, cur, n_max, controlled)
    if not accepts(acc, deciding):
        return AcceptanceRecord(deciding=deciding)
    # Winner's curse: the reported speed-up comes from new runners, buffers and seeds.
    for side in (cand, cur):
        ev.close_side(side)
    try:
        cand2, cur2 = open_pair(ev)
    except StageFailure as e:  # a replicate that cannot start leaves the speed-up unmeasured
        return AcceptanceRecord(deciding=deciding, replicate_error=e.error.message[:500])
    # The replicate's speed-up is the reported one: never from fewer pairs than a controlled
    # rule's first look could accept on (the matmul example's seed rule asks for 6).
    n_rep = max(n_seed, min(acc.looks)) if controlled else n_seed
    return AcceptanceRecord(deciding=deciding,
                            replicate=measure_pairs(ev, cand2, cur2, n_rep, False))
