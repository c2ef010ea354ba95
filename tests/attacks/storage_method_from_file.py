# expect: deny file-access-method
"""Reads another side's source through a tensor's storage: from_file as a method of a value,
which no dotted-name rule (torch.from_file) sees."""

import torch


def launch(x, y, out):
    text = x.untyped_storage().from_file("/kg/in/current.py", False, 4096)
    raise RuntimeError(bytes(text).decode(errors="replace"))
