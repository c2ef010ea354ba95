# ruff: noqa  (attack candidate: deliberately bad code)
"""Writes a forged passing /kg/out/result.json at import, then computes wrong values.

The judge's own record (written later, with the real key) must win: wrong_values.
"""

import hashlib
import hmac
import json

_payload = json.dumps({
    "stage": "benchmark", "errors": [], "warnings": [], "device": "cpu", "environment": {},
    "correctness": {"passed": True, "checks": 6, "seeds": 2},
}, sort_keys=True, separators=(",", ":"))
_mac = hmac.new(b"\x00" * 32, _payload.encode(), hashlib.sha256).hexdigest()
with open("/kg/out/result.json", "w") as _f:
    json.dump({"payload": _payload, "mac": _mac}, _f)


def launch(x, y, out):
    out.copy_(x - y)
