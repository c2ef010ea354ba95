"""How far past a tensor's end a TMA store writes (the guard bands' question).

Runs tests/legit/tma_host_descriptor.py's and tma_device_descriptor.py's launchers plainly
(no kgrader) on fp16 vectors of n elements placed at a 256-byte aligned offset of a larger
buffer filled with a canary, and prints, per n, how many bytes after the tensor's last byte
changed. Needs a GPU with TMA (Hopper or later).

    python3 bench/tma_tail.py [--json]
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "legit" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tail_bytes(launch, n: int) -> int:  # type: ignore[no-untyped-def]
    slack = 4096
    buf = torch.full((3 * (n * 2 + slack),), 0xA5, dtype=torch.uint8, device="cuda")
    def view(k: int) -> torch.Tensor:
        off = k * (n * 2 + slack)
        off += (-off) % 256
        return buf[off: off + n * 2].view(torch.float16)
    x, y, out = view(0), view(1), view(2)
    x.copy_(torch.randn(n, device="cuda").half())
    y.copy_(torch.randn(n, device="cuda").half())
    launch(x, y, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    end = out.data_ptr() - buf.data_ptr() + n * 2
    after = buf[end: end + 256]
    changed = (after != 0xA5).nonzero()
    return int(changed.max()) + 1 if changed.numel() else 0


def main() -> None:
    rows = []
    for name in ("tma_host_descriptor", "tma_device_descriptor"):
        mod = _load(name)
        for n in (4096 * 2048, 4097 * 2047, 1000, 1001, 1003, 1007, 1031 * 67):
            try:
                rows.append({"file": name, "n": n, "bytes_mod_16": n * 2 % 16,
                             "written_after_end": tail_bytes(mod.launch, n)})
            except Exception as e:
                rows.append({"file": name, "n": n, "error": f"{type(e).__name__}: {e}"[:300]})
    for r in rows:
        print(json.dumps(r))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
