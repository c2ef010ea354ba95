"""Parsing the output of Nsight Compute and compute-sanitizer into plain dicts (stdlib only).

Both texts are written by a tool running *as the runner*, in a folder the runner can write:
they are untrusted data. The parsers therefore accept only what they expect: bounded
sizes, known metric names, finite numbers (thousands separators allowed), short printable
names; anything else is dropped and counted, never trusted and never raised.

``ncu --csv --page raw`` prints (Nsight Compute 2025.3, seen on an H200)::

    ==PROF== Connected to process 484 (/usr/bin/python3.12)
    "ID","Process ID","Process Name","Host Name","Kernel Name",...,"gpu__time_duration.sum",...
    "","","","","",...,"ns",...                      <- units row
    "0","484","python3.12","127.0.0.1","cp",...,"159,616",...

compute-sanitizer prints blocks such as::

    ========= Invalid __global__ write of size 4 bytes
    =========     at oob+0x140 in k.py:9
    =========     by thread (40,0,0) in block (15,0,0)
    =========     Access to 0x7f380a801fa0 is out of bounds
    =========     and is 1 bytes after the nearest allocation at 0x7f380a801000 of size 4,000 bytes
    ...
    ========= ERROR SUMMARY: 25 errors
"""

from __future__ import annotations

import csv
import math
import re
from typing import Any

MAX_KERNELS = 256
MAX_NAME = 300
MAX_FINDINGS = 20
MAX_MESSAGE = 500

# Base units kept as they are; others scaled to them (time -> ns, size -> bytes).
_UNIT_SCALE: dict[str, float] = {
    "": 1.0, "%": 1.0, "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6,
    "msecond": 1e6, "s": 1e9, "second": 1e9, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6,
    "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024.0, "MiB": 1 << 20,
    "register/thread": 1.0, "byte/block": 1.0, "Kbyte/block": 1e3, "block": 1.0, "warp": 1.0,
    "thread": 1.0, "inst": 1.0, "cycle": 1.0, "SM": 1.0, "sector": 1.0, "request": 1.0,
}
_NUMBER = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?$", re.ASCII)
_METRIC_NAME = re.compile(r"^[a-z0-9_]+(?:__[a-z0-9_]+)(?:\.[a-z0-9_]+)*$")
# ncu's own lines that say the counters cannot be read: (pattern, reason for `unmeasured`).
_NCU_REFUSALS = (
    ("ERR_NVGPUCTRPERM", "the driver refuses access to the GPU performance counters for "
                         "non-admin users (ERR_NVGPUCTRPERM; NVreg_RestrictProfilingToAdminUsers=1)"),
    ("LibraryNotLoaded", "Nsight Compute could not load its profiling library in this runtime "
                         "(LibraryNotLoaded; seen under gVisor)"),
    ("not supported", "Nsight Compute does not support this device or runtime"),
)


def _printable(text: str, limit: int) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:limit]


def parse_number(text: str) -> float | None:
    """A finite number as ncu prints it (``1,980,000``, ``37.44``), else ``None``."""
    t = text.strip()
    if not _NUMBER.match(t):
        return None
    value = float(t.replace(",", ""))
    return value if math.isfinite(value) else None


def wanted_metric(name: str, requested: list[str]) -> bool:
    """Whether a CSV column is one of the requested metrics (exact, or a ``regex:`` entry)."""
    if not _METRIC_NAME.match(name):
        return False
    for req in requested:
        if req.startswith("regex:"):
            if re.fullmatch(req[len("regex:"):], name):
                return True
        elif name == req:
            return True
    return False


def ncu_refusal(text: str) -> str | None:
    """The reason ncu gave for not profiling at all, if its log says so."""
    for needle, reason in _NCU_REFUSALS:
        if needle in text:
            return reason
    errors = [line for line in text.splitlines() if line.startswith("==ERROR==")]
    if errors:
        return "Nsight Compute failed: " + _printable(errors[0][len("==ERROR=="):].strip(), MAX_MESSAGE)
    return None


def parse_ncu_log(text: str, requested: list[str]) -> dict[str, Any]:
    """Kernels and their requested metrics (base units) from an ``ncu --csv --page raw`` log.

    Returns ``{"kernels": [{"id", "name", "block", "grid", "metrics"}], "messages": [...],
    "dropped": n}``: ``messages`` are ncu's own ``==PROF==``/``==WARNING==``/``==ERROR==``
    lines (capped), ``dropped`` counts values that were not finite numbers in a known unit.
    """
    messages: list[str] = []
    csv_lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("=="):
            if len(messages) < 20:
                messages.append(_printable(line, MAX_MESSAGE))
        elif line.startswith('"'):
            csv_lines.append(line)
    out: dict[str, Any] = {"kernels": [], "messages": messages, "dropped": 0}
    rows: list[list[str]] = []
    for line in csv_lines:  # one record per physical line: a broken line spoils only itself
        try:
            rows.append(next(csv.reader([line], strict=True)))
        except (csv.Error, StopIteration):
            out["dropped"] += 1
    if len(rows) < 2 or "Kernel Name" not in rows[0]:
        return out
    header, units = rows[0], rows[1]
    if len(units) != len(header) or any(parse_number(u) is not None for u in units if u):
        units = [""] * len(header)  # no units row: values are taken as printed
        body = rows[1:]
    else:
        body = rows[2:]
    col = {name: i for i, name in enumerate(header)}
    keep = [(i, name) for i, name in enumerate(header) if wanted_metric(name, requested)]
    for row in body[:MAX_KERNELS]:
        if len(row) != len(header):
            out["dropped"] += 1
            continue
        metrics: dict[str, float] = {}
        for i, name in keep:
            value, unit = parse_number(row[i]), units[i]
            if value is None or unit not in _UNIT_SCALE:
                out["dropped"] += int(row[i].strip() not in ("", "n/a"))
                continue
            metrics[name] = value * _UNIT_SCALE[unit]
        kid = parse_number(row[col["ID"]]) if "ID" in col else None
        out["kernels"].append({
            "id": int(kid) if kid is not None else len(out["kernels"]),
            "name": _printable(row[col["Kernel Name"]], MAX_NAME),
            "block": _printable(row[col["Block Size"]], 40) if "Block Size" in col else "",
            "grid": _printable(row[col["Grid Size"]], 40) if "Grid Size" in col else "",
            "metrics": metrics,
        })
    return out


# --- compute-sanitizer ---------------------------------------------------------------

_PREFIX = re.compile(r"^=+ ?")
_ACCESS = re.compile(r"^Invalid __(global|shared|local|generic)__ (read|write|atomic)\w* of size (\d+) bytes?")
_MISALIGNED = re.compile(r"^Misaligned (?:address|Shared or Local Address)")
_RACE = re.compile(r"^(?:Error|Warning): Race reported between (\w+) access at (.+)$")
_RACE_OTHER = re.compile(r"^and (\w+) access at (.+?)(?: \[(\d[\d,]*) hazards?\])?$")
_AT = re.compile(r"^at (.+)$")
# "oob+0x140 in k.py:9" (2025.x) or "0x140 in k.py:9:oob(float *)" (older releases).
_SITE_NEW = re.compile(r"^(?:void )?([A-Za-z_][\w:<>]*)(?:\(.*\))?\+0x[0-9a-fA-F]+(?: in (.+))?$")
_SITE_OLD = re.compile(r"^0x[0-9a-fA-F]+ in (.+?):(?:void )?([A-Za-z_][\w:<>]*)(?:\(.*\))?$")
_THREAD = re.compile(r"^by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_ADDRESS = re.compile(r"^(?:Access to|Address) (0x[0-9a-fA-F]+) is (out of bounds|misaligned|invalid)")
_NEAREST = re.compile(r"^and is (\d[\d,]*) bytes? (after|before) the nearest allocation at "
                      r"(0x[0-9a-fA-F]+) of size (\d[\d,]*) bytes")
_SUMMARY = re.compile(r"^ERROR SUMMARY: (\d[\d,]*) errors?$")  # not "... errors were not printed"
_RACE_SUMMARY = re.compile(r"^RACECHECK SUMMARY: (\d[\d,]*) hazards? displayed \((\d[\d,]*) errors?, (\d[\d,]*) warnings?\)")
_TOOL_FAIL = ("Device not supported", "Target application terminated before first instrumented",
              "Unable to find injection library", "Error: Internal Sanitizer Error",
              "Error: No attachable process found")


def _site(text: str) -> tuple[str | None, str]:
    """(kernel name, source location) of an access site as the sanitizer prints it."""
    if (m := _SITE_NEW.match(text)) is not None:
        return _printable(m.group(1), MAX_NAME), _printable(m.group(2) or text, 200)
    if (m := _SITE_OLD.match(text)) is not None:
        return _printable(m.group(2), MAX_NAME), _printable(m.group(1), 200)
    return None, _printable(text, 200)


def _finding_from_block(lines: list[str]) -> dict[str, Any] | None:
    head = lines[0]
    m = _ACCESS.match(head)
    f: dict[str, Any] = {"kind": "out_of_bounds", "space": None, "access": None, "size": None,
                         "kernel": None, "location": None, "thread": None, "block": None,
                         "address": None, "nearest": None, "text": _printable(head, 200)}
    if m:
        f.update(space=m.group(1), access=m.group(2), size=int(m.group(3)))
    elif _MISALIGNED.match(head):
        f["kind"] = "misaligned"
    elif (r := _RACE.match(head)) is not None:
        f.update(kind="race", space="shared", access=r.group(1).lower())
        f["kernel"], f["location"] = _site(r.group(2))
    else:
        return None
    for line in lines[1:]:
        if (o := _RACE_OTHER.match(line)) is not None and f["kind"] == "race":
            other = o.group(1).lower()
            if other not in str(f["access"]).split("/"):
                f["access"] = f"{f['access']}/{other}"
            if f["kernel"] is None:
                f["kernel"] = _site(o.group(2))[0]
        elif (a := _AT.match(line)) is not None and f["kernel"] is None:
            f["kernel"], f["location"] = _site(a.group(1))
        elif (t := _THREAD.match(line)) is not None:
            f["thread"] = [int(t.group(i)) for i in (1, 2, 3)]
            f["block"] = [int(t.group(i)) for i in (4, 5, 6)]
        elif (ad := _ADDRESS.match(line)) is not None:
            f["address"] = ad.group(1)[:20]
            if ad.group(2) == "misaligned":
                f["kind"] = "misaligned"
        elif (n := _NEAREST.match(line)) is not None:
            f["nearest"] = {"distance_bytes": int(n.group(1).replace(",", "")), "side": n.group(2),
                            "allocation": n.group(3)[:20],
                            "allocation_bytes": int(n.group(4).replace(",", ""))}
    return f


def parse_sanitizer_log(text: str) -> dict[str, Any]:
    """Findings of a compute-sanitizer log: ``{"findings", "error_count", "completed",
    "tool_errors", "more"}``.

    ``completed`` is true only when the log ends with the tool's summary line: a log
    without it means the tool did not finish checking, so silence proves nothing.
    """
    blocks: list[list[str]] = []
    current: list[str] = []
    error_count: int | None = None
    completed = False
    tool_errors: list[str] = []
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        body = _PREFIX.sub("", raw).strip()
        if not body:
            if current:
                blocks.append(current)
                current = []
            continue
        if (s := _SUMMARY.match(body)) is not None:
            error_count, completed = int(s.group(1).replace(",", "")), True
            continue
        if (rs := _RACE_SUMMARY.match(body)) is not None:
            error_count, completed = int(rs.group(2).replace(",", "")), True
            continue
        if any(needle in body for needle in _TOOL_FAIL) and len(tool_errors) < 5:
            tool_errors.append(_printable(body, MAX_MESSAGE))
        starts = bool(_ACCESS.match(body) or _MISALIGNED.match(body) or _RACE.match(body))
        if starts and current:
            blocks.append(current)
            current = []
        if starts or current:
            current.append(body)
    if current:
        blocks.append(current)
    findings: list[dict[str, Any]] = []
    total = 0
    for block in blocks:
        f = _finding_from_block(block)
        if f is None:
            continue
        total += 1
        if len(findings) < MAX_FINDINGS:
            findings.append(f)
    return {"findings": findings, "error_count": error_count, "completed": completed,
            "tool_errors": tool_errors, "more": max(0, total - len(findings))}
