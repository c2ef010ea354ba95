# expect: deny file-access-method
"""Any object's .load/.open, whatever it is: here a deserialiser handed over as a value."""

import torch


def launch(x, y, out, loader=torch.serialization):
    out.copy_(loader.load("/kg/in/reference_outputs.pt"))
