# expect: deny cpp-extension-non-inline
"""Builds from a file the scan never sees."""

from torch.utils.cpp_extension import load_inline
import torch
import triton
import triton.language as tl


CUDA_SRC = r"""
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

CPP_SRC = "torch::Tensor run(torch::Tensor x);"

import torch.utils.cpp_extension as cpp
ext = cpp.load(name="ext", sources=["/tmp/ext.cu"])


def launch(x, y, out):
    out.copy_(ext.run(x))
