"""Problem code that reads the submission it is judged against (to leak it, or to agree
with it). If it can read any of it, the reference returns zeros, as the submission does."""

import glob
import os

import torch
import torch.nn as nn


def _source():
    paths = ["/kg/in/candidate.py", "/kg/in/current.py"]
    paths += glob.glob("/tmp/kgrader-runner-*/src/*.py")
    paths += glob.glob("/proc/[0-9]*/cwd/src/*.py")
    for p in paths:
        try:
            with open(p) as f:
                text = f.read()
        except OSError:
            continue
        if "ModelNew" in text:
            return text
    return ""


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "zeros_like" in _source():
            return torch.zeros_like(x)  # the attack worked: agree with the submission
        return torch.relu(x)


batch_size = 4
dim = 96


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
