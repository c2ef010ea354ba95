"""The agent tools' one definition (grader/agent/schemas.py): the MCP server lists exactly
what ``kgrader tools schema`` prints, and a bad argument is a typed ``bad_argument``
error, through the Python API and through a real in-process MCP client (no sandbox)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from grader.agent import tools
from grader.agent.mcp_server import TASK_URI, build_server
from grader.agent.schemas import (
    TOOL_NAMES,
    BadArgument,
    UnknownTool,
    check_args,
    mcp_tools,
    tool_schemas,
)

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"


@pytest.fixture()
def ws(tmp_path: Path) -> tools.Workspace:
    return tools.init_workspace(tmp_path / "ws", TASK, backend="bwrap", device="cpu")


def _mcp(ws: tools.Workspace, body: Any) -> Any:
    from mcp.client import Client

    async def run() -> Any:
        async with Client(build_server(ws.root)) as client:
            return await body(client)
    return anyio.run(run)


def test_mcp_tools_list_is_the_cli_schema_exactly(ws: tools.Workspace) -> None:
    async def body(client: Any) -> Any:
        return (await client.list_tools()).tools

    listed = _mcp(ws, body)
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "tools", "schema"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    cli = {f["function"]["name"]: f["function"] for f in json.loads(proc.stdout)}
    assert [t.name for t in listed] == list(TOOL_NAMES) == list(cli)
    for t in listed:
        assert t.description == cli[t.name]["description"], t.name
        assert t.input_schema == cli[t.name]["parameters"], t.name
    # the search tool keeps its descriptions, enums and bounds
    search = next(t for t in listed if t.name == "search_experience").input_schema["properties"]
    assert search["limit"]["maximum"] == 20 and search["limit"]["minimum"] == 1
    assert "accept" in search["stage"]["enum"] and search["text"]["description"]
    assert mcp_tools()[0]["inputSchema"] == tool_schemas()[0]["function"]["parameters"]


@pytest.mark.parametrize(("tool", "args", "field", "words"), [
    ("search_experience", {"limit": 0}, "limit", ">= 1"),
    ("search_experience", {"limit": True}, "limit", "type integer"),
    ("search_experience", {"stage": "nope"}, "stage", "one of"),
    ("search_experience", {"dims": ["N>>3"]}, "dims", "not a shape filter"),
    ("search_experience", {"colour": "red"}, "colour", "unknown argument"),
    ("bench_kernel", {}, "source", "required"),
    ("bench_kernel", {"source": ""}, "source", "at least 1"),
    ("compile_kernel", {"source": 3}, "source", "type string"),
])
def test_bad_arguments_are_typed_with_field_and_reason(tool: str, args: dict[str, Any],
                                                      field: str, words: str) -> None:
    with pytest.raises(BadArgument) as info:
        check_args(tool, args)
    err = info.value.as_error()
    assert (err["code"], err["field"], err["stage"]) == ("bad_argument", field, "arguments")
    assert words in err["message"] and "\n" not in err["message"]


def test_mcp_bad_argument_is_a_tool_error_not_pydantic_text(ws: tools.Workspace) -> None:
    async def body(client: Any) -> Any:
        return (await client.call_tool("search_experience", {"limit": 99}),
                await client.call_tool("bench_kernel", {"source": 7}))

    for res in _mcp(ws, body):
        assert res.is_error
        payload = res.structured_content
        assert payload["ok"] is False and payload["stage"] == "arguments"
        (err,) = payload["errors"]
        assert err["code"] == "bad_argument" and err["origin"] == "usage" and err["field"]
        text = res.content[0].text
        assert "pydantic" not in text and "http" not in text and "sandbox" not in text
        assert json.loads(text) == payload


def test_an_unknown_tool_and_a_missing_argument_are_the_callers_fault(ws: tools.Workspace) -> None:
    async def body(client: Any) -> Any:
        return (await client.call_tool("run_everything", {}),
                await client.call_tool("bench_kernel", {}))

    unknown, missing = (r.structured_content for r in _mcp(ws, body))
    assert unknown["stage"] == "usage" and [(e["code"], e["origin"], e["stage"])
                                            for e in unknown["errors"]] == [
        ("unknown_tool", "usage", "usage")]
    assert "unknown tool 'run_everything' (one of describe_task" in unknown["errors"][0]["message"]
    assert [(e["code"], e["origin"], e["field"]) for e in missing["errors"]] == [
        ("bad_argument", "usage", "source")]
    with pytest.raises(UnknownTool) as info:  # the Python API raises the same typed error
        tools.call_tool(ws, "run_everything", {})
    assert info.value.as_error()["origin"] == "usage"


def test_python_api_search_with_a_bad_value_is_bad_argument_not_infrastructure(
        ws: tools.Workspace) -> None:
    res = tools.search_experience(ws, stage="nope")
    assert res["ok"] is False and res["stage"] == "arguments"
    assert res["errors"][0]["code"] == "bad_argument" and res["errors"][0]["field"] == "stage"


def test_describe_task_tool_and_resource_agree_and_progress_is_sent(ws: tools.Workspace) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, message))

    async def body(client: Any) -> Any:
        res = await client.call_tool("describe_task", {}, progress_callback=on_progress)
        resources = await client.list_resources()
        read = await client.read_resource(TASK_URI)
        return res, [str(r.uri) for r in resources.resources], read

    res, uris, read = _mcp(ws, body)
    assert not res.is_error and res.structured_content["signature"] == "launch(x, y, out)"
    assert uris == [TASK_URI]
    content = read.contents[0]
    assert content.mime_type == "application/json"
    from_resource = json.loads(content.text)
    assert from_resource["tensors"] == res.structured_content["tensors"]
    assert from_resource["shapes"] == res.structured_content["shapes"]
    assert progress and progress[-1][1] is not None and "describe_task: done" in progress[-1][1]


def test_a_kgrader_bug_is_internal_error_without_its_text(ws: tools.Workspace,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*a: Any, **k: Any) -> dict[str, Any]:
        raise RuntimeError("shape N=1031 seen")  # text a client must not get

    monkeypatch.setattr(tools, "call_tool", broken)

    async def body(client: Any) -> Any:
        return await client.call_tool("describe_task", {})

    res = _mcp(ws, body)
    (err,) = res.structured_content["errors"]
    assert (err["code"], err["origin"]) == ("internal_error", "infrastructure")
    assert "1031" not in res.content[0].text
