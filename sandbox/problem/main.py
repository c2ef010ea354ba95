"""The problem process's entry point: lock down first, then serve the judge.

Started by :class:`sandbox.problem.handle.ProblemHandle` under a runner uid of its own.
The lockdown (own uid, no capability, no_new_privs, private HOME, the runner's seccomp
filter) comes before torch or any problem code is imported; a failure exits with
:data:`sandbox.launcher.harden.LOCKDOWN_EXIT` before anything untrusted ran. Then
:mod:`sandbox.problem.serve` (which imports torch) answers the judge's requests.
"""

from __future__ import annotations

import argparse
import os
import sys

from sandbox.launcher import driver, harden


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandbox.problem.main")
    p.add_argument("--read-fd", type=int, required=True)
    p.add_argument("--write-fd", type=int, required=True)
    p.add_argument("--fd-sock", type=int, required=True)
    p.add_argument("--device", default="cpu")
    return p


def main() -> None:
    args = arg_parser().parse_args()
    try:
        harden.lock_down_runner()
    except harden.LockdownFailed as e:
        sys.stderr.write(f"kgrader-problem: lockdown failed: {e}\n")
        sys.stderr.flush()
        os._exit(harden.LOCKDOWN_EXIT)
    cuinit = driver.start(args.device)  # beside torch's import: no context made
    # Imported only now, confined: it imports torch, and then the problem's own code.
    from sandbox.problem.serve import serve

    driver.wait(cuinit)
    serve(args.read_fd, args.write_fd, args.fd_sock, args.device)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
