"""Whose time ran out when a stage overran its budget (judge side).

Each run stage (correctness, timing, acceptance, its replicate) has ``run_s`` of its own,
and every answer of a runner is waited for at least ``sandbox.judge.sides.MIN_WAIT_S`` (never
"0.0 s"). When a stage has used up its budget between calls, the judge asks whose time it
was: the candidate's own answers (the round trips of its calls) or the harness's work
around them (references, checks, a loaded host). Only the first is the candidate's fault;
the second is an infrastructure error, retried and never blamed on the kernel.
"""

from __future__ import annotations

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import ErrorStage


def overrun(stage: ErrorStage, t0: float, deadline: float, now: float,
            answer_s: float) -> StageFailure | None:
    """The failure for ``stage`` (started at ``t0``) if ``now`` is past its ``deadline``;
    ``answer_s``: seconds the candidate's answers took in it."""
    if now <= deadline:
        return None
    spent, budget = now - t0, deadline - t0
    detail = {"stage_budget_s": round(budget, 3), "spent_s": round(spent, 3),
              "candidate_answers_s": round(answer_s, 3)}
    if answer_s >= 0.5 * spent:
        return StageFailure(stage, "timeout", f"the {stage} stage ran out of its {budget:.0f} s: "
                            f"the candidate's own calls took {answer_s:.1f} s of {spent:.1f} s",
                            detail=detail)
    return StageFailure(stage, "harness_timeout", f"the {stage} stage ran out of its {budget:.0f} s "
                        f"while the candidate's calls took only {answer_s:.1f} s of {spent:.1f} s: "
                        "the harness's own work (references, checks, a loaded host) used the "
                        "rest; run again", origin="infrastructure", detail=detail)
