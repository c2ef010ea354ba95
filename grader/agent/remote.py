"""The agent tools against a ``kgrader serve`` server instead of local sandboxes.

A workspace whose ``kgrader.json`` names a ``server`` sends each evaluation there, as the
submitter its token (``$KGRADER_TOKEN``, never stored in the workspace) makes it: the
server's copy of the task (``server_task``, default the workspace task's name) grades it
in its own sandboxes, and the tools read the report it returns (redacted for the
submitter, as every report an agent reads). The server owns the modes: ``compile_kernel``
runs the whole evaluation (the server has no compile-only mode; its compile stage says
whether the kernel compiled), ``bench_kernel`` is the server's ``bench`` (paired with the
task's reference), ``accept_candidate`` its ``accept`` (against the server's best).
``profile_kernel`` and ``measure_peak`` need the device itself and are refused.
"""

from __future__ import annotations

import os

from grader.agent.workspace import Workspace, WorkspaceError
from grader.errors import InfrastructureError
from grader.report.model import Report
from grader.service.client import Client

TOKEN_ENV = "KGRADER_TOKEN"
LOCAL_ONLY = ("profile_kernel", "measure_peak")


def mode_for(stages: tuple[str, ...], against_reference: bool, accept: bool) -> str:
    """The server's mode for what a tool asks (``stages``: the local ones, for the record)."""
    if against_reference:
        return "bench"
    if accept:
        return "accept"
    return "run"


def refuse_local_only(ws: Workspace, tool: str) -> None:
    """A tool that needs the device itself, in a workspace that grades on a server."""
    if ws.config.server is not None and tool in LOCAL_ONLY:
        raise WorkspaceError(f"{tool} measures this machine's device; the workspace grades on "
                             f"{ws.config.server}", hint="use a workspace without 'server'")


def evaluate_remote(ws: Workspace, source: str, mode: str) -> Report:
    """Submit ``source`` to the workspace's server, wait for its report."""
    assert ws.config.server is not None
    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise WorkspaceError(f"the workspace grades on {ws.config.server}, but ${TOKEN_ENV} "
                             "holds no token", hint="kgrader serve token add ... on the server")
    client = Client(ws.config.server, token)
    job = client.submit(ws.config.server_task or ws.spec.name, source, mode, label="agent")
    done = client.wait(str(job["id"]))
    report = done.get("report")
    if not isinstance(report, dict):
        sub = done.get("submission") or {}
        raise InfrastructureError(f"the server finished submission {job['id']} without a report "
                                  f"({sub.get('state')}: {sub.get('error')})")
    return Report.model_validate(report)
