"""The candidate-facing copy of a report: hidden shapes never leave.

A task's hidden shapes exist to catch kernels tuned to the shapes they were shown. A
candidate that is called on one can print it (``raise RuntimeError(f"saw {x.shape}")``),
and the judge's own words name it (``first_bad.dims``, "for dims {...}",
``correctness.shapes_checked``, a generated task's ``shapes.hidden``). :func:`redact` is
the one function that turns an operator's full report into what a candidate may read:
agent tool results, the MCP server, the experience store, published leaderboard pages.
Operators keep the full report (``kgrader run``, records folders, the leaderboard state).

What the copy holds instead:

* every hidden shape, wherever a dims mapping names it, is ``{"hidden_shape": k}`` (k:
  its index among the task's hidden shapes, fixed ones first, then drawn ones); in text
  it is "hidden shape #k";
* an error the judge stamped ``after_hidden`` (raised at or after the first call on a
  hidden shape) keeps its stage, a vetted code and origin, and gets a neutral sentence
  instead of its message, line and detail; an unstamped one (the host's, an older report)
  counts as tainted after the compile stage unless marked ``shape_kind: "tune"``;
* every figure the judge marked as measured after that call (taint by time: error maxima,
  the first bad element, times, the pairs' figures, the phases) is withheld or coarsened
  as :mod:`grader.report.withhold` says, whatever shape it names;
* the sandbox's stdout/stderr tails, once the run went past the compile stage, and the
  memory checker's per-finding text, threads, blocks and addresses are withheld;
* every remaining free text (warnings, reasons, compile errors) is scrubbed of dims
  mappings that name a hidden shape and of integers equal to a hidden dimension value
  (at least 2 and not a value of a tune or timed shape).

Covert channels this does not close (bounded in docs/security-review.md): the median time
and the acceptance figures at three significant digits, the verdict, the stage and the
error code of each evaluation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from grader.report.diagnostics_model import Diagnostics
from grader.report.model import BadElement, Report, ReportError
from grader.report.withhold import marked, withhold
from grader.task import TaskSpec, spec_or_none
from sandbox.contract.wire import DTYPE_CODES

__all__ = ["HIDDEN_KEY", "ShapeFacts", "facts_for", "redact", "redact_diagnostics", "redact_json",
           "redact_text", "scrub_text", "scrub_tree"]

HIDDEN_KEY = "hidden_shape"
WITHHELD = "[withheld: the run included hidden shapes]"
# Codes a runner's own reply may carry (sandbox.runner.main, sandbox.launcher.proc): the runner chooses
# them, so a tainted error keeps one only from this fixed vocabulary (a few bits at most).
RUNNER_CODES = frozenset({
    "exception", "syntax", "import", "missing_entrypoint", "op_audit_tampered", "memory_limit",
    "disk_limit", "gpu_memory_limit", "pids_limit", "early_exit", "protocol", "timeout",
    "compile_timeout", "signal", "protocol_violation", "runner_isolation_unavailable",
})
_TRUNCATIONS = (2000, 500, 300, 160)  # where report/row copies of a message are cut
_INT = re.compile(r"(?<![0-9A-Za-z_.])(\d+)(?![0-9A-Za-z_])")
_BRACED = re.compile(r"\{[^{}]{0,800}\}")
_PAIR = re.compile(r"""['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?\s*[:=]\s*(-?\d+|['"][a-z0-9]+['"])""")


def _code(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip("'\"") in DTYPE_CODES:
        return DTYPE_CODES.index(v.strip("'\""))
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
        return int(v)
    return None


def _norm(dims: object) -> dict[str, int] | None:
    """A dims mapping with dtype names as their codes; None when it is not one."""
    if not isinstance(dims, Mapping) or not dims:
        return None
    out: dict[str, int] = {}
    for k, v in dims.items():
        c = _code(v)
        if not isinstance(k, str) or c is None:
            return None
        out[k] = c
    return out


@dataclass(frozen=True)
class ShapeFacts:
    """What redaction needs to know: the task's hidden shapes in order (``None``: unknown,
    so every shape not known to be public is treated as hidden), and the public shapes
    (tune and timed) a candidate may know."""

    hidden: tuple[dict[str, int], ...] | None
    public: tuple[dict[str, int], ...] = ()
    dtype_keys: frozenset[str] = frozenset()

    @classmethod
    def of(cls, hidden: Iterable[Mapping[str, Any]] | None,
           public: Iterable[Mapping[str, Any]] = (), dtype_keys: Iterable[str] = ()) -> ShapeFacts:
        """Facts from raw bindings (dtype variables by name or by code)."""
        dkeys = set(dtype_keys)

        def norm_all(xs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, int], ...]:
            out: list[dict[str, int]] = []
            for x in xs:
                dkeys.update(k for k, v in x.items() if isinstance(v, str))
                n = _norm(x)
                if n is not None and n not in out:
                    out.append(n)
            return tuple(out)
        hid = None if hidden is None else norm_all(hidden)
        return cls(hid, norm_all(public), frozenset(dkeys))

    def index(self, dims: object) -> int | None:
        """k when ``dims`` is hidden shape #k (-1: hidden, index unknown); None: not hidden."""
        n = _norm(dims)
        if n is None or set(n) == {HIDDEN_KEY}:
            return None
        if self.hidden is None:
            names = [set(p) for p in self.public]
            return None if n in self.public or (names and set(n) not in names) else -1
        for k, h in enumerate(self.hidden):
            if n == h:
                return k
        return None

    def with_report(self, report: Report) -> ShapeFacts:
        """These facts plus what ``report`` drew (generated shapes) and timed."""
        drawn = report.shapes
        public: list[Mapping[str, Any]] = [*self.public]
        if drawn is not None:
            public += [*drawn.tune, *([drawn.timed] if drawn.timed else [])]
        if report.timing is not None and report.timing.dims:
            public.append(report.timing.dims)
        hidden: list[Mapping[str, Any]] | None = None
        if self.hidden is not None:
            hidden = [*self.hidden, *(drawn.hidden if drawn is not None else [])]
        return ShapeFacts.of(hidden, public, self.dtype_keys)

    def to_json(self) -> dict[str, Any]:
        """A JSON form (the leaderboard keeps its tasks' facts in its state)."""
        return {"hidden": None if self.hidden is None else [dict(h) for h in self.hidden],
                "public": [dict(p) for p in self.public], "dtype_keys": sorted(self.dtype_keys)}

    @classmethod
    def from_json(cls, obj: object) -> ShapeFacts:
        """:meth:`to_json` read back; anything malformed gives the fail-closed facts
        (hidden shapes unknown)."""
        if not isinstance(obj, Mapping):
            return cls(None)
        hidden, public, dkeys = obj.get("hidden"), obj.get("public"), obj.get("dtype_keys")
        if not (isinstance(hidden, list) and isinstance(public, list) and isinstance(dkeys, list)):
            return cls(None)
        if not all(isinstance(x, Mapping) for x in [*hidden, *public]):
            return cls(None)
        facts = cls.of(hidden, public, [str(k) for k in dkeys])
        return facts if facts.hidden is not None and len(facts.hidden) == len(hidden) else cls(None)

    @property
    def has_hidden(self) -> bool:
        return self.hidden is None or bool(self.hidden)

    def secret_values(self) -> set[int]:
        """Hidden dimension values worth scrubbing from free text."""
        public = {v for p in self.public for v in p.values()}
        return {v for h in (self.hidden or ()) for k, v in h.items()
                if k not in self.dtype_keys and v >= 2 and v not in public}


def facts_for(task: TaskSpec | Mapping[str, Any] | None, report: Report | None = None) -> ShapeFacts:
    """The facts for ``report`` graded on ``task`` (a spec, a task.json mapping or None):
    the task's fixed hidden shapes, then the ones drawn for this evaluation."""
    spec = spec_or_none(task)
    if spec is None:
        base = ShapeFacts(None)
    else:
        gen = spec.shapes.generate
        base = ShapeFacts.of(spec.shapes.hidden,
                             [*spec.shapes.tune, *([spec.shapes.timed] if spec.shapes.timed else [])],
                             gen.dtypes if gen is not None else ())
    return base.with_report(report) if report is not None else base


def _k(k: int | None) -> int:
    return -1 if k is None else k


def _label(k: int | None) -> str:
    return "a hidden shape" if k is None or k < 0 else f"hidden shape #{k}"


def scrub_text(text: str, facts: ShapeFacts) -> str:
    """``text`` without dims mappings that name a hidden shape, nor hidden dimension values."""
    def braced(m: re.Match[str]) -> str:
        pairs = {k: v for k, v in _PAIR.findall(m.group())}
        k = facts.index(pairs) if pairs else None
        return m.group() if k is None else _label(k)

    out = _BRACED.sub(braced, text)
    secret = facts.secret_values()
    if secret:
        out = _INT.sub(lambda m: "<hidden>" if int(m.group(1)) in secret else m.group(), out)
    return out


def scrub_tree(x: Any, facts: ShapeFacts) -> Any:
    """A JSON-like tree with hidden dims mappings labelled and its strings scrubbed."""
    if isinstance(x, Mapping):
        k = facts.index(x)
        if k is not None:
            return {HIDDEN_KEY: k}
        return {key: scrub_tree(v, facts) for key, v in x.items()}
    if isinstance(x, list | tuple):
        return [scrub_tree(v, facts) for v in x]
    if isinstance(x, str):
        return scrub_text(x, facts)
    return x


def _dims_of(e: ReportError) -> object:
    d = e.detail
    fb = d.get("first_bad")
    return d.get("dims") if "dims" in d else (fb.get("dims") if isinstance(fb, Mapping) else None)


def _tainted(e: ReportError, facts: ShapeFacts) -> tuple[bool, int | None]:
    """Whether ``e`` may carry a hidden shape, and which one when the judge said so."""
    k = facts.index(_dims_of(e))
    if k is not None and k >= 0:
        return True, k
    if e.after_hidden is not None:  # the judge's stamp, by time (sandbox.judge.taint)
        return e.after_hidden, k
    if not facts.has_hidden or e.stage == "scan":
        return False, None
    d = e.detail
    if e.stage == "compile" and not d.get("stage_unknown"):
        return False, None  # the candidate has been called on the first tune shape only
    fb = d.get("first_bad")
    kind = d.get("shape_kind", fb.get("shape_kind") if isinstance(fb, Mapping) else None)
    if e.stage == "correctness" and kind == "tune":
        return False, None  # the judge's mark (sandbox.judge.evaluation): runs on tune shapes come first
    return True, k


def _neutral(e: ReportError, k: int | None) -> ReportError:
    code = e.code
    if "type" in e.detail and code.removeprefix("current_") not in RUNNER_CODES:
        code = "exception"  # a code the runner chose
    where = f"on {_label(k)}" if k is not None else "after the candidate was called on hidden shapes"
    msg = (f"{e.stage} failed ({code}) {where}; the message is withheld because a candidate's "
           "text could carry the hidden shape's dimensions (the operator's report keeps it)")
    detail: dict[str, Any] = {"withheld": True}
    if k is not None:
        detail[HIDDEN_KEY] = k
    return ReportError(stage=e.stage, code=code, origin=e.origin, message=msg, detail=detail,
                       after_hidden=e.after_hidden)


def _replace_tainted(text: str, tainted: Sequence[tuple[str, str]]) -> str:
    for orig, neutral in tainted:
        for cut in (len(orig), *(c for c in _TRUNCATIONS if c < len(orig))):
            part = orig[:cut]
            if part and part in text:
                text = text.replace(part, neutral)
                break
    return text


def _bad(fb: BadElement, facts: ShapeFacts) -> BadElement:
    k = facts.index(fb.dims)
    if k is None or (k < 0 and fb.shape_kind == "tune"):  # the judge said it was a tune shape
        return fb
    return BadElement(tensor=fb.tensor, index=[], expected=None, actual=None,
                      dims={HIDDEN_KEY: k if k is not None else -1}, seed=None,
                      shape_kind="hidden", phase=fb.phase)


def _errors(report: Report, facts: ShapeFacts) -> tuple[list[ReportError], list[tuple[str, str]]]:
    """The redacted errors, and each withheld message with the sentence that replaces it."""
    errors: list[ReportError] = []
    tainted: list[tuple[str, str]] = []
    for e in report.errors:
        if e.detail.get("withheld") is True and e.message == _neutral(e, e.detail.get(HIDDEN_KEY)).message:
            errors.append(e)  # redacted already
            continue
        hit, k = _tainted(e, facts)
        if hit:
            n = _neutral(e, k)
            errors.append(n)
            if e.message:
                tainted.append((e.message, n.message))
        else:
            errors.append(e.model_copy(update={"message": scrub_text(e.message, facts),
                                               "detail": scrub_tree(e.detail, facts)}))
    return errors, sorted(tainted, key=lambda t: -len(t[0]))


def redact_text(text: str, report: Report, facts: ShapeFacts) -> str:
    """A text built from ``report`` (a leaderboard row's message, a reason) as the
    candidate may read it: each withheld message in it replaced, then scrubbed."""
    return scrub_text(_replace_tainted(text, _errors(report, facts)[1]), facts)


def redact(report: Report, facts: ShapeFacts) -> Report:
    """The candidate-facing copy of ``report`` (see the module docstring); ``report`` is
    not changed."""
    errors, tainted = _errors(report, facts)

    def text(s: str) -> str:
        return scrub_text(_replace_tainted(s, tainted), facts)

    upd: dict[str, Any] = {"errors": errors, "warnings": [_sanitize_warning(text(w), facts)
                                                          for w in report.warnings]}
    c = report.correctness
    if c is not None:
        fb = _bad(c.first_bad, facts) if c.first_bad is not None else None
        on_hidden = fb is not None and fb.shape_kind == "hidden" and fb.dims.get(HIDDEN_KEY) is not None
        cu: dict[str, Any] = {"first_bad": fb,
                              "shapes_checked": [scrub_tree(s, facts) for s in c.shapes_checked]}
        if on_hidden or any(x.detail.get("withheld") for x in errors if x.stage == "correctness"):
            cu.update(max_abs_error=None, max_rel_error=None, mismatch_fraction=None)
        upd["correctness"] = c.model_copy(update=cu)
    for name in ("timing", "timing_current"):
        t = getattr(report, name)
        if t is not None and facts.index(t.dims) is not None:
            upd[name] = t.model_copy(update={"dims": {HIDDEN_KEY: facts.index(t.dims)}})
    if report.acceptance is not None:
        a = report.acceptance
        upd["acceptance"] = a.model_copy(update={
            "reason": text(a.reason),
            "rules": [r.model_copy(update={"reason": text(r.reason)}) for r in a.rules]})
    if report.shapes is not None:
        s = report.shapes
        upd["shapes"] = s.model_copy(update={
            "hidden": [{HIDDEN_KEY: _k(facts.index(h))} for h in s.hidden],
            "timed": scrub_tree(s.timed, facts)})
    if report.sandbox is not None:
        sb = report.sandbox
        early = all(e.stage in ("scan", "compile") and not e.detail.get("stage_unknown")
                    for e in report.errors) and report.stage in (None, "scan", "sandbox", "compile")
        keep = early or not facts.has_hidden
        upd["sandbox"] = sb.model_copy(update={
            "stdout_tail": text(sb.stdout_tail) if keep or not sb.stdout_tail else WITHHELD,
            "stderr_tail": text(sb.stderr_tail) if keep or not sb.stderr_tail else WITHHELD})
    m = marked(report, facts.has_hidden)
    if report.diagnostics is not None:
        upd["diagnostics"] = redact_diagnostics(report.diagnostics, facts, text,
                                                tainted="diagnostics" in m)
    copy = report.model_copy(update=upd)
    return copy.model_copy(update=withhold(copy, m))  # taint by time, whatever shape it names


def _sanitize_warning(w: str, facts: ShapeFacts) -> str:
    # The memory checker's fallback quotes the tool run's own failure, which came after the
    # candidate saw hidden shapes (sandbox/tools/profiling.py).
    if facts.has_hidden and w.startswith("sanitize") and "could not check the candidate" in w:
        return w.split("could not check the candidate", 1)[0] + "could not check the candidate " \
            f"here {WITHHELD}"
    return w


def redact_diagnostics(d: Diagnostics, facts: ShapeFacts,
                       text: Callable[[str], str] | None = None, tainted: bool = False) -> Diagnostics:
    """The candidate-facing copy of a report's or a profile run's diagnostics."""
    if text is None:
        def text(s: str) -> str:
            return scrub_text(s, facts)
    upd: dict[str, Any] = {
        "dims": {HIDDEN_KEY: facts.index(d.dims)} if facts.index(d.dims) is not None else d.dims,
        "advice": [text(a) for a in d.advice], "notes": [text(n) for n in d.notes],
        "unmeasured": {k: text(v) for k, v in d.unmeasured.items()}}
    s = d.sanitizer
    if s is not None and (facts.has_hidden or tainted):
        # Findings come from correctness runs over the hidden shapes: threads, blocks,
        # addresses and the tool's text follow the shape. Kind, space and access stay.
        upd["sanitizer"] = s.model_copy(update={
            "unmeasured": text(s.unmeasured) if s.unmeasured else s.unmeasured,
            "findings": [f.model_copy(update={"kernel": None, "location": None, "thread": None,
                                              "block": None, "address": None, "nearest": None,
                                              "size": None, "text": WITHHELD})
                         for f in s.findings]})
    return d.model_copy(update=upd)


def redact_json(report_json: str, facts: ShapeFacts) -> str | None:
    """:func:`redact` on a stored report's JSON text; None when the text is not a report
    (a caller then shows nothing of it)."""
    try:
        report = Report.model_validate_json(report_json)
    except (ValidationError, ValueError):
        return None
    return redact(report, facts).model_dump_json()
