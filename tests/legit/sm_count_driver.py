# expect: allow
"""Persistent vector add sized by the SM count the way Triton's tutorials read it: the
active driver's device properties (as triton.runtime.driver and as `from triton.runtime
import driver`), its torch device and target (the tutorials' is_cuda()), and torch's own
multi_processor_count."""

import torch
import triton
import triton.language as tl
from triton.runtime import driver


@triton.jit
def persistent_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    start = tl.program_id(axis=0)
    programs = tl.num_programs(axis=0)
    for block in tl.range(start, tl.cdiv(n_elements, BLOCK_SIZE), programs):
        offsets = block * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


def is_cuda() -> bool:
    return triton.runtime.driver.active.get_current_target().backend == "cuda"


def sm_count(device: torch.device) -> int:
    if device.type != "cuda" or not is_cuda():
        return 3  # the CPU interpreter has no active driver
    props = triton.runtime.driver.active.utils.get_device_properties(torch.cuda.current_device())
    torch_device = driver.active.get_active_torch_device()
    same = driver.active.utils.get_device_properties(torch_device.index)
    by_torch = torch.cuda.get_device_properties(0).multi_processor_count
    return min(props["multiprocessor_count"], same["multiprocessor_count"], by_torch)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    block = 512
    grid = (min(sm_count(out.device), triton.cdiv(n, block)),)
    persistent_add_kernel[grid](x, y, out, n, BLOCK_SIZE=block)
