"""Runtime audit of torch ops inside a kernel-only launch (runner side).

A ``triton-only`` task wants the answer computed by the candidate's Triton kernels. The
static scan denies torch compute by name, but Python is dynamic (a fallback in an
``except`` branch, an op reached through data), so the runner also watches what torch
actually executes while ``launch`` runs: a :class:`TorchDispatchMode` entered around each
launch records every aten op. Triton launches do not pass through the dispatcher; torch
ops do.

What is legal is an allow-list: allocation, views, metadata, fills (``zero_``, ``fill_``:
a split-K kernel accumulates into a zeroed output) and copies (``copy_``, ``clone``,
``contiguous``, dtype conversion), none of which computes an answer. Any other op is
compute, and compute in a kernel-only launch fails the run (``torch_compute_in_launch``)
whether its result is written into an output directly, copied into one, or handed to a
Triton kernel that copies it: a result that cannot reach an output would be pointless,
so the audit does not try to follow data and fails closed.

The mode object lives only in the runner's serve loop (a local of a running frame);
the launch is checked to leave the dispatch-mode stack as it found it, so a candidate
that pops the mode to hide its ops fails too (``op_audit_tampered``). Native code could
still call kernels without the dispatcher; the judge's other checks remain the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from sandbox.runner.twin import Twins, mirror, tensor_args

# aten overload packets (``torch.ops.aten.<name>``) that never compute an answer.
ALLOWED = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "arange", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "resize_",
    # views and metadata
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "slice", "select", "unsqueeze", "squeeze", "flatten", "unflatten", "split", "split_with_sizes",
    "chunk", "narrow", "unbind", "alias", "detach", "view_as", "expand_as", "movedim",
    "diagonal", "unfold", "_reshape_alias", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_contiguous", "stride", "size", "numel", "dim", "is_same_size",
    "_local_scalar_dense", "item", "set_", "record_stream",
    # fills and copies (no arithmetic on values)
    "fill_", "zero_", "fill", "copy_", "clone", "contiguous", "_to_copy", "to", "_copy_from",
    "_copy_from_and_resize", "copy",
})


# Allowed ops that are not re-run on the twins: reads of one value (the host's own business,
# on a decoy) and storage rebinding (twins follow storages, not tensor objects).
_NOT_MIRRORED = frozenset({"_local_scalar_dense", "item", "set_", "record_stream", "sym_size",
                           "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous",
                           "stride", "size", "numel", "dim", "is_same_size"})


class OpAudit(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records the aten ops of one launch; :meth:`compute_ops` lists the forbidden ones.

    With ``twins`` (a kernel-only destination-passing call, :mod:`sandbox.runner.twin`), every
    allowed op that touches a decoy is mirrored onto the kernels' side."""

    def __init__(self, twins: Twins | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[str] = []
        self.twins = twins
        self.touched: list[str] = []  # ops host code ran on the kernels' side

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        self.ops.append(name)
        kwargs = kwargs or {}
        tw = self.twins
        if tw is not None and tw.real and any(tw.is_real(t) for t in tensor_args(args, kwargs)):
            # Host code can hold the kernels' side only by going around the boundary
            # (sandbox.runner.boundary): a scalar read or a copy of it is compute all the same.
            self.touched.append(name)
        out = func(*args, **kwargs)
        if self.twins is not None and name in ALLOWED and name not in _NOT_MIRRORED:
            mirror(self.twins, func, args, kwargs, out)
        return out

    def compute_ops(self) -> list[str]:
        return sorted({op for op in self.ops if op not in ALLOWED} |
                      {f"{op} on the kernels' tensors" for op in self.touched})


def audited(call: Callable[[], Any], twins: Twins | None = None) -> tuple[Callable[[], Any], OpAudit]:
    """Wrap ``call`` so that it runs under a fresh audit; check the mode stack after."""
    audit = OpAudit(twins)

    def run() -> Any:
        depth = len(_get_current_dispatch_mode_stack())
        tampered = False
        try:
            with audit:
                out = call()
                stack = _get_current_dispatch_mode_stack()
                tampered = len(stack) != depth + 1 or stack[-1] is not audit
                if tampered:
                    raise AuditTampered("the launch changed the torch dispatch-mode stack")
        except RuntimeError:
            if tampered:  # leaving the mode on a stack the launch emptied raises torch's own
                raise AuditTampered("the launch changed the torch dispatch-mode stack") from None
            raise
        return out

    return run, audit


def _skip_dynamo_import() -> None:
    """Spare the first audited launch an import of ``torch._dynamo`` (seen: 1.0-1.6 s here,
    several seconds on a GPU host, every evaluation).

    torch wraps every ``__torch_dispatch__`` in ``torch._disable_dynamo``, which imports
    dynamo (and sympy) on the first dispatch just to mark the method "not traced". Marking
    is moot while dynamo is not imported: nothing can be compiling then. The wrapper's
    cached marker is set to a function that calls the method directly, or, once anything
    has imported dynamo (a candidate using ``torch.compile``), dynamo's own ``disable``.
    Where torch's internals differ, nothing is set and the import happens as before.
    """
    import sys

    raw = getattr(OpAudit.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
    if raw is None or not callable(raw):
        return
    disabled: list[Callable[..., Any]] = []

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None:
            return raw(*args, **kwargs)
        if not disabled:
            disabled.append(dynamo.disable(raw, recursive=True))
        return disabled[0](*args, **kwargs)

    raw.__dynamo_disable = dispatch


_skip_dynamo_import()


class AuditTampered(RuntimeError):
    """The candidate removed or replaced the audit during its launch."""


def report(audit: OpAudit) -> dict[str, Any]:
    """What the runner tells the judge (the judge decides; the candidate could lie here
    only by reaching into the runner's frame, which the static policy denies)."""
    return {"ops": sorted(set(audit.ops))[:64], "compute_ops": audit.compute_ops()[:64]}


__all__ = ["ALLOWED", "AuditTampered", "OpAudit", "audited", "report"]
