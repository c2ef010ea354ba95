"""One line for a kgrader JSON report (bench scripts): ok, stage/code, median ms, message."""

from __future__ import annotations

import json
import sys


def line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        return f"unreadable ({type(e).__name__})"
    e = (r.get("errors") or [{}])[0]
    t = (r.get("timing") or {}).get("median_ms")
    acc = r.get("acceptance") or {}
    extra = f" accepted={acc.get('accepted')}" if acc else ""
    msg = (e.get("message") or "").replace("\n", " ")[:160]
    return f"{r.get('ok')} {e.get('stage')}/{e.get('code')} median_ms={t}{extra} {msg}"


if __name__ == "__main__":
    print(line(sys.argv[1]))
