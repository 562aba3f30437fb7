"""oproj_residual_norm in Triton: r = a @ w^T + residual -> residual_out (bf16);
out = rmsnorm(r) * norm_weight (fp32 maths). TWO launches.

Kernel 1 (the GEMM, all the bytes: w is N*K*2 = 14.7 MB at K2 TP8) splits N over CTAs
(7168 / BLOCK_N = 112..448 CTAs, enough to fill 132 SMs with no split-K: K = 1024 is short, and a
split-K would need an fp32 atomic workspace before the residual add). Its epilogue adds the
residual, rounds to bf16, stores residual_out and writes each (row, N-block) partial sum of squares
of the rounded row into an fp32 workspace [N/BLOCK_N, M] with plain stores (no atomics, nothing to
zero, deterministic). Kernel 2, one CTA per row, sums the partials, and rescales the row (read back
from residual_out: 14 KB per row, L2-resident) by rsqrt * norm_weight. A single launch would need a
grid-wide barrier (deadlock risk when the grid is not co-resident) or one last CTA normalising
all M rows alone (serial tail of up to 64 x 14 KB): the second light launch is cheaper and safe.
PDL = 1 (sm_90+, GPU only) chains the two: kernel 1 signals griddepcontrol.launch_dependents as it starts and
kernel 2 is a programmatic dependent launch that waits (griddepcontrol.wait) for kernel 1's completion, so its
launch overlaps kernel 1 instead of following it (oproj_residual_norm_gemv.py does the same for M <= 8, where
it took the M = 1 bucket, H100 table s23). Kernel 1 is launched plainly: a call never overlaps the previous
call's norm, which reads the shared partials. 0, the first value, is the kernel as it was before.
"""

import math

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_K": [64, 128, 256],
    "BLOCK_M": [16, 32, 64],
    "num_warps": [2, 4, 8],
    "num_stages": [2, 3, 4, 5],
    "NORM_BLOCK": [1024, 2048, 8192],
    "norm_warps": [4, 8, 16],
    "PDL": [0, 1],
}
CONSTRAINTS = ["BLOCK_M <= max(16, M)", "BLOCK_K <= K", "BLOCK_N * BLOCK_K <= 16384",
               "NORM_BLOCK <= 2 * N"]
DEFAULT_CONFIG = {"BLOCK_N": 32, "BLOCK_K": 128, "BLOCK_M": 16, "num_warps": 4, "num_stages": 4,
                  "NORM_BLOCK": 8192, "norm_warps": 16, "PDL": 0}


def claims(config, shape):
    """Tensor-core tiles streamed through shared memory; griddepcontrol with PDL."""
    out = ["mma.sync", "cp.async"]
    if int(_full_config(config)["PDL"]):
        out += ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    return {"ptx_contains": out}


USES_LIBRARY = False


@triton.jit
def oproj_residual_kernel(a_ptr, w_ptr, res_ptr, res_out_ptr, ssq_ptr, M, stride_am, stride_r, stride_ro,
                          N: tl.constexpr, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, PDL: tl.constexpr, INTERPRET: tl.constexpr):
    if PDL:  # the norm launch may start once all of these have started
        tl.extra.cuda.gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        if INTERPRET:
            acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)))
        else:
            acc += tl.dot(a, tl.trans(b))
    mask = m_ok[:, None] & n_ok[None, :]
    r = tl.load(res_ptr + offs_m[:, None] * stride_r + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    s = (acc + r).to(res_out_ptr.dtype.element_ty)
    tl.store(res_out_ptr + offs_m[:, None] * stride_ro + offs_n[None, :], s, mask=mask)
    sf = tl.where(mask, s.to(tl.float32), 0.0)
    tl.store(ssq_ptr + pid_n * M + offs_m, tl.sum(sf * sf, axis=1), mask=m_ok)


@triton.jit
def rownorm_kernel(res_out_ptr, ssq_ptr, nw_ptr, out_ptr, M, stride_ro, stride_o, eps,
                   N: tl.constexpr, NB: tl.constexpr, NB_PAD: tl.constexpr, BLOCK: tl.constexpr,
                   PDL: tl.constexpr):
    if PDL:  # returns once kernel 1 has completed and its stores are visible
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0)
    nb = tl.arange(0, NB_PAD)
    part = tl.load(ssq_ptr + nb * M + row, mask=nb < NB, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(part, axis=0) / N + eps)
    for n0 in range(0, N, BLOCK):
        offs = n0 + tl.arange(0, BLOCK)
        ok = offs < N
        v = tl.load(res_out_ptr + row * stride_ro + offs, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(nw_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_o + offs, (v * rstd * w).to(out_ptr.dtype.element_ty), mask=ok)


def _np2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def _full_config(config):
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    return cfg


def _consts(cfg, shape, interpret, cap=90):
    N, K = int(shape["N"]), int(shape["K"])
    nb = triton.cdiv(N, int(cfg["BLOCK_N"]))
    # griddepcontrol is PTX for sm_90+: the interpreter (CPU) runs the plain pair, same results
    pdl = bool(int(cfg["PDL"])) and not interpret and cap >= 90
    gemm = dict(N=N, K=K, BLOCK_M=int(cfg["BLOCK_M"]), BLOCK_N=int(cfg["BLOCK_N"]), BLOCK_K=int(cfg["BLOCK_K"]),
                PDL=pdl, INTERPRET=interpret)
    norm = dict(N=N, NB=nb, NB_PAD=_np2(nb), BLOCK=min(int(cfg["NORM_BLOCK"]), _np2(N)), PDL=pdl)
    return gemm, norm


def build(config, shape):
    cfg = _full_config(config)
    M = int(shape["M"])
    eps = float(shape.get("eps", 1e-6))
    state = {}

    def run(a, w, residual, norm_weight, out, residual_out):
        m = a.shape[0]
        interpret = a.device.type == "cpu"
        key = (a.device, interpret)
        st = state.get(key)
        if st is None:
            cap = 0 if interpret else torch.cuda.get_device_capability(a.device)[0] * 10
            gemm, norm = _consts(cfg, shape, interpret, cap)
            st = state[key] = {"gemm": gemm, "norm": norm,
                               "ssq": torch.empty((norm["NB"] * max(M, 1),), device=a.device, dtype=torch.float32)}
        gemm, norm = st["gemm"], st["norm"]
        if m == 0:
            return
        oproj_residual_kernel[(norm["NB"], triton.cdiv(m, gemm["BLOCK_M"]))](
            a, w, residual, residual_out, st["ssq"], m, a.stride(0), residual.stride(0), residual_out.stride(0),
            num_warps=int(cfg["num_warps"]), num_stages=int(cfg["num_stages"]), **gemm)
        rownorm_kernel[(m,)](residual_out, st["ssq"], norm_weight, out, m, residual_out.stride(0), out.stride(0),
                             eps, num_warps=int(cfg["norm_warps"]), **norm,
                             **({"launch_pdl": True} if norm["PDL"] else {}))

    return run


# --- ahead-of-time PTX, no GPU -----------------------------------------------------------------

def _arch_cap(arch) -> int:
    """90 for "sm_90a": the compute capability an arch string names."""
    return int("".join(ch for ch in str(arch) if ch.isdigit()) or 90)


def _aot(kernel, types, consts, num_warps, num_stages, arch, aligned=(), launch_pdl=False):
    """PTX for one kernel, specialised as the JIT would at run time: pointers (torch allocations)
    and the ints in ``aligned`` (strides that are multiples of 16) carry tt.divisibility=16."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    cap = _arch_cap(arch)
    sig, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in consts:
            sig[name] = "constexpr"
            continue
        sig[name] = types[name]
        if types[name].startswith("*") or name in aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(kernel, sig, consts, attrs)
    out = triton.compile(src, target=GPUTarget("cuda", cap, 32),
                         options={"num_warps": num_warps, "num_stages": num_stages,
                                  **({"launch_pdl": True} if launch_pdl else {})})
    return out.asm["ptx"]


def compile_ptx(config, shape, arch="sm_90a"):
    cfg = _full_config(config)
    gemm, norm = _consts(cfg, shape, False, _arch_cap(arch))
    types = {"a_ptr": "*bf16", "w_ptr": "*bf16", "res_ptr": "*bf16", "res_out_ptr": "*bf16", "ssq_ptr": "*fp32",
             "nw_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "stride_am": "i32", "stride_r": "i32",
             "stride_ro": "i32", "stride_o": "i32", "eps": "fp32"}
    strides = ("stride_am", "stride_r", "stride_ro", "stride_o")
    ptx = _aot(oproj_residual_kernel, types, gemm, int(cfg["num_warps"]), int(cfg["num_stages"]), arch, strides)
    return ptx + "\n" + _aot(rownorm_kernel, types, norm, int(cfg["norm_warps"]), 1, arch, strides,
                            launch_pdl=norm["PDL"])
