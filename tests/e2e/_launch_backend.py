"""A bwrap backend that starts the judge through ``sandbox.launch`` (the new launch contract).

Until both real backends run the launcher themselves, the isolation tests use this: the
real bwrap backend's namespaces and binds, but instead of ``setpriv`` dropping to uid 65534,
bwrap keeps uid 0 with exactly CAP_SETUID, CAP_SETGID and CAP_SYS_ADMIN and runs
``python3 -m sandbox.launch``, which drops the rest itself.
"""

from __future__ import annotations

from grader.backends.base import SandboxSpec
from grader.backends.bwrap import BwrapBackend

LAUNCH_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN")


class LaunchingBwrap(BwrapBackend):
    def __init__(self, then: str | None = None, extra_caps: tuple[str, ...] = ()):
        super().__init__()
        self.then = then
        self.extra_caps = extra_caps

    def argv(self, spec: SandboxSpec) -> list[str]:
        a = super().argv(spec)
        cut = a.index("--")  # bwrap's options end here; setpriv and the judge follow
        caps = ["--cap-drop", "ALL"]
        for cap in (*LAUNCH_CAPS, *self.extra_caps):
            caps += ["--cap-add", cap]
        tail = ["--then", self.then] if self.then else []
        return [*a[:cut], *caps, "--", self.python(), "-m", "sandbox.launch", *tail]
