# expect: deny file-access-method
"""torch.UntypedStorage.from_file: a file read under a dotted name the file-access list
does not spell out."""

import torch


def launch(x, y, out):
    storage = torch.UntypedStorage.from_file("/kg/in/current.py", False, 4096)
    raise RuntimeError(bytes(storage).decode(errors="replace"))
