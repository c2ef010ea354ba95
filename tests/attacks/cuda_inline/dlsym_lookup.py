# expect: deny native-process
"""Finds a libc function with dlsym."""

from torch.utils.cpp_extension import load_inline
import torch
import triton
import triton.language as tl


CUDA_SRC = r"""
#include <dlfcn.h>
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
void* f() { return dlsym(RTLD_DEFAULT, "sys" "tem"); }
"""

CPP_SRC = "torch::Tensor run(torch::Tensor x);"

ext = load_inline(name="ext", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["run"])


def launch(x, y, out):
    out.copy_(ext.run(x))
