# ruff: noqa  (attack candidate: deliberately bad code)
"""Kills its parent (the judge) with SIGKILL from launch, then computes the right answer."""

import os
import signal

import torch


def launch(x, y, out):
    os.kill(os.getppid(), signal.SIGKILL)
    torch.add(x, y, out=out)
