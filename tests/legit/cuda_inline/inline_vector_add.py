# expect: allow
"""A load_inline CUDA kernel that cuda-inline admits: plain CUDA, allow-listed PTX asm.

The comments in the CUDA source mention cuBLAS and system() on purpose: comments are
stripped before the native rules run.
"""

import torch
from torch.utils.cpp_extension import load_inline

CPP_SRC = "torch::Tensor vadd(torch::Tensor x, torch::Tensor y);"

CUDA_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

// No cublasSgemm and no system() here: a hand-written kernel.
/* #include <cublas_v2.h>  -- deliberately not used */

__device__ __forceinline__ unsigned lane_id() {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

__device__ __forceinline__ float fast_add(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__global__ void vadd_kernel(const float* __restrict__ x, const float* __restrict__ y,
                            float* __restrict__ out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fast_add(x[i], y[i]);
}

torch::Tensor vadd(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    vadd_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                     out.data_ptr<float>(), n);
    return out;
}
"""

_ext = load_inline(
    name="kg_vadd",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["vadd"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(_ext.vadd(x, y))
