"""One-line lessons derived by fixed rules from a stored attempt.

A lesson says what happened and, where the evidence points somewhere, what to check
next. Rules are tried in order and the first that applies wins; every rule reads only
the stored record (stage, codes, first bad element, figures), so the same record always
gives the same lesson, and a better rule later improves old records too (lessons are not
stored). Untrusted text (error messages echo the candidate's output) is cut to one line
and a bounded length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.experience.model import Attempt
from grader.report.verdict import improvement_speedup, speed_words

__all__ = ["MAX_LESSON_CHARS", "lesson", "one_line"]

MAX_LESSON_CHARS = 300
_INFRA_CODES = frozenset({"sandbox_unavailable", "image_missing", "infrastructure", "judge_died",
                          "runner_killed", "current_runner_killed"})
_LIMIT_ADVICE = {
    "compile_timeout": "compile exceeded its time limit — fewer autotune configs or a smaller "
                       "unrolled body",
    "timeout": "ran past the time limit — look for a hang, a huge grid or an O(n^2) loop",
    "memory_limit": "hit the sandbox memory limit — avoid large temporaries and host copies",
    "gpu_memory_limit": "hit the GPU memory limit — avoid large temporaries",
    "pids_limit": "hit the process limit — the kernel must not spawn processes or threads",
    "disk_limit": "filled the scratch disk — the kernel must not write files",
    "output_limit": "printed past the output cap — remove debug printing",
}


def one_line(text: str, limit: int = MAX_LESSON_CHARS) -> str:
    """``text`` on one line, without control characters, at most ``limit`` characters."""
    # Control characters (terminal escapes from a candidate's output) become spaces.
    flat = " ".join("".join(" " if ord(c) < 32 or 127 <= ord(c) < 160 else c for c in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _dims(d: Any) -> str:
    if not isinstance(d, dict) or not d:
        return "{}"
    return "{" + ", ".join(f"{k}: {v}" for k, v in list(d.items())[:8]) + "}"


def _num(v: Any) -> str:
    return "?" if not isinstance(v, int | float) or isinstance(v, bool) else f"{v:.4g}"


def _pct(v: float) -> str:
    pct = v * 100
    return f"{pct:.0f}%" if abs(pct) >= 100 else f"{pct:.3g}%"


def _first_message(a: Attempt, limit: int = 160) -> str:
    e = a.first_error
    return "" if e is None else one_line(e.message.splitlines()[0] if e.message else "", limit)


def _infra(a: Attempt) -> str | None:
    e = a.first_error
    if e is None or (e.stage != "sandbox" and e.code not in _INFRA_CODES):
        return None
    return f"infrastructure fault ({e.code}): not the kernel's fault — retry; {_first_message(a, 120)}"


def _limit(a: Attempt) -> str | None:
    e = a.first_error
    if e is None or e.code not in _LIMIT_ADVICE:
        return None
    return f"failed {e.stage}: {_LIMIT_ADVICE[e.code]}"


def _scan(a: Attempt) -> str | None:
    e = a.first_error
    if e is None or e.stage != "scan":
        return None
    where = f" at line {e.line}" if e.line else ""
    return f"denied by the scan: rule {e.code}{where} — {_first_message(a)}"


def _compile(a: Attempt) -> str | None:
    e = a.first_error
    if e is None or e.stage != "compile":
        return None
    where = f" at line {e.line}" if e.line else ""
    return f"failed compile ({e.code}){where}: {_first_message(a)}"


def _correctness(a: Attempt) -> str | None:
    e = a.first_error
    if e is None or e.stage != "correctness":
        return None
    fb = a.figures.get("first_bad") if isinstance(a.figures.get("first_bad"), dict) else None
    if fb is None:
        return f"failed correctness ({e.code}): {_first_message(a)}"
    dims = fb.get("dims")
    hidden = dims.get("hidden_shape") if isinstance(dims, dict) else None
    at = (f"on hidden shape #{hidden}" if isinstance(hidden, int) and hidden >= 0
          else "on a hidden shape" if hidden is not None
          else f"at index {fb.get('index')} for dims {_dims(dims)}")
    frac = a.figures.get("mismatch_fraction")
    share = f"{_pct(frac)} of elements wrong" if isinstance(frac, int | float) else "wrong values"
    if e.code == "output_untouched" or (fb.get("actual") is None and fb.get("expected") is not None):
        if isinstance(frac, int | float) and frac >= 0.999:
            return (f"failed correctness: output never written {at} — the kernel stores nothing "
                    "there (check the store, its pointer and the grid)")
        return f"failed correctness: output left unwritten {at} — check the mask on the tail block"
    if fb.get("shape_kind") == "hidden":
        return (f"failed correctness only on a hidden shape: {share} {at} (tune shapes pass) — "
                "handle sizes that are not a multiple of the block: mask loads (other=-inf for a "
                "max, 0 for a sum) and stores on the tail")
    detail = f"expected {_num(fb.get('expected'))}, got {_num(fb.get('actual'))}"
    if isinstance(frac, int | float) and frac >= 0.5:
        return (f"failed correctness: {share} {at} ({detail}) — the computation itself is wrong, "
                "not only an edge")
    return f"failed correctness: {share}, first {at} ({detail}) — check indexing and bounds there"


def _benchmark(a: Attempt) -> str | None:
    e = a.first_error
    if e is None or e.stage != "benchmark":
        return None
    if e.code == "below_roofline_floor":
        return "anomaly: timed faster than the roofline floor — the measurement is suspect, never a record"
    return f"failed benchmark ({e.code}): {_first_message(a)}"


def _rejected(a: Attempt) -> str | None:
    if a.accepted is not False or a.errors:
        return None
    r, thr = a.improvement_fraction, a.min_improvement_fraction
    s = improvement_speedup(r)  # a ratio, as the human report says it: never "-1709%"
    if s is not None and thr is not None and r is not None and r < thr:
        return (f"rejected: {speed_words(s, note='median of the paired ratios')}, short of "
                f"the {thr * 100:g}% required")
    reason = a.figures.get("acceptance_reason")
    return f"rejected: {reason}" if isinstance(reason, str) and reason else "rejected by the acceptance rule"


def _accepted(a: Attempt) -> str | None:
    if a.accepted is not True:
        return None
    if a.improvement_fraction is None:
        med = f"; median {_num(a.median_ms)} ms" if a.median_ms is not None else ""
        return f"accepted as the first correct kernel (no best to pair with){med}"
    pairs = a.figures.get("pairs")
    s = improvement_speedup(a.improvement_fraction)
    said = (speed_words(s, note=f"median of {pairs} paired ratios") if s is not None
            else f"median improvement {_pct(a.improvement_fraction)} over {pairs} pairs")
    speed = f", independent replicate {a.speedup:.3g}x" if a.speedup else ""
    return f"accepted: {said}{speed}"


def _passed(a: Attempt) -> str | None:
    if not a.ok:
        return None
    if a.roofline_fraction is not None:
        roof = "roofline floor"
        if a.bottleneck and a.bottleneck.startswith("memory-bound"):
            roof = "copy roofline"
        elif a.bottleneck and a.bottleneck.startswith("compute-bound"):
            roof = "matmul roofline"
        return f"passed at {a.roofline_fraction:.2f} of the {roof} (median {_num(a.median_ms)} ms)"
    if a.median_ms is not None:
        bw = f", {_num(a.bandwidth_gbps)} GB/s" if a.bandwidth_gbps else ""
        vs = "the reference" if a.origin == "leaderboard" else "the current best"
        speed = f", {a.speedup:.3g}x {vs}" if a.speedup else ""
        return f"passed: median {_num(a.median_ms)} ms{bw}{speed}"
    if a.stage == "compile":
        return "compiled and launched once; correctness and speed not checked yet"
    return f"passed up to {a.stage or 'the first stage'}; not timed"


def _fallback(a: Attempt) -> str:
    e = a.first_error
    if e is None:
        return f"failed at {a.stage or 'an unknown stage'} without an error code"
    return f"failed {e.stage} ({e.code}): {_first_message(a)}"


_RULES: tuple[Callable[[Attempt], str | None], ...] = (
    _infra, _limit, _scan, _compile, _correctness, _benchmark, _rejected, _accepted, _passed)


def lesson(a: Attempt) -> str:
    """The attempt's one-line lesson (at most :data:`MAX_LESSON_CHARS` characters)."""
    for rule in _RULES:
        text = rule(a)
        if text:
            return one_line(text)
    return one_line(_fallback(a))
