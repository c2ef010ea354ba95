"""The conformance suite every sandbox backend must pass, shipped with kgrader (like
inspect_ai's ``self_check``), so that a backend outside this repository can run it:

* :mod:`.standin` -- the launcher's privilege drop for snippets run without a judge;
* :mod:`.host` -- proving the host unharmed: a sentinel file, leftover sandbox
  processes, the loopback;
* :mod:`.selfcheck` -- :func:`~grader.backends.conformance.selfcheck.self_check`: run a
  registered backend through the checks, return what failed.
"""
