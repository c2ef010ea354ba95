"""The judge's comparison of a call's outputs with the reference's (judge side)."""

from __future__ import annotations

import math
from typing import Any

import torch

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import CorrectnessRecord, CorrectnessWire, ErrorStage
from sandbox.problem.tensors import compare, dtype_code


def check_outputs(c: CorrectnessWire, record: dict[str, Any], views: dict[str, torch.Tensor],
                  expected: dict[str, torch.Tensor], stage: ErrorStage, where: dict[str, Any],
                  decoys: bool = False) -> None:
    """Raise ``wrong_values`` / ``output_untouched`` for the first output off the reference,
    at the task's tolerance for its dtype; ``record`` (the evaluation's correctness figures)
    keeps the worst errors and the first bad element. ``decoys``: the launcher was handed
    decoys (sandbox.runner.twin), and the message says so."""
    for name, exp in expected.items():
        atol, rtol = c.tolerance(dtype_code(views[name].dtype))
        cmp = compare(views[name], exp, atol, rtol, c.max_mismatch_fraction)
        track(record, cmp.max_abs, cmp.max_rel, cmp.mismatch_fraction)
        if cmp.ok:
            continue
        fb = cmp.first_bad or {}
        untouched = fb.get("actual") is None and fb.get("expected") is not None
        what = "left unwritten (still poisoned)" if untouched else "wrong"
        msg = (f"output {name!r} {what} at index {fb.get('index')} "
               f"for dims {where.get('dims')}: expected {fb.get('expected')}, got "
               f"{fb.get('actual') if not untouched else 'NaN/poison'}; "
               f"{cmp.mismatch_fraction:.2%} of elements mismatch")
        if decoys:
            msg += "; kernel-only task: write outputs from Triton kernels (host code sees decoys)"
        bad = {"tensor": name, "index": fb.get("index", []), "expected": fb.get("expected"),
               "actual": fb.get("actual"), "dims": where.get("dims", {}),
               "seed": where.get("seed"), "shape_kind": where.get("shape_kind"),
               "phase": where.get("phase", stage)}
        record["first_bad"] = bad
        raise StageFailure(stage, "wrong_values" if not untouched else "output_untouched",
                           msg, detail={"first_bad": bad})


def track(record: dict[str, Any], max_abs: float | None, max_rel: float | None,
          frac: float) -> None:
    """Keep the worst finite error figures seen so far in ``record``."""
    for key, v in (("max_abs_error", max_abs), ("max_rel_error", max_rel),
                   ("mismatch_fraction", frac)):
        if v is not None and math.isfinite(v):
            record[key] = max(float(record.get(key) or 0.0), v)


def correctness_record(c: dict[str, Any]) -> CorrectnessRecord | None:
    """The tally :func:`track` and the checks kept, as the record's correctness section."""
    if not c:
        return None
    return CorrectnessRecord(
        passed=bool(c.get("passed", False)), checks=int(c.get("checks", 0)),
        shapes_checked=tuple(c.get("shapes_checked", ())), seeds=int(c.get("seeds", 0)),
        max_abs_error=c.get("max_abs_error"), max_rel_error=c.get("max_rel_error"),
        mismatch_fraction=c.get("mismatch_fraction"), first_bad=c.get("first_bad"))
