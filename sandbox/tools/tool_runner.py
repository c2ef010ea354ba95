"""The runner, as started under a diagnostics tool (Nsight Compute or compute-sanitizer).

Started as ``TOOL ... python -m sandbox.tools.tool_runner [--profile-calls SKIP:COUNT]
[--private-args] -- python -m sandbox.runner.boot --read-fd ...``: everything after
``--`` is the ordinary runner's command line (``sandbox.launcher.proc.runner_argv``), read with the
runner's own parser. The process is locked down exactly as ``sandbox.runner.boot`` does
(own uid checked, no capability, seccomp) before torch is imported. Two changes to the
ordinary runner, both for the tool's sake and never on a timed path:

* ``--profile-calls SKIP:COUNT``: the profiler is switched on (``cudaProfilerStart``) only
  around calls SKIP+1 .. SKIP+COUNT, so JIT compilation and autotuning launches of the
  first calls are not profiled (ncu runs with ``--profile-from-start off``);
* ``--private-args``: every call runs the candidate on private, exactly sized copies of
  its arguments (the allocator's caching is off, ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``),
  then copies them back. compute-sanitizer checks accesses against allocations, and the
  judge's buffer is one allocation for all tensors: an overrun into a neighbour's slot or
  into alignment slack would be invisible on the shared buffer itself.

This code runs in the candidate's process and can be subverted by it; what it enables is
advice and an extra check, never the only check (the judge's checks still decide).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.launcher import harden

if TYPE_CHECKING:
    import torch


def on_private_copies(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> Any:
    """Run ``fn`` on exact-size clones of ``args``; copy every clone back (inputs too, so
    the judge still sees an input the candidate mutated)."""
    private = [a.clone() for a in args]
    try:
        return fn(*private)
    finally:
        for a, p in zip(args, private, strict=True):
            a.copy_(p)


def parse(argv: list[str]) -> tuple[argparse.Namespace, tuple[int, int] | None, bool]:
    """(runner arguments, profile window, private-args flag) from this module's argv."""
    from sandbox.launcher.proc import RUNNER_ENTRY, runner_arg_parser

    if "--" not in argv:
        raise SystemExit("tool_runner: missing '--' before the runner's command line")
    cut = argv.index("--")
    own = argparse.ArgumentParser(prog="sandbox.tools.tool_runner")
    own.add_argument("--profile-calls", default=None)
    own.add_argument("--private-args", action="store_true")
    mine = own.parse_args(argv[:cut])
    rest = argv[cut + 1:]
    if RUNNER_ENTRY not in rest:
        raise SystemExit(f"tool_runner: the runner's command line does not start {RUNNER_ENTRY}")
    rest = rest[rest.index(RUNNER_ENTRY) + 1:]  # drop "<python> -m sandbox.runner.boot"
    window = None
    if mine.profile_calls is not None:
        skip, _, count = str(mine.profile_calls).partition(":")
        window = (int(skip), int(count))
    return runner_arg_parser().parse_args(rest), window, bool(mine.private_args)


def serve(args: argparse.Namespace, window: tuple[int, int] | None, private: bool) -> None:
    import torch

    from sandbox.runner.main import Runner

    class ToolRunner(Runner):
        calls = 0

        def setup(self, msg: dict[str, Any]) -> dict[str, Any]:
            reply = super().setup(msg)
            if self.timer is not None:  # the tool sees every kernel: no sleep kernel for it
                self.timer.lead_off()
                reply["lead_us"] = 0.0
            return reply

        def load(self) -> dict[str, Any]:
            reply = super().load()
            if reply.get("ok") and private:
                fn = self.fn
                self.fn = lambda *a: on_private_copies(fn, a)
            return reply

        def call(self, msg: dict[str, Any]) -> dict[str, Any]:
            if msg.get("noop") or window is None:
                return super().call(msg)
            self.calls += 1
            skip, count = window
            if not skip < self.calls <= skip + count:
                return super().call(msg)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()  # type: ignore[no-untyped-call]
            try:
                return super().call(msg)
            finally:
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]

    ToolRunner(args).serve()


def main() -> None:
    args, window, private = parse(sys.argv[1:])
    try:
        harden.lock_down_runner()  # as sandbox.runner.boot: before torch is imported
    except harden.LockdownFailed as e:
        sys.stderr.write(f"kgrader-runner: lockdown failed: {e}\n")
        sys.stderr.flush()
        os._exit(harden.LOCKDOWN_EXIT)
    serve(args, window, private)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
