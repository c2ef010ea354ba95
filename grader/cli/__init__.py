"""The command line: thin wrappers that parse arguments, call the API and print.

``app`` holds the root group and ``kgrader run``; each other module registers one group
of commands (``docker``, ``leaderboard``, ``records``, ``scan``, ``tools``).
"""

from grader.cli.app import entry, main

__all__ = ["entry", "main"]
