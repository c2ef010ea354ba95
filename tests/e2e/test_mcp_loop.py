"""A model-driven loop through a real MCP client that reads no file: it learns the task from
``kgrader://task`` and ``describe_task``, writes its kernel from that description, and
reads its speed-up from the tools' answers.

``kgrader mcp`` (the installed console script) serves one workspace over stdio, with the
real bubblewrap sandbox, the CPU device and Triton's interpreter. The loop's "model" is a
template for an elementwise Triton kernel: everything task-specific in the source it
sends (the entry point and its argument order, which tensors are read and which one is
written, the output dtype, the block size from the tune shapes, the operation from the
reference's source) is taken from the description; a template that assumed any of them
would not pass the hidden shapes. It then calls compile_kernel, bench_kernel and
accept_candidate and reads the speed-up over the reference. The tools it was
offered are the ones `kgrader tools schema` prints, a bad argument and an unknown tool
come back as typed tool errors, and nothing it read names a hidden shape.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from grader.agent import tools
from grader.errors import SandboxUnavailableError

from .conftest import AGENT_TRIES, agent_retries

pytestmark = pytest.mark.bwrap

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"
HIDDEN = json.loads((TASK / "task.json").read_text())["shapes"]["hidden"]  # to check leaks only
# The installed console script beside this interpreter (a pyenv shim would need $HOME).
KGRADER = Path(sys.executable).with_name("kgrader")
KGRADER_ARGV = [str(KGRADER)] if KGRADER.is_file() else [sys.executable, "-m", "grader.cli"]

TEMPLATE = '''"""Elementwise kernel for {task}, written from describe_task: {signature}."""

import triton
import triton.language as tl

BLOCK = {block}


@triton.jit
def _elementwise({ptrs}, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
{loads}
    tl.store({out}_ptr + offs, ({expr}).to(tl.{dtype}), mask=mask)


def {entry}({args}):
    n = {out}.numel()
    _elementwise[(triton.cdiv(n, BLOCK),)]({args}, n, BLOCK=BLOCK)
'''
OPS = {"add": "+", "mul": "*", "sub": "-"}
TL_DTYPES = {"float16": "float16", "float32": "float32", "bfloat16": "bfloat16"}


def write_kernel(task: dict[str, Any]) -> str:
    """The "model": an elementwise kernel whose every task-specific part comes from ``task``."""
    assert task["contract"] == "dps" and not task["returns_outputs"], task["contract_text"]
    tensors = sorted(task["tensors"], key=lambda t: t["position"])
    ins = [t for t in tensors if t["role"] == "input"]
    outs = [t for t in tensors if t["role"] == "output"]
    assert len(outs) == 1 and all(t["shape"] == outs[0]["shape"] for t in ins), \
        "the template is for one output of the inputs' shape"
    out = outs[0]
    op = re.search(r"torch\.(add|mul|sub)\(", task["reference_source"] or "")
    assert op is not None, "the reference is not an elementwise op this template knows"
    numels = [math.prod(b[d] for d in out["shape"]) for b in task["shapes"]["tune"]]
    block = min(1024, 1 << (max(numels).bit_length() - 1))
    names = [t["name"] for t in tensors]
    return TEMPLATE.format(
        task=task["task"], signature=task["signature"], block=block,
        ptrs=", ".join(f"{n}_ptr" for n in names), out=out["name"],
        loads="\n".join(f"    {t['name']} = tl.load({t['name']}_ptr + offs, mask=mask)"
                        for t in ins),
        expr=f" {OPS[op.group(1)]} ".join(t["name"] for t in ins),
        dtype=TL_DTYPES[out["dtype"]], entry=task["entrypoint"], args=", ".join(names))


@pytest.fixture(scope="module", autouse=True)
def _bwrap() -> Iterator[None]:
    from grader.backends.bwrap import BwrapBackend

    try:
        BwrapBackend().check_available("cpu")
    except SandboxUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap unavailable: {e}")
        pytest.skip(f"bwrap unavailable: {e}")
    yield


def _no_hidden_shape(payload: Any) -> None:
    text = json.dumps(payload)
    for b in HIDDEN:
        assert json.dumps(b) not in text
        assert not all(f'"{k}": {v}' in text for k, v in b.items() if v >= 2), b


def test_a_scripted_model_writes_its_kernel_from_the_description_and_reads_its_speedup(
        tmp_path: Path) -> None:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp_types import TextResourceContents

    ws = tools.init_workspace(tmp_path / "ws", TASK, backend="bwrap", device="cpu")
    env = {"KGRADER_HARDWARE": str(tmp_path / "hardware.json"), "PATH": os.environ["PATH"],
           "HOME": str(tmp_path), "KGRADER_EXPERIENCE": str(tmp_path / "exp.sqlite")}
    printed = subprocess.run([*KGRADER_ARGV, "tools", "schema"], capture_output=True,
                             text=True, check=True, env=env, cwd=tmp_path, timeout=120)
    cli_schemas = {f["function"]["name"]: (f["function"]["description"],
                                           f["function"]["parameters"])
                   for f in json.loads(printed.stdout)}
    params = StdioServerParameters(command=KGRADER_ARGV[0],
                                   args=[*KGRADER_ARGV[1:], "mcp", "--workspace", str(ws.root)],
                                   env=env, cwd=str(tmp_path))
    notes: list[str] = []
    tries: list[tuple[str, list[dict[str, Any]]]] = []  # each timed call's errors, for a failure

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    async def loop() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with Client(params, read_timeout_seconds=600) as client:
            listed = await client.list_tools()
            seen["tools"] = {t.name: (t.description, t.input_schema) for t in listed.tools}
            content = (await client.read_resource("kgrader://task")).contents[0]
            assert isinstance(content, TextResourceContents)
            task = json.loads(content.text)
            seen["task"] = task
            seen["described"] = (await client.call_tool("describe_task", {})).structured_content
            source = write_kernel(task)
            seen["source"] = source

            async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                got = await client.call_tool(name, args, progress_callback=on_progress)
                return {"is_error": got.is_error, **dict(got.structured_content or {})}

            async def timed(name: str) -> dict[str, Any]:
                res: dict[str, Any] = {}
                for _ in range(AGENT_TRIES):  # an agent retries what the host's load made
                    res = await call(name, {"source": source})
                    tries.append((name, res["errors"]))
                    if not agent_retries(res["errors"]):
                        break
                return res

            seen["bad_argument"] = await call("bench_kernel", {"source": source, "shape": 1})
            seen["unknown_tool"] = await call("run_everything", {})
            seen["compile"] = await call("compile_kernel", {"source": source})
            seen["bench"] = await timed("bench_kernel")
            seen["accept"] = await timed("accept_candidate")
        return seen

    seen = anyio.run(loop)
    # The tools offered over MCP are exactly the ones the CLI prints.
    assert seen["tools"] == cli_schemas
    task = seen["task"]
    assert seen["described"]["tensors"] == task["tensors"] and task["ok"]
    source = seen["source"]
    assert "def launch(x, y, out):" in source and "(x + y).to(tl.float16)" in source
    assert "BLOCK = 1024" in source

    bad = seen["bad_argument"]
    assert bad["is_error"] and bad["stage"] == "arguments"
    assert [(e["code"], e["field"], e["origin"]) for e in bad["errors"]] == [
        ("bad_argument", "shape", "usage")]  # the caller's, not the candidate's
    unknown = seen["unknown_tool"]
    assert unknown["is_error"] and unknown["stage"] == "usage", unknown
    assert [(e["code"], e["origin"]) for e in unknown["errors"]] == [("unknown_tool", "usage")]
    assert "unknown tool 'run_everything'" in unknown["errors"][0]["message"]

    assert seen["compile"]["ok"] and seen["compile"]["compiled"], seen["compile"]
    bench = seen["bench"]
    assert bench["ok"] and bench["correct"], tries  # hidden shapes included
    assert isinstance(bench["median_ms"], float) and bench["median_ms"] > 0
    # The speed-up over the reference, measured in the same sandbox run; on the CPU a call
    # as short as torch.add can sit at the judge clock's floor: then null, with the reason.
    if bench["speedup_vs_reference"] is not None:
        assert bench["speedup_vs_reference"] > 0 and bench["reference_ms"] > 0
        assert bench["reference_source"].startswith("paired")
    else:
        assert bench["unmeasured"]["speedup_vs_reference"], bench["unmeasured"]

    # The first correct kernel becomes best.py; its speed-up over the reference is read
    # from the answer (the reference's time from bench's pair), and a slower one says so.
    accept = seen["accept"]
    assert accept["ok"] and accept["accepted"] and accept["baseline"] == "none", tries
    if bench["speedup_vs_reference"] is not None:
        s = accept["speedup_vs_reference"]
        assert isinstance(s, float) and s > 0, accept["unmeasured"]
        assert accept["slower_than_reference"] is (s < 1.0)
    if accept["slower_than_reference"]:
        assert any("slower than the task's reference" in w for w in accept["warnings"])

    assert any(m.startswith("bench_kernel: running") for m in notes), notes
    assert any(m.startswith("accept_candidate: done") for m in notes), notes
    for k, payload in seen.items():
        if k != "tools":
            _no_hidden_shape(payload)
