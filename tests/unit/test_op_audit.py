"""The runner's torch-op audit (sandbox/runner/op_audit.py), on real torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from sandbox.runner.op_audit import AuditTampered, audited, report


def test_compute_is_recorded_and_allocation_views_copies_are_not() -> None:
    def launch() -> None:
        out = torch.empty(8)
        out.zero_()
        out.view(2, 4).copy_(torch.ones(2, 4))
        out.add_(1)

    run, audit = audited(launch)
    run()
    r = report(audit)
    assert r["compute_ops"] == ["add_"]
    assert {"empty", "zero_", "view", "copy_"} <= set(r["ops"])


def test_the_first_audited_launch_does_not_import_dynamo() -> None:
    """torch marks dispatch modes "not traced" through torch._dynamo, an import that cost
    1-1.6 s on this machine's first audited launch of every evaluation; it is skipped
    while dynamo is not loaded, and the audit still sees every op."""
    code = ("import sys, torch\nfrom sandbox.runner.op_audit import audited\n"
            "run, audit = audited(lambda: torch.ones(3) * 2)\nrun()\n"
            "print(audit.compute_ops(), 'torch._dynamo' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["['mul']", "False"]


def test_once_dynamo_is_loaded_the_audit_still_records() -> None:
    import torch._dynamo

    run, audit = audited(lambda: torch.ones(3).sum())
    run()
    assert audit.compute_ops() == ["sum"]


def test_a_launch_that_pops_the_mode_is_caught() -> None:
    from torch.utils._python_dispatch import _pop_mode_temporarily

    kept = []

    def launch() -> None:
        ctx = _pop_mode_temporarily()
        ctx.__enter__()  # leave the stack without the audit (kept alive: no restore)
        kept.append(ctx)

    run, _ = audited(launch)
    with pytest.raises(AuditTampered):
        run()
