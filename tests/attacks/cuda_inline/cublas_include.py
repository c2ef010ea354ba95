# expect: deny native-vendor-library
"""Includes cuBLAS and calls cublasSgemm."""

from torch.utils.cpp_extension import load_inline
import torch
import triton
import triton.language as tl


CUDA_SRC = r"""
#include <cublas_v2.h>
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
void g(cublasHandle_t h) { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1); }
"""

CPP_SRC = "torch::Tensor run(torch::Tensor x);"

ext = load_inline(name="ext", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["run"])


def launch(x, y, out):
    out.copy_(ext.run(x))
