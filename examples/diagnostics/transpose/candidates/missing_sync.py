"""The padded transpose without the barrier between writing and reading the tile: a
shared-memory race. Values may still come out right by timing luck; racecheck
(kgrader run --sanitize-tool racecheck) reports the hazard as shared_memory_race."""

import torch
from torch.utils.cpp_extension import load_inline

CPP = "void transpose(torch::Tensor x, torch::Tensor out);"

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

#define TILE 32
#define ROWS 8

__global__ void transpose_nosync(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
        }
    }
    // (no __syncthreads(): other warps' rows of the tile may not be written yet)
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) {
        if (x < rows && y + j < cols) {
            // Column read of the tile: reads rows of the tile that other warps write, with no barrier.
            out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}

void transpose(torch::Tensor x, torch::Tensor out) {
    const int rows = x.size(0), cols = x.size(1);
    dim3 block(TILE, ROWS);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_nosync<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
}
"""

_ext = load_inline(name="kg_diag_transpose_nosync", cpp_sources=CPP, cuda_sources=CUDA,
                   functions=["transpose"], extra_cuda_cflags=["-O3"], verbose=False)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    _ext.transpose(x, out)
