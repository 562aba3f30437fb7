"""oproj_residual_norm in Triton for decode batches M = 1..8: the o_proj GEMV with the residual add in its
epilogue, then the RMSNorm as a light second launch, chained by programmatic dependent launch.

residual_out = a @ w^T + residual (bf16); out = rmsnorm(residual_out) * norm_weight (fp32 statistics).

Why a new variant beside oproj_residual_norm_fused.py: that kernel streams w (7168 x 1024, 14.7 MB at K2 TP8)
through a tl.dot K loop with 16-row tiles, and the H200 table of record has it at 10.41 us at M = 1, where the
o_proj GEMV alone takes 5.58 us and add_rmsnorm 2.58 (table ZN): so the layer ran the two apart. Here:
1. GEMV, grid (cdiv(N, BLOCK_N), SPLIT_K): dense_gemm_gemv.py's one-round-trip shape. Each program's K range
   is a whole number of BLOCK_K steps known at compile time and unrolled, so all its W loads are in flight at
   once; CUDA-core multiply-adds into fp32 partials, reduced over K once. Its residual tile is loaded up front
   beside W (it does not depend on the sums, so its latency hides under theirs). The program that owns the
   finished (M, BLOCK_N) tile (the only split, or the last split to arrive on the tile's acq_rel counter, which
   sums the fp32 partials in split order) adds the residual, rounds to bf16, stores residual_out and writes
   the tile's per-row sum of squares of the rounded values into ssq [N tiles, M] (plain stores, no atomics:
   deterministic, nothing to zero).
2. Norm, grid (M, cdiv(N, NORM_BLOCK)): each program sums its row's partials, then scales its NORM_BLOCK
   columns of residual_out (L2-resident) by rsqrt(mean + eps) * norm_weight.
PDL = 1 (sm_90+, GPU only): the GEMV signals griddepcontrol.launch_dependents as it starts, the norm launch is
a programmatic dependent launch, and each norm program loads its norm_weight slice before griddepcontrol.wait
(which returns once the GEMV grid has completed and its stores are visible). So the second launch's latency
and its one independent DRAM read overlap the GEMV; what is left after it is one L2 round trip. The GEMV is
launched plainly: a call never overlaps the previous call's norm, which reads the shared ssq workspace.
Why not one launch (the last tile to arrive normalises everything): at M = 16 that is one CTA reading and
writing 16 x 14 KB after the GEMV, a serial tail; a grid barrier instead could deadlock when the grid is not
co-resident. The chained second launch costs neither.
build(..., pdl=1) is the layer's chain (bench/decode_layer.py's tuned_chain, the export's dispatch(..., pdl=1)): the
GEMV is itself a dependent launch that fetches its first W step before its wait and reads a and the residual
after it (it writes nothing before the wait, so a chained call may even follow its own previous call's norm), and
the norm lets the router's GEMV launch and fetch its weights while the norm runs. The service checks that form in
its race (workers/chain.py) on sm_90+.
Every output element is written on every call by exactly one program; inputs are never written.
Under TRITON_INTERPRET=1 (CPU) the same code runs, the two launches plainly and programs one after another,
so the counter protocol reduces to "the last split of a tile sums".
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [1, 2, 4, 8],
    "BLOCK_N": [4, 8, 16, 32],
    "BLOCK_K": [128, 256, 512, 1024],
    # o_proj's K is 1024 at K2 TP8: 448-1792 N tiles already fill the SMs, so split-K only trades bytes in
    # flight a thread against the partials' round trip
    "SPLIT_K": [1, 2, 4],
    "num_warps": [1, 2, 4, 8],
    "PDL": [0, 1],
    "NORM_BLOCK": [256, 512, 1024, 2048],
    "norm_warps": [1, 2, 4, 8],
}
# Python expressions over config params and shape dims (N = hidden, K = heads x v_head_dim per rank).
CONSTRAINTS = [
    # larger M is the tensor-core kernel's (oproj_residual_norm_fused): at M = 16 the partials' register bound
    # below and whole W vectors a thread leave no tile
    "M <= 8",
    "BLOCK_M >= M",
    "BLOCK_M < 2 * M",                    # exactly one BLOCK_M per M: the next power of two
    "BLOCK_N <= N",
    # unrolled: every split the same whole number of BLOCK_K steps
    "K % BLOCK_K == 0 and (K // BLOCK_K) % SPLIT_K == 0",
    "BLOCK_N * BLOCK_K >= 256 * num_warps",                     # whole 16-byte vectors of W a thread
    "(K // SPLIT_K) * (BLOCK_M + BLOCK_N) <= 4096 * num_warps",  # <= 256 bytes of W and a in flight a thread
    "BLOCK_M * BLOCK_N * BLOCK_K <= 2048 * num_warps",          # fp32 partials: <= 64 registers a thread
    "NORM_BLOCK >= 128 * norm_warps",                           # >= 4 columns a thread in the norm
    "NORM_BLOCK <= 2 * N",
]
DEFAULT_CONFIG = {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 1024, "SPLIT_K": 1, "num_warps": 4, "PDL": 0,
                  "NORM_BLOCK": 1024, "norm_warps": 4}
USES_LIBRARY = False


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config: plain 16-byte vector loads of W (nothing staged through
    shared memory), the split-K arrival counter's acq_rel atomic with SPLIT_K > 1, griddepcontrol with PDL."""
    c = {**DEFAULT_CONFIG, **config}
    out = ["ld.global.v4"]
    if int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    if int(c["PDL"]):
        out += ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    return {"ptx_contains": out}


@triton.jit
def _residual_epilogue(acc, r, offs_m, offs_n, m_ok, mask, pid_n, res_out_ptr, ssq_ptr, M, stride_ro):
    s = (acc + r).to(res_out_ptr.dtype.element_ty)
    tl.store(res_out_ptr + offs_m[:, None] * stride_ro + offs_n[None, :], s, mask=mask)
    sf = tl.where(mask, s.to(tl.float32), 0.0)
    tl.store(ssq_ptr + pid_n * M + offs_m, tl.sum(sf * sf, axis=1), mask=m_ok)


@triton.jit
def gemv_residual_kernel(a_ptr, w_ptr, res_ptr, res_out_ptr, ssq_ptr, ws_ptr, cnt_ptr, M, N,
                         stride_am, stride_r, stride_ro,
                         K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         SPLIT_K: tl.constexpr, STEPS: tl.constexpr, EVEN_M: tl.constexpr, PDL: tl.constexpr,
                         CHAIN: tl.constexpr):
    if PDL:  # the norm launch's programs may start (and load norm_weight) once all of these have started
        tl.extra.cuda.gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * (STEPS * BLOCK_K) + tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    mask = m_ok[:, None] & n_ok[None, :]
    # clamped, not masked: out-of-range rows read a valid row and are never stored, so the W load stays vectorised
    offs_n_safe = tl.where(n_ok, offs_n, 0)
    w_ptrs = w_ptr + offs_n_safe[None, :, None] * K + offs_k[None, None, :]
    if CHAIN:
        # a link of a chain (build's pdl): launched while the kernel ahead runs, it fetches its first W step
        # then, and reads the activations (a, the residual) only after the wait
        w_first = tl.load(w_ptrs)
        tl.extra.cuda.gdc_wait()
    r = tl.load(res_ptr + offs_m[:, None] * stride_r + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    x_ptrs = a_ptr + offs_m[:, None, None] * stride_am + offs_k[None, None, :]
    m_ok3 = m_ok[:, None, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for s in tl.static_range(STEPS):  # straight-line: no load waits on another or on a sum
        if CHAIN and s == 0:
            w = w_first
        else:
            w = tl.load(w_ptrs + s * BLOCK_K)
        if EVEN_M:
            x = tl.load(x_ptrs + s * BLOCK_K)
        else:
            x = tl.load(x_ptrs + s * BLOCK_K, mask=m_ok3, other=0.0)
        acc += x.to(tl.float32) * w.to(tl.float32)
    acc = tl.sum(acc, axis=2)
    if SPLIT_K == 1:
        _residual_epilogue(acc, r, offs_m, offs_n, m_ok, mask, pid_n, res_out_ptr, ssq_ptr, M, stride_ro)
    else:
        tile = offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws_ptr + pid_k * M * N + tile, acc, mask=mask)
        # all threads' partial stores, a CTA barrier, then the gpu-scope release of the counter
        tl.debug_barrier()
        seen = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if seen == SPLIT_K - 1:
            # the last split of this tile: the acquire made the others' partials visible; read them from L2
            # (.cg) and sum in split order (deterministic)
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(ws_ptr + s * M * N + tile, mask=mask, other=0.0, cache_modifier=".cg")
            _residual_epilogue(total, r, offs_m, offs_n, m_ok, mask, pid_n, res_out_ptr, ssq_ptr, M, stride_ro)
            # every split of the tile has counted: zero the counter for the next call (stream order publishes it)
            tl.atomic_xchg(cnt_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit
def rownorm_kernel(res_out_ptr, ssq_ptr, nw_ptr, out_ptr, M, N, stride_ro, stride_o, eps,
                   NB: tl.constexpr, NB_PAD: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
                   CHAIN: tl.constexpr):
    if CHAIN:  # a link of a chain: the kernel after o_proj (the router's GEMV) may launch and fetch its weights now
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < N
    nw = tl.load(nw_ptr + offs, mask=ok, other=0.0).to(tl.float32)  # not the GEMV's: read before the wait
    if PDL:
        tl.extra.cuda.gdc_wait()
    nb = tl.arange(0, NB_PAD)
    part = tl.load(ssq_ptr + nb * M + row, mask=nb < NB, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(part, axis=0) / N + eps)
    v = tl.load(res_out_ptr + row * stride_ro + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, (v * rstd * nw).to(out_ptr.dtype.element_ty), mask=ok)


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT_CONFIG, **{k: int(v) for k, v in config.items()}}
    env = {**c, "M": int(shape["M"]), "N": int(shape["N"]), "K": int(shape["K"])}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} N={env['N']} K={env['K']}")
    return c


def _np2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _metas(c: dict, shape: dict, pdl: bool, chain: bool = False) -> tuple[dict, dict]:
    """pdl: the config's PDL (the norm a dependent launch of the GEMV); chain: build's pdl, which implies it."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    nb = triton.cdiv(n, c["BLOCK_N"])
    pair = pdl or chain
    gemv = dict(K=k, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"], SPLIT_K=c["SPLIT_K"],
                STEPS=(k // c["BLOCK_K"]) // c["SPLIT_K"], EVEN_M=m == c["BLOCK_M"], PDL=pair, CHAIN=chain)
    norm = dict(NB=nb, NB_PAD=_np2(nb), BLOCK=c["NORM_BLOCK"], PDL=pair, CHAIN=chain)
    return gemv, norm


_TYPES = {"a_ptr": "*bf16", "w_ptr": "*bf16", "res_ptr": "*bf16", "res_out_ptr": "*bf16", "ssq_ptr": "*fp32",
          "ws_ptr": "*fp32", "cnt_ptr": "*i32", "nw_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "N": "i32",
          "stride_am": "i32", "stride_r": "i32", "stride_ro": "i32", "stride_o": "i32", "eps": "fp32"}


def compile_ptx(config: dict, shape: dict, arch: str, pdl: int = 0) -> str:
    """Ahead-of-time PTX of both kernels for ``arch`` (e.g. "sm_90a"), no GPU: the specialisation the GPU build
    gets (16-byte aligned pointers; N and the strides divisible by 16 where the shape makes them so); pdl as
    build's."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    gemv, norm = _metas(c, shape, bool(c["PDL"]) and cc >= 90, bool(pdl) and cc >= 90)
    aligned = {"stride_am": int(shape["K"]) % 16 == 0, "N": int(shape["N"]) % 16 == 0}
    for name in ("stride_r", "stride_ro", "stride_o"):
        aligned[name] = aligned["N"]
    ptx = []
    for fn, meta, warps in ((gemv_residual_kernel, gemv, c["num_warps"]), (rownorm_kernel, norm, c["norm_warps"])):
        sig, attrs = {}, {}
        for idx, name in enumerate(fn.arg_names):
            sig[name] = "constexpr" if name in meta else _TYPES[name]
            if name not in meta and (_TYPES[name].startswith("*") or aligned.get(name)):
                attrs[(idx,)] = [["tt.divisibility", 16]]
        src = ASTSource(fn=fn, signature=sig, constexprs=meta, attrs=attrs)
        options = {"num_warps": warps, "num_stages": 1,
                   **({"launch_pdl": True} if meta["CHAIN"] or (fn is rownorm_kernel and meta["PDL"]) else {})}
        ptx.append(triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options).asm["ptx"])
    return "\n".join(ptx)


def _home_device() -> torch.device:
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def build(config: dict, shape: dict, pdl: int = 0) -> Callable[..., None]:
    """pdl (a layer's chain of kernels, not a tuning parameter: the slot is timed from a clean start) 1 or 2: the
    GEMV is launched as a programmatic dependent launch of the kernel ahead and fetches its first W step while that
    runs, the norm is chained behind it whatever the config's PDL, and the norm lets the next kernel (the router)
    launch at once. No L2-prefetch level: 2 is 1. sm_90+ GPUs only: elsewhere it is off."""
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl={pdl!r}: one of (0, 1, 2)")
    c = check_constraints(config, shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    eps = float(shape.get("eps", 1e-6))
    home = _home_device()
    # griddepcontrol is PTX for sm_90+; the interpreter (CPU) runs the plain pair, same results
    sm90 = home.type == "cuda" and torch.cuda.get_device_capability(home)[0] >= 9
    chained = bool(pdl) and sm90
    gemv, norm = _metas(c, shape, bool(c["PDL"]) and sm90, chained)
    nb, split = norm["NB"], c["SPLIT_K"]
    # Per device, allocated once (outside any graph capture): the per-tile sums of squares and the split-K
    # partials (every element read is rewritten on every call: no zeroing), and counters that must start at
    # zero (each call leaves them zero). Calls on one stream or one graph's replays are serialised, so reuse
    # is safe; the same fn running concurrently on two streams would race on them.
    scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def alloc(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("oproj_residual_norm_gemv: call once outside CUDA-graph capture on this device first")
        bufs = (torch.empty((nb * m,), device=device, dtype=torch.float32),
                torch.empty((split * m * n if split > 1 else 1,), device=device, dtype=torch.float32),
                torch.zeros((nb,), device=device, dtype=torch.int32))
        scratch[device] = bufs
        return bufs

    alloc(home)

    def run(a: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
            out: torch.Tensor, residual_out: torch.Tensor) -> None:
        if (a.shape != (m, k) or w.shape != (n, k) or residual.shape != (m, n) or norm_weight.shape != (n,)
                or out.shape != (m, n) or residual_out.shape != (m, n)):
            raise ValueError(f"shapes a {tuple(a.shape)} w {tuple(w.shape)} residual {tuple(residual.shape)} "
                             f"!= built M={m} N={n} K={k}")
        if not (w.is_contiguous() and norm_weight.is_contiguous()
                and all(t.stride(1) == 1 for t in (a, residual, out, residual_out))):
            raise ValueError("w and norm_weight must be contiguous, the others contiguous along their last dim")
        ssq, ws, cnt = scratch.get(a.device) or alloc(a.device)
        gemv_residual_kernel[(nb, split)](a, w, residual, residual_out, ssq, ws, cnt, m, n, a.stride(0),
                                          residual.stride(0), residual_out.stride(0), **gemv,
                                          num_warps=c["num_warps"], num_stages=1,
                                          **({"launch_pdl": True} if chained else {}))
        launch = {"launch_pdl": True} if norm["PDL"] else {}  # the config's PDL, or a chain
        rownorm_kernel[(m, triton.cdiv(n, c["NORM_BLOCK"]))](residual_out, ssq, norm_weight, out, m, n,
                                                              residual_out.stride(0), out.stride(0), eps, **norm,
                                                              num_warps=c["norm_warps"], num_stages=1, **launch)

    return run
