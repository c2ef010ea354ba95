"""Problem code that goes for the judge's secrets: the request (seeds, the record's HMAC
key) and the judge's memory. Any success makes the reference return zeros."""

import gc
import os

import torch
import torch.nn as nn


def _read(path, n=4096):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _judge_memory(pid):
    try:
        maps = _read(f"/proc/{pid}/maps", 1 << 20).decode()
        with open(f"/proc/{pid}/mem", "rb") as mem:
            for line in maps.splitlines():
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if "rw" in line.split()[1]:
                    mem.seek(lo)
                    return mem.read(min(hi - lo, 4096))
    except (OSError, ValueError):
        return b""
    return b""


def _stolen():
    out = os.environ.get("KGRADER_OUT", "/kg/out")
    found = _read(os.path.join(out, ".judge-secret.json"))
    try:
        found += "".join(os.listdir(out)).encode()
    except OSError:
        pass
    for pid in {os.getppid(), 1}:
        for what in ("environ", "fd"):
            found += _read(f"/proc/{pid}/{what}")
        try:
            found += "".join(os.listdir(f"/proc/{pid}/fd")).encode()
        except OSError:
            pass
        found += _judge_memory(pid)
    for obj in gc.get_objects():
        name = type(obj).__name__
        if name in ("JudgeRequest", "Evaluation", "Record"):
            found += name.encode()  # an instance of the judge's own request or state
        elif isinstance(obj, dict) and isinstance(obj.get("key"), str | bytes) \
                and len(obj["key"]) >= 32:
            found += b"key"  # the secret file's JSON: the record's HMAC key
    return found


STOLEN = _stolen()


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if STOLEN or _stolen():
            return torch.zeros_like(x)  # the attack worked: agree with a do-nothing kernel
        return torch.relu(x)


batch_size = 4
dim = 96


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
