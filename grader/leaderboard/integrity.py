"""Which failures disqualify a whole submission on a leaderboard.

A submission that attacked the grader on one task is not ranked on its other tasks: a
scan denial of a security rule, tampering with the harness, forged or escaping timing,
writes outside its tensors, torch compute smuggled into a kernel-only launch, or abuse of
a sandbox limit (fork bombs, disk fills, log floods). Honest failures (wrong values, a
kernel that does not compile, a timeout, an out-of-memory on a big shape) only lose
that task. Which codes disqualify is a fact of each code's catalogue entry
(``disqualifying``: :data:`sandbox.contract.codes.VIOLATION_CODES`).

Fail closed: every scan denial counts as an integrity violation except the rules listed
in :data:`HONEST_SCAN_RULES`, which catch code that is merely wrong or of the wrong kind.
"""

from __future__ import annotations

from grader.report.model import Report
from sandbox.contract.codes import VIOLATION_CODES

# An allow-list miss on the kernel libraries themselves (``torch.add`` in a triton-only
# task) is a library fallback, not an attack; a miss anywhere else is not excused.
HONEST_LIBRARY_PREFIXES = ("torch.", "triton.", "tl.", "math.")
HONEST_SCAN_RULES = frozenset({
    "syntax-error", "too-complex", "require-triton-kernel", "torch-compute-op",
    "functional-op", "matmul-operator", "tensor-compute-method", "torch-compile", "cuda-graph",
    "library-fallback",
})

def violation(report: Report) -> tuple[str, str] | None:
    """``(code, message)`` of the first integrity violation in ``report``, or None."""
    for e in report.errors:
        code = e.code.removeprefix("current_")
        if e.origin != "candidate" or code != e.code:
            continue  # the grader's fault, or the current best's: not this submission's
        if e.stage == "integrity" or code in VIOLATION_CODES:
            return code, e.message
        library_miss = code == "name-not-allowed" and \
            e.message.split(" ", 1)[0].startswith(HONEST_LIBRARY_PREFIXES)
        if e.stage == "scan" and code not in HONEST_SCAN_RULES and not library_miss:
            return code, f"denied by a security rule of the policy: {e.message}"
    return None
