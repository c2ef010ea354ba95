"""No timing verdict stands on a run that shared its GPU with another job.

The host's NVML watch (:mod:`grader.backends.gpu_watch`) names the compute processes on the
sandbox's GPUs that were not the sandbox's. Their kernels time-slice with the candidate's,
which can slow any timed call, keep the device busy between paired calls, or favour one
side of an acceptance. So, when the device was shared:

* a candidate's (or current best's) verdict that rests on timing -- a timeout, the device
  busy between calls, work that escaped the timing, inconsistent clocks, a time below the
  physical floor -- becomes ``foreign_gpu_process`` (infrastructure, retried): the
  candidate did not start that process (it could not: every process it starts is in the
  sandbox's tree), so it is not blamed for what it did;
* an acceptance is not decided either way: the same code at ``accept`` (a retry; neither a
  replacement of the best nor a refusal measured beside someone else's kernels);
* a plain pass stands (correctness does not depend on timing) with a warning that its
  times may be slower than the kernel's own;
* a ``device_out_of_memory`` (already the infrastructure's) names the other job's
  processes and the memory each held, which the sandbox itself cannot see.

Correctness failures, scan denials, limits and integrity findings are unaffected. Which
codes are timing verdicts is a fact of each code's catalogue entry (``timing``:
:data:`sandbox.contract.codes.TIMING_CODES`).
"""

from __future__ import annotations

from grader.backends.base import SandboxOutcome
from grader.report.model import Report, ReportError
from sandbox.contract import codes


def account_for_shared_device(report: Report, outcome: SandboxOutcome) -> None:
    if not outcome.device_shared_by:
        return
    who = ", ".join(outcome.device_shared_by)
    why = (f"another job computed on this sandbox's GPU during the run ({who}, seen by the "
           "host's NVML; not a process of the sandbox)")
    for i, e in enumerate(report.errors):
        if e.code == "device_out_of_memory":
            report.errors[i] = e.model_copy(update={
                "message": f"{e.message} Seen by the host's NVML on this GPU: {who}."[:4000],
                "detail": {**e.detail, "other_jobs": list(outcome.device_shared_by)}})
        if e.origin == "candidate" and codes.is_timing(e.code):
            report.errors[i] = ReportError(
                stage=e.stage, code="foreign_gpu_process", origin="infrastructure",
                message=f"{why}: its kernels time-slice with the candidate's, so "
                        f"'{e.code}' cannot be laid on the candidate ({e.message})"[:4000],
                detail={**e.detail, "replaced": e.code})
    acc = report.acceptance
    if acc is not None and not any(e.code == "foreign_gpu_process" and e.stage == "accept"
                                   for e in report.errors):
        acc.accepted = False
        acc.reason = f"not decided: {why}"
        report.errors.append(ReportError(
            stage="accept", code="foreign_gpu_process", origin="infrastructure",
            message=f"{why}: no acceptance is decided beside another job's kernels; retry"))
    report.warnings.append(f"{why}: the timings may be slower than the kernel's own")
