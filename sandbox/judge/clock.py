"""Whose time ran out when a stage overran its budget (judge side).

Each run stage (correctness, timing, acceptance, its replicate) has ``run_s`` of its own,
and every answer of a runner is waited for at least ``sandbox.judge.sides.MIN_WAIT_S`` (never
"0.0 s"). When a stage has used up its budget between calls, the judge asks whose time it
was: one side's own answers (the round trips of its calls: the candidate's, or in the
acceptance stage the current best's too) or the harness's work around them (references,
checks, a loaded host). A side is blamed only when its own answers took half the stage;
otherwise it is an infrastructure error, retried and never blamed on a kernel. Each side is
counted on its own, so that the side that happens to call next after the other side's slow
answer is not blamed for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import ErrorStage

# What a side is called in a message, by role.
ROLE_NAMES: dict[str, str] = {"candidate": "the candidate", "current": "the current best"}


def overrun(stage: ErrorStage, t0: float, deadline: float, now: float,
            answers: Mapping[str, float]) -> StageFailure | None:
    """The failure for ``stage`` (started at ``t0``) if ``now`` is past its ``deadline``;
    ``answers``: seconds each side's answers took in it, by role (``candidate``,
    ``current``). A side's timeout names it in ``detail["overrun_by"]`` (the judge's
    acceptance stage blames that side, whichever side was about to call); the harness's
    names ``harness``."""
    if now <= deadline:
        return None
    spent, budget = now - t0, deadline - t0
    detail: dict[str, object] = {"stage_budget_s": round(budget, 3), "spent_s": round(spent, 3)}
    detail.update({f"{role}_answers_s": round(s, 3) for role, s in sorted(answers.items())})
    role, own = max(answers.items(), key=lambda kv: kv[1], default=("candidate", 0.0))
    if own >= 0.5 * spent:
        return StageFailure(stage, "timeout", f"the {stage} stage ran out of its {budget:.4g} s: "
                            f"{ROLE_NAMES.get(role, role)}'s own calls took {own:.1f} s of "
                            f"{spent:.1f} s", detail={**detail, "overrun_by": role})
    calls = " and ".join(f"{ROLE_NAMES.get(r, r)}'s calls took {s:.1f} s"
                         for r, s in sorted(answers.items())) or "no side's call was answered"
    return StageFailure(stage, "harness_timeout", f"the {stage} stage ran out of its {budget:.4g} s "
                        f"while {calls} of {spent:.1f} s (under half): the harness's own work "
                        "(references, checks, a loaded host) used the rest; run again",
                        origin="infrastructure", detail={**detail, "overrun_by": "harness"})
