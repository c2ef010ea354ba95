"""examples/vector_add as a CUDA extension built by load_inline: the inline resubmission row
of bench/speed.py on a GPU (its second grade loads the kept build, grader/builds.py)."""

from torch.utils.cpp_extension import load_inline

_CPP = "void add(torch::Tensor x, torch::Tensor y, torch::Tensor out);"
_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

__global__ void add_kernel(const __half* x, const __half* y, __half* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = __hadd(x[i], y[i]);
}

void add(torch::Tensor x, torch::Tensor y, torch::Tensor out) {
  int64_t n = out.numel();
  int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  add_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __half*>(x.data_ptr<at::Half>()),
      reinterpret_cast<const __half*>(y.data_ptr<at::Half>()),
      reinterpret_cast<__half*>(out.data_ptr<at::Half>()), n);
}
"""
_mod = load_inline("kg_bench_inline_add_cuda", cpp_sources=[_CPP], cuda_sources=[_CUDA],
                   functions=["add"])


def launch(x, y, out):
    _mod.add(x, y, out)
