"""mla_norms_gemm in Triton whose chained build is wrong on its SECOND activation: right when launched plainly, but
with build(..., pdl=1) it reads x only after griddepcontrol.wait and the kv latent before it, i.e. before the kernel
ahead of it has written kv. The check stage's chained trial, whose producer writes every activation late (x and kv
here, workers/chain.py), must fail it (check_failed / chained_mismatch) while its plain trials pass. A negative
control: not a kernel to ship."""

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {"BLOCK_N": [16, 32], "BLOCK_K": [256, 512]}


@triton.jit
def mla_kernel(x_ptr, g_ptr, w_ptr, kv_ptr, kvg_ptr, out_ptr, kvo_ptr, N, eps, stride_xm, stride_kvm, stride_kvom,
               K: tl.constexpr, KV: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               KV_BLOCK: tl.constexpr, PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    m = tl.program_id(1)
    offs_c = tl.arange(0, KV_BLOCK)
    c_ok = offs_c < KV
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        v = tl.load(kv_ptr + m * stride_kvm + offs_c, mask=c_ok, other=0.0)  # the bug: kv read before the wait
        tl.extra.cuda.gdc_wait()
    else:
        v = tl.load(kv_ptr + m * stride_kvm + offs_c, mask=c_ok, other=0.0)
    if pid_n == 0:  # one program per row normalises the kv latent
        vf = v.to(tl.float32)
        rstd_kv = tl.rsqrt(tl.sum(vf * vf, axis=0) / KV + eps)
        kvg = tl.load(kvg_ptr + offs_c, mask=c_ok, other=0.0).to(tl.float32)
        y = (vf * rstd_kv).to(kvo_ptr.dtype.element_ty).to(tl.float32) * kvg
        tl.store(kvo_ptr + m * stride_kvom + offs_c, y.to(kvo_ptr.dtype.element_ty), mask=c_ok)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    ss = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_K):  # x only after the wait: the first activation is read right
        k_ok = (k0 + offs_k) < K
        x = tl.load(x_ptr + m * stride_xm + k0 + offs_k, mask=k_ok, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + k0 + offs_k, mask=k_ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_n[:, None] * K + (k0 + offs_k)[None, :], mask=n_ok[:, None] & k_ok[None, :],
                    other=0.0)
        ss += x * x
        acc += tl.sum(w.to(tl.float32) * (x * g)[None, :], axis=1)
    rstd = tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    tl.store(out_ptr + m * N + offs_n, (acc * rstd).to(out_ptr.dtype.element_ty), mask=n_ok)


def build(config, shape, pdl=0):
    n, k, kv, eps = int(shape["N"]), int(shape["K"]), int(shape["KV"]), float(shape["eps"])
    bn, bk = int(config.get("BLOCK_N", 32)), int(config.get("BLOCK_K", 512))
    chained = bool(pdl) and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9

    def run(x, norm_weight, w, kv, kv_norm_weight, out, kv_out):
        mla_kernel[(triton.cdiv(n, bn), x.shape[0])](
            x, norm_weight, w, kv, kv_norm_weight, out, kv_out, n, eps, x.stride(0), kv.stride(0), kv_out.stride(0),
            K=k, KV=kv.shape[1], BLOCK_N=bn, BLOCK_K=bk, KV_BLOCK=triton.next_power_of_2(kv.shape[1]), PDL=chained,
            **({"launch_pdl": True} if chained else {}))
    return run
