# expect: allow
"""Matmul with grouped program ordering (L2 reuse) and an fp32 accumulator; no autotune."""

import torch
import triton
import triton.language as tl


@triton.jit
def grouped_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptr + rm[:, None] * sam + (k * BK + rk[None, :]) * sak,
                    mask=k * BK + rk[None, :] < K, other=0.0)
        b = tl.load(b_ptr + (k * BK + rk[:, None]) * sbk + rn[None, :] * sbn,
                    mask=k * BK + rk[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * scm + cn[None, :] * scn, acc.to(tl.float16),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


def launch(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
    grouped_matmul[grid](A, B, C, M, N, K, *A.stride(), *B.stride(), *C.stride(),
                         BM=64, BN=64, BK=32, GROUP_M=8)
