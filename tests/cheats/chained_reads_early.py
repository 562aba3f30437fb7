"""dense_gemm in Triton whose chained build is wrong: a plain GEMV (one program per BLOCK_N rows and row of x) that is
right when launched plainly, but with build(..., pdl=1) it loads its first chunk of x BEFORE griddepcontrol.wait,
i.e. before the kernel ahead of it has written x. The check stage's chained trial (workers/chain.py) must fail it
(check_failed / chained_mismatch) while its plain trials pass. A negative control: not a kernel to ship."""

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {"BLOCK_N": [8, 16], "BLOCK_K": [256, 512]}


@triton.jit
def gemv_kernel(x_ptr, w_ptr, out_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    m = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        x0 = tl.load(x_ptr + m * K + offs_k, mask=offs_k < K, other=0.0)   # the bug: x read before the wait
        tl.extra.cuda.gdc_wait()
    else:
        x0 = tl.load(x_ptr + m * K + offs_k, mask=offs_k < K, other=0.0)
    for k0 in tl.static_range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        if k0 == 0:
            x = x0
        else:
            x = tl.load(x_ptr + m * K + k0 + offs_k, mask=k_ok, other=0.0)
        w = tl.load(w_ptr + offs_n[:, None] * K + (k0 + offs_k)[None, :], mask=n_ok[:, None] & k_ok[None, :],
                    other=0.0)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    tl.store(out_ptr + m * N + offs_n, acc.to(out_ptr.dtype.element_ty), mask=n_ok)


def build(config, shape, pdl=0):
    n, k = int(shape["N"]), int(shape["K"])
    bn, bk = int(config.get("BLOCK_N", 16)), int(config.get("BLOCK_K", 512))
    chained = bool(pdl) and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9

    def run(x, w, out):
        gemv_kernel[(triton.cdiv(n, bn), x.shape[0])](x, w, out, n, K=k, BLOCK_N=bn, BLOCK_K=bk, PDL=chained,
                                                       **({"launch_pdl": True} if chained else {}))
    return run
