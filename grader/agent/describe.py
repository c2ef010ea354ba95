"""``describe_task``: everything an agent needs to write a kernel, without reading a file.

The answer is built from the workspace's task and policy on the host (no sandbox run):
the contract and entry point, the tensors in call order with roles, dtypes and symbolic
shapes, the tune shapes and the timed shape, tolerances, the measurement protocol and the
acceptance rule, the policy and what it lets through, the cost model and the roofline
floor where one is known, and the reference's source where the workspace shows it.

**Hidden shapes never leave.** Only their count is given (for a generated task: how many
are drawn per evaluation, never the ranges' draws). The correctness seeds are secret and
given as a count. The reference's source is scrubbed with the same rule as every report
(:func:`grader.grading.redact.scrub_text`); when scrubbing would change it (the source
names a value of a hidden dimension), it is withheld instead of shown altered.

Whether the reference's source is shown is the workspace's ``show_reference`` setting
(default ``true``: kgrader's tasks' references are plain PyTorch, and an agent that may
read the reference writes a better kernel sooner); an operator whose reference is itself
the secret turns it off.
"""

from __future__ import annotations

from typing import Any

from grader.agent.workspace import Workspace
from grader.backends.select import detect_device
from grader.errors import KgraderError
from grader.formats import registry
from grader.grading.redact import facts_for, scrub_text, scrub_tree
from grader.measure.floors import floor_ms
from grader.measure.peaks import load_entries
from grader.scan import load_policy
from grader.scan.policy import Policy
from grader.task import TaskSpec, load_task
from sandbox.contract.conventions import convention
from sandbox.contract.wire import DTYPE_CODES

__all__ = ["describe_task", "policy_summary"]

def _binding(b: dict[str, int], dtype_vars: set[str]) -> dict[str, int | str]:
    return {k: DTYPE_CODES[v] if k in dtype_vars and 0 <= v < len(DTYPE_CODES) else v
            for k, v in b.items()}


def policy_summary(policy: Policy) -> dict[str, Any]:
    """What ``policy`` lets a candidate use: its allow-list when it has one (kernel-only
    policies), and always the rules that deny."""
    out: dict[str, Any] = {"name": policy.name, "description": policy.description,
                           "chain": list(policy.chain),
                           "kind": "allow-list" if policy.allowlist is not None else "deny-list"}
    al = policy.allowlist
    if al is not None:
        out["allowed"] = {
            "rationale": al.rationale,
            "modules": {name: {"why": m.why, "names": list(m.names)} for name, m in al.modules},
            "builtins": list(al.builtins),
            "attributes_outside_kernels": list(al.attributes) if al.attributes is not None else None,
            "note": "anything not listed is denied (module-not-allowed, name-not-allowed, "
                    "builtin-not-allowed, attribute-not-allowed)",
        }
    out["deny_rules"] = [{"id": r.id, "message": r.message} for r in policy.rules
                         if r.severity == "deny"]
    out["warn_rules"] = [r.id for r in policy.rules if r.severity != "deny"]
    return out


def _tensors(spec: TaskSpec) -> list[dict[str, Any]]:
    return [{"position": i, "name": t.name, "role": t.role, "dtype": t.dtype,
             "shape": list(t.shape)} for i, t in enumerate(spec.inputs + spec.outputs)]


def _shapes(spec: TaskSpec, dtype_vars: set[str]) -> dict[str, Any]:
    gen = spec.shapes.generate
    out: dict[str, Any] = {
        "tune": [_binding(b, dtype_vars) for b in spec.shapes.tune],
        "hidden_count": len(spec.shapes.hidden),
        "generated": gen is not None,
        "note": "correctness is also checked on hidden shapes you are never shown, in "
                "general not multiples of any block size: mask every load and store",
    }
    try:
        out["timed"] = _binding(spec.timed_dims(), dtype_vars)
    except KgraderError:
        out["timed"] = None
        out["timed_note"] = "drawn per evaluation (generated task)"
    if gen is not None:
        out["generated_per_evaluation"] = {"dims": sorted(gen.dims), "tune": gen.tune,
                                           "hidden": gen.hidden,
                                           "dtype_variables": sorted(gen.dtypes)}
        out["hidden_count"] += gen.hidden
    return out


def _device(ws: Workspace) -> str:
    if ws.config.device != "auto":
        return ws.config.device
    try:
        return str(detect_device())
    except Exception:  # only a label here; the evaluation resolves it again
        return "auto"


def _cached_peaks(ws: Workspace, device: str) -> tuple[dict[str, float] | None, str | None]:
    """The newest cached calibration for this device (no measurement: describe is cheap)."""
    try:
        entries = [e for e in load_entries(ws.hardware_path) if e.device == device]
    except Exception as e:  # an unreadable cache only means no calibrated floor
        return None, f"hardware cache unreadable: {type(e).__name__}"
    if not entries:
        return None, None
    last = entries[-1]
    return ({k: float(v) for k, v in last.peaks.items() if isinstance(v, int | float)},
            last.measured_at)


def _cost(ws: Workspace, spec: TaskSpec, device: str) -> dict[str, Any]:
    if spec.cost_model is None:
        return {"cost_model": None, "roofline_floor_ms": spec.roofline_floor_ms,
                "floor_source": "task" if spec.roofline_floor_ms is not None else None,
                "unmeasured": {"cost_model": "the task declares no cost model"}}
    out: dict[str, Any] = {"cost_model": {"bytes": spec.cost_model.bytes,
                                          "flops": spec.cost_model.flops}}
    try:
        nbytes, flops = spec.cost_model.evaluate(spec.timed_dims())
        out.update(timed_bytes=nbytes, timed_flops=flops)
    except KgraderError:
        pass
    if spec.roofline_floor_ms is not None:
        out.update(roofline_floor_ms=spec.roofline_floor_ms, floor_source="task")
        return out
    peaks, measured = _cached_peaks(ws, device)
    try:
        floor = floor_ms(spec, device, peaks)
    except KgraderError:
        floor = None
    out["roofline_floor_ms"] = floor
    if floor is None:
        out["floor_source"] = None
        out["unmeasured"] = {"roofline_floor_ms": f"no calibrated peaks for device {device} "
                                                  "(measure_peak calibrates)"}
    else:
        out["floor_source"] = (f"calibrated peaks ({measured})" if peaks is not None
                               else "datasheet ceilings x1.5 (no calibration cached)")
    return out


def _reference(ws: Workspace, spec: TaskSpec) -> dict[str, Any]:
    if not ws.config.show_reference:
        return {"reference_source": None,
                "unmeasured": {"reference_source": "the workspace does not show the reference"}}
    _, src = load_task(ws.task_dir)
    if scrub_text(src, facts_for(spec)) != src:  # fail closed: never an altered source
        return {"reference_source": None,
                "unmeasured": {"reference_source": "withheld: it names a hidden dimension value"}}
    return {"reference_source": src}


def describe_task(ws: Workspace) -> dict[str, Any]:
    """The task as an agent may know it (the body of the ``describe_task`` tool)."""
    spec = ws.spec
    gen = spec.shapes.generate
    dtype_vars = set(gen.dtypes) if gen is not None else set()
    scan_policy = load_policy(ws.config.policy or spec.policy)
    device = _device(ws)
    args = ", ".join(t.name for t in spec.inputs + spec.outputs)
    problem = spec.problem
    returns = convention(spec.contract).returns_outputs
    contract = registry.for_contract(spec.contract).agent_text.format(
        entry=spec.entrypoint, args=args, inputs=problem.inputs if problem else "",
        reference=problem.reference if problem else "")
    out: dict[str, Any] = {
        "tool": "describe_task", "ok": True, "stage": None, "errors": [], "warnings": [],
        "task": spec.name, "description": spec.description, "tags": list(spec.tags),
        "contract": spec.contract, "entrypoint": spec.entrypoint,
        "signature": None if returns else f"{spec.entrypoint}({args})",
        "contract_text": contract, "tensors": _tensors(spec),
        "returns_outputs": returns,
        "shapes": _shapes(spec, dtype_vars),
        "tolerances": {"atol": spec.correctness.atol, "rtol": spec.correctness.rtol,
                       "max_mismatch_fraction": spec.correctness.max_mismatch_fraction,
                       "seeds": len(spec.correctness.seeds)},
        "benchmark": spec.benchmark.model_dump(mode="json"),
        "acceptance": spec.acceptance.model_dump(mode="json"),
        "limits": {"compile_s": spec.limits.compile_s, "run_s": spec.limits.run_s,
                   "memory_mib": spec.limits.memory_mib},
        "policy": policy_summary(scan_policy),
        "task_policy": spec.policy,
        "device": device, "backend": ws.config.backend,
        "unmeasured": {},
    }
    if problem is not None:
        out["problem"] = {"reference": problem.reference, "inputs": problem.inputs,
                          "init": problem.init}
    cost = _cost(ws, spec, device)
    out["unmeasured"].update(cost.pop("unmeasured", {}))
    out.update(cost)
    # Every string the operator wrote (the description, the policy's texts) is scrubbed of
    # hidden dimension values like a report; the reference is shown whole or not at all.
    out = scrub_tree(out, facts_for(spec))
    ref = _reference(ws, spec)
    out["unmeasured"].update(ref.pop("unmeasured", {}))
    out.update(ref)
    return out
