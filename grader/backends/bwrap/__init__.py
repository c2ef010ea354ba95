"""The bwrap backend (the embedded default), one module per concern:

* :mod:`.hoststeps` -- the kernel steps taken in the child, as root, before ``exec bwrap``;
* :mod:`.supervise` -- start, drain, watch, wait, kill and classify one sandbox;
* :mod:`.backend` -- :class:`BwrapBackend`: the command line, the launch, its lifecycle.
"""

from grader.backends.bwrap.backend import BwrapBackend, _mkdirs, _python_roots

__all__ = ["BwrapBackend", "_mkdirs", "_python_roots"]
