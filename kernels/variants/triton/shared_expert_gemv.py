"""shared_expert in Triton for the smallest decode batches (M = 1..4): two CUDA-core GEMV launches.

out[M, K] = (silu(x @ w13[:I]^T) * (x @ w13[I:]^T)) @ w2^T, bf16 in and out, fp32 accumulate.

Why not shared_expert_fused.py (tl.dot) here: at M = 1..8 a 16-row tensor-core tile is mostly padding,
and its CTAs stream W through a K loop (several DRAM round trips each). At K2 TP8 the whole MLP is 11 MB
(floor ~2.6 us on the H200) and the H200 table had the tl.dot kernel at 15.5 us, 17% of that floor.
This is dense_gemm_gemv.py's one-round-trip shape applied to both GEMMs:

1. gate/up: grid (I / BLOCK_N, SPLIT_K). Each program reads its BLOCK_N gate rows [n] and up rows [I + n]
   over one K range, a whole number of BLOCK_K steps known at compile time and unrolled, so all its
   loads are in flight at once (K2 TP8, I = 256: BLOCK_N 8, SPLIT_K 14 is 448 CTAs of 16 KB). Products are
   broadcast multiply-adds into fp32 partials [BLOCK_M, BLOCK_N, BLOCK_K], reduced over K once. With
   SPLIT_K > 1 each split stores its fp32 gate and up partials into a workspace [SPLIT_K, M, 2I] and bumps
   its N tile's counter (acq_rel, gpu scope); the last split sums the partials in split order
   (deterministic), applies silu(gate) * up and writes h [M, I] bf16 (as vLLM's SiluAndMul does), then
   zeroes the counter for the next call.
2. down: grid (K / BLOCK_N2,). Each program reads BLOCK_N2 rows of w2 (all I of them: 256 elements, one or
   two unrolled steps) and h (512 bytes, from L2), and writes BLOCK_N2 outputs: 224 CTAs of 16 KB at
   BLOCK_N2 32.
PDL = 1 (sm_90+, GPU only) prefetches w2 during the gate/up launch: down is launched with programmatic
dependent launch, gate/up signals griddepcontrol.launch_dependents as it starts, and each down program
loads its w2 rows (one step: BLOCK_K2 = I) BEFORE griddepcontrol.wait, which returns once gate/up has
completed and its h is visible. Gate/up itself is launched plainly: it never overlaps what ran before
it, so the pair is timed from a clean start (the weight-prefetch-during-communication idea, inside one
slot).
Tried and dropped (H200 table ZI): w2 prefetched into L2 by the gate/up programs (bulk prefetch, w13 read
evict_first) lost beside its control at M = 1 / 2 / 4: 8.99 / 12.78 / 17.09 us vs 8.64 / 12.10 / 16.92.
Every output element is written on every call by exactly one program; inputs are never written.
Under TRITON_INTERPRET=1 (CPU) the same code runs; programs run one after another, so the counter
protocol reduces to "the last split of a tile sums".
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [1, 2, 4],
    "BLOCK_N": [2, 4, 8, 16],
    "BLOCK_K": [128, 256, 512, 1024],
    # 7, 14 and 28 split hidden 7168 into whole steps of 1024, 512 and 256 elements
    "SPLIT_K": [1, 2, 4, 7, 8, 14, 28],
    "num_warps": [1, 2, 4, 8],
    "BLOCK_N2": [8, 16, 32, 64],
    "BLOCK_K2": [128, 256],
    "num_warps2": [1, 2, 4, 8],
    "PDL": [0, 1],
}
# Python expressions over config params and shape dims (K = hidden, I = intermediate per rank).
CONSTRAINTS = [
    # Gate and up partials of >= 8 W elements a thread each are >= 16 * BLOCK_M registers: at M = 8 that is
    # past the 64 below. Larger M is the tensor-core kernel's (shared_expert_fused).
    "M <= 4",
    "BLOCK_M >= M",
    "BLOCK_M < 2 * M",                     # exactly one BLOCK_M per M: the next power of two
    "BLOCK_N <= I",
    "I % BLOCK_N == 0",
    # unrolled: every split the same whole number of BLOCK_K steps
    "K % BLOCK_K == 0 and (K // BLOCK_K) % SPLIT_K == 0",
    "BLOCK_N * BLOCK_K >= 256 * num_warps",               # whole 16-byte vectors of W per thread
    "(K // SPLIT_K) * (BLOCK_M + 2 * BLOCK_N) <= 4096 * num_warps",  # <= 256 bytes in flight a thread
    "2 * BLOCK_M * BLOCK_N * BLOCK_K <= 2048 * num_warps",  # gate + up partials: <= 64 registers
    "I % BLOCK_K2 == 0",
    "BLOCK_N2 * BLOCK_K2 >= 256 * num_warps2",
    "I * (BLOCK_M + BLOCK_N2) <= 4096 * num_warps2",
    "BLOCK_M * BLOCK_N2 * BLOCK_K2 <= 2048 * num_warps2",
    "PDL == 0 or BLOCK_K2 == I",  # the prefetched w2 tile is the program's whole share
]
DEFAULT = {"BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 512, "SPLIT_K": 14, "num_warps": 4,
           "BLOCK_N2": 32, "BLOCK_K2": 256, "num_warps2": 4, "PDL": 0}


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config: plain 16-byte vector loads of W (no cp.async: nothing
    is staged through shared memory) and, with SPLIT_K > 1, the arrival counter's acq_rel atomic."""
    c = {**DEFAULT, **config}
    out = ["ld.global.v4"]
    if int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    if int(c["PDL"]):
        out += ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    return {"ptx_contains": out}


@triton.jit
def gate_up_kernel(x_ptr, w13_ptr, h_ptr, ws_ptr, cnt_ptr, M, stride_xm,
                   K: tl.constexpr, I: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, STEPS: tl.constexpr, EVEN_M: tl.constexpr,
                   PDL: tl.constexpr):
    if PDL:  # let the down launch's programs start (and prefetch w2) once all of these have started
        tl.extra.cuda.gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * (STEPS * BLOCK_K) + tl.arange(0, BLOCK_K)
    m_ok3 = (offs_m < M)[:, None, None]
    x_ptrs = x_ptr + offs_m[:, None, None] * stride_xm + offs_k[None, None, :]
    g_ptrs = w13_ptr + offs_n[None, :, None] * K + offs_k[None, None, :]
    u_ptrs = g_ptrs + I * K
    acc_g = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    for s in tl.static_range(STEPS):  # straight-line: every load is independent of the sums
        wg = tl.load(g_ptrs + s * BLOCK_K)
        wu = tl.load(u_ptrs + s * BLOCK_K)
        if EVEN_M:
            x = tl.load(x_ptrs + s * BLOCK_K).to(tl.float32)
        else:
            x = tl.load(x_ptrs + s * BLOCK_K, mask=m_ok3, other=0.0).to(tl.float32)
        acc_g += x * wg.to(tl.float32)
        acc_u += x * wu.to(tl.float32)
    gate = tl.sum(acc_g, axis=2)
    up = tl.sum(acc_u, axis=2)
    mask = (offs_m < M)[:, None] & (offs_n < I)[None, :]
    h_ptrs = h_ptr + offs_m[:, None] * I + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(h_ptrs, (gate / (1.0 + tl.exp(-gate)) * up).to(h_ptr.dtype.element_ty), mask=mask)
    else:
        tile = offs_m[:, None] * (2 * I) + offs_n[None, :]
        tl.store(ws_ptr + pid_k * M * 2 * I + tile, gate, mask=mask)
        tl.store(ws_ptr + pid_k * M * 2 * I + tile + I, up, mask=mask)
        # all threads' partial stores, then a CTA barrier, then the gpu-scope release of the counter
        tl.debug_barrier()
        seen = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if seen == SPLIT_K - 1:
            # the last split of this tile: the others' partials are visible; read them from L2 (.cg)
            g_sum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            u_sum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                g_sum += tl.load(ws_ptr + s * M * 2 * I + tile, mask=mask, other=0.0, cache_modifier=".cg")
                u_sum += tl.load(ws_ptr + s * M * 2 * I + tile + I, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(h_ptrs, (g_sum / (1.0 + tl.exp(-g_sum)) * u_sum).to(h_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(cnt_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit
def down_kernel(h_ptr, w2_ptr, out_ptr, M, stride_om,
                K: tl.constexpr, I: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, EVEN_M: tl.constexpr, PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_ok = offs_n < K
    offs_n_safe = tl.where(n_ok, offs_n, 0)  # clamped, not masked: the W load stays vectorised
    m_ok3 = (offs_m < M)[:, None, None]
    h_ptrs = h_ptr + offs_m[:, None, None] * I + offs_k[None, None, :]
    w_ptrs = w2_ptr + offs_n_safe[None, :, None] * I + offs_k[None, None, :]
    if PDL:
        # w2 does not depend on gate/up: load it first, then wait for gate/up's h (BLOCK_K == I)
        w = tl.load(w_ptrs)
        tl.extra.cuda.gdc_wait()
        if EVEN_M:
            h = tl.load(h_ptrs)
        else:
            h = tl.load(h_ptrs, mask=m_ok3, other=0.0)
        out = tl.sum(h.to(tl.float32) * w.to(tl.float32), axis=2)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
        for s in tl.static_range(I // BLOCK_K):
            w = tl.load(w_ptrs + s * BLOCK_K)
            if EVEN_M:
                h = tl.load(h_ptrs + s * BLOCK_K)
            else:
                h = tl.load(h_ptrs + s * BLOCK_K, mask=m_ok3, other=0.0)
            acc += h.to(tl.float32) * w.to(tl.float32)
        out = tl.sum(acc, axis=2)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], out.to(out_ptr.dtype.element_ty),
             mask=(offs_m < M)[:, None] & n_ok[None, :])


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT, **{k: int(v) for k, v in config.items()}}
    env = {**c, "M": int(shape["M"]), "K": int(shape["K"]), "I": int(shape["I"])}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} K={env['K']} I={env['I']}")
    return c


def _metas(c: dict, shape: dict, pdl: bool) -> tuple[dict, dict]:
    m, k, i = int(shape["M"]), int(shape["K"]), int(shape["I"])
    even_m = m == c["BLOCK_M"]
    up = dict(K=k, I=i, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"], SPLIT_K=c["SPLIT_K"],
              STEPS=(k // c["BLOCK_K"]) // c["SPLIT_K"], EVEN_M=even_m, PDL=pdl)
    down = dict(K=k, I=i, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N2"], BLOCK_K=c["BLOCK_K2"], EVEN_M=even_m, PDL=pdl)
    return up, down


def compile_ptx(config: dict, shape: dict, arch: str) -> str:
    """Ahead-of-time PTX of both kernels for ``arch`` (e.g. "sm_90a"), no GPU: the same specialisation the
    GPU build gets (16-byte aligned pointers; strides divisible by 16 where K is)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    up, down = _metas(c, shape, bool(c["PDL"]) and cc >= 90)
    aligned_stride = int(shape["K"]) % 16 == 0
    ptx = []
    for fn, types, meta, warps in (
            (gate_up_kernel, {"x_ptr": "*bf16", "w13_ptr": "*bf16", "h_ptr": "*bf16", "ws_ptr": "*fp32",
                              "cnt_ptr": "*i32", "M": "i32", "stride_xm": "i32"}, up, c["num_warps"]),
            (down_kernel, {"h_ptr": "*bf16", "w2_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32",
                           "stride_om": "i32"}, down, c["num_warps2"])):
        sig = {**types, **{name: "constexpr" for name in meta}}
        attrs = {}
        for idx, name in enumerate(fn.arg_names):
            if types.get(name, "").startswith("*") or (name.startswith("stride") and aligned_stride):
                attrs[(idx,)] = [["tt.divisibility", 16]]
        src = ASTSource(fn=fn, signature=sig, constexprs=meta, attrs=attrs)
        ptx.append(triton.compile(src, target=GPUTarget("cuda", cc, 32),
                                  options={"num_warps": warps, "num_stages": 1,
                                           **({"launch_pdl": True} if fn is down_kernel and meta["PDL"] else {})}
                                  ).asm["ptx"])
    return "\n".join(ptx)


def _home_device() -> torch.device:
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def build(config: dict, shape: dict) -> Callable[..., None]:
    c = check_constraints(config, shape)
    m, k, i = int(shape["M"]), int(shape["K"]), int(shape["I"])
    home = _home_device()
    # griddepcontrol is PTX for sm_90+; the interpreter (CPU) runs the plain pair, same results
    pdl = bool(c["PDL"]) and home.type == "cuda" and torch.cuda.get_device_capability(home)[0] >= 9
    up, down = _metas(c, shape, pdl)
    n_tiles = i // c["BLOCK_N"]
    # Per device, allocated once (outside any graph capture): h, the split-K partials (every element the
    # reducer reads is rewritten on every call: no zeroing) and counters that must start at zero (each
    # call leaves them zero). Calls on one stream or one graph's replays are serialised, so reuse is safe.
    scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def alloc(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("shared_expert_gemv: call once outside CUDA-graph capture on this device first")
        bufs = (torch.empty((m, i), device=device, dtype=torch.bfloat16),
                torch.empty((max(c["SPLIT_K"], 1) * m * 2 * i,), device=device, dtype=torch.float32),
                torch.zeros((n_tiles,), device=device, dtype=torch.int32))
        scratch[device] = bufs
        return bufs

    alloc(home)

    def run(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, out: torch.Tensor) -> None:
        if x.shape != (m, k) or w13.shape != (2 * i, k) or w2.shape != (k, i) or out.shape != (m, k):
            raise ValueError(f"shapes {tuple(x.shape)} {tuple(w13.shape)} {tuple(w2.shape)} {tuple(out.shape)} "
                             f"!= built M={m} K={k} I={i}")
        if not (w13.is_contiguous() and w2.is_contiguous() and x.stride(1) == 1 and out.stride(1) == 1):
            raise ValueError("w13 and w2 must be contiguous, x and out contiguous along their last dim")
        h, ws, cnt = scratch.get(x.device) or alloc(x.device)
        gate_up_kernel[(n_tiles, c["SPLIT_K"])](x, w13, h, ws, cnt, m, x.stride(0), **up,
                                                 num_warps=c["num_warps"], num_stages=1)
        launch = {"launch_pdl": True} if pdl else {}
        down_kernel[(triton.cdiv(k, c["BLOCK_N2"]),)](h, w2, out, m, out.stride(0), **down,
                                                      num_warps=c["num_warps2"], num_stages=1, **launch)

    return run
