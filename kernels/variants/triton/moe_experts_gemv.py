"""moe_experts in Triton for the smallest decode batches (M = 1..8): two CUDA-core GEMV launches over the
(token, expert) pairs.

out[t] = sum_j topk_weights[t,j] * (silu(x[t] @ w13[e][:I]^T) * (x[t] @ w13[e][I:]^T)) @ w2[e]^T, e = topk_ids[t,j];
bf16 in and out, fp32 accumulate, h rounded to bf16 between the GEMMs (as vLLM's SiluAndMul writes it).

Why not moe_experts_grouped.py (tl.dot) here: at M = 1 its w13 read 59 MB at ~65% of the HBM rate and its w2
29 MB at ~50% (H200 table ZA, profiler: 21.4 + 13.6 us, 59% of the floor): a 16-row tensor-core tile is
all padding for one token, and each CTA streams its weights through a pipelined K loop. This is
shared_expert_gemv.py's one-round-trip shape applied to the routed experts:

1. w13: grid (P = M * top_k pairs, I / BLOCK_N, SPLIT_K). Program (p, n, k) reads its pair's expert's
   BLOCK_N gate rows [n] and up rows [I + n] over one K range, a whole number of BLOCK_K steps known at
   compile time and unrolled, so all its loads are in flight at once (K2 TP8, I = 256: BLOCK_N 4, SPLIT_K 14
   is 64 x 14 x 8 = 7,168 CTAs of 8 KB at M = 1). With SPLIT_K > 1 each split stores fp32 gate and up
   partials into a workspace [SPLIT_K, P, 2I] and bumps its (pair, N tile) counter (acq_rel, gpu scope); the
   last split sums the partials in split order (deterministic), applies silu(gate) * up and writes h[p]
   bf16, then zeroes the counter for the next call.
2. w2 + the weighted combine: grid (K / BLOCK_N2, M). Program (n, t) loads BLOCK_N2 rows of all top_k of
   token t's experts in ONE gathered load [top_k, BLOCK_N2, BLOCK_K2] (w2 rows are I = 256 elements: one or
   two unrolled steps), multiplies them by the token's h rows (from L2), weights and sums over the experts
   itself and writes its BLOCK_N2 outputs once: no atomics, no output workspace, deterministic.
Each pair is its own group (no sort launch): an expert two tokens picked is read twice. At M = 1 the top-k
are distinct; at M = 8 uniformly routed tokens touch ~59 experts for 64 pairs (~8% re-read); past that the
grouped kernel's sort pays, so the space stops at M = 8.
PDL = 1 (sm_90+, GPU only) prefetches w2 during w13: the w2 launch is a programmatic dependent launch, w13
signals griddepcontrol.launch_dependents as it starts, and each w2 program loads its experts' rows (the
experts are the router's top-k ids, ready before w13 ran) BEFORE griddepcontrol.wait, which returns once
w13 has completed and h is visible. w13 is launched plainly, so the pair never overlaps what ran before it.
Measured on the H200 (bench/results/2026-12-04-h200-decode-tuning-zb/ze.md): 28.49 us at M = 1 (74% of the
HBM floor; one split, BLOCK_N 2, 8 warps, PDL on) against 30.19 for the 14-split control in the same job and
35.14 for the grouped kernel; 49.77 us at M = 2 (84%), 88.68 at M = 4 (91%). PDL is worth ~1.4 us at M = 1.
Tried and dropped (H200 table ZI, each beside its control in one job): w2 streamed into L2 during w13 (one
cp.async.bulk.prefetch.L2 of its share of the expert's w2 per w13 program, w13 read evict_first) LOST at every
M: 34.57 vs 30.35 us at M = 1 (ZE's winner), 60.34 vs 51.18 at M = 2, 110.88 vs 88.33 at M = 4. Likely why:
the prefetch adds w2's 29 MB to the HBM traffic of the w13 phase, whose rate (~3.1 TB/s at M = 1 in the block
profile) is the limit, and w2 then still pays its L2 pass; the dependency bubble between the two is not the
cost. The code went; this note keeps the numbers.
build(..., pdl=1) is the block's chain (bench/decode_layer.py's tuned_chain, the export's dispatch(..., pdl=1)): w13
is launched as a programmatic dependent of the router, so its launch and its programs' start overlap the router's
epilogue; it waits before its first read and lets w2 launch only after that wait, because w2 (PDL = 1) reads the
ids before its own. The service checks that form in its race (workers/chain.py) on sm_90+.
Every output element is written on every call by exactly one program; inputs are never written.
Under TRITON_INTERPRET=1 (CPU) the same code runs; programs run one after another, so the counter protocol
reduces to "the last split of a tile sums".
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_N": [2, 4, 8, 16],
    "BLOCK_K": [128, 256, 512, 1024],
    # 7, 14 and 28 split hidden 7168 into whole steps of 1024, 512 and 256 elements
    "SPLIT_K": [1, 2, 4, 7, 8, 14, 28],
    "num_warps": [1, 2, 4, 8],
    "BLOCK_N2": [1, 2, 4, 8],
    "BLOCK_K2": [64, 128, 256],
    "num_warps2": [1, 2, 4, 8],
    "PDL": [0, 1],
}
# Python expressions over config params and shape dims (K = hidden, I = intermediate per rank).
CONSTRAINTS = [
    "M <= 8",  # each pair is its own group: past 8 tokens, shared experts re-read (the grouped kernel sorts)
    "BLOCK_N <= I",
    "I % BLOCK_N == 0",
    # unrolled: every split the same whole number of BLOCK_K steps
    "K % BLOCK_K == 0 and (K // BLOCK_K) % SPLIT_K == 0",
    "BLOCK_N * BLOCK_K >= 256 * num_warps",               # whole 16-byte vectors of W per thread
    # <= 512 bytes in flight a thread: up to one whole K row pair per CTA (SPLIT_K 1: no partials, counter or
    # fence); ptxas keeps them without spills (80 registers at BLOCK_N 2, 8 warps; compiler report ZE)
    "(K // SPLIT_K) * (1 + 2 * BLOCK_N) <= 8192 * num_warps",
    "2 * BLOCK_N * BLOCK_K <= 2048 * num_warps",          # gate + up partials: <= 64 registers
    "I % BLOCK_K2 == 0",
    "top_k * BLOCK_N2 * BLOCK_K2 >= 256 * num_warps2",
    "top_k * I * (1 + BLOCK_N2) <= 4096 * num_warps2",
    "top_k * BLOCK_N2 * BLOCK_K2 <= 2048 * num_warps2",
    "PDL == 0 or BLOCK_K2 == I",  # the prefetched w2 tile is the program's whole share
]
DEFAULT = {"BLOCK_N": 4, "BLOCK_K": 512, "SPLIT_K": 14, "num_warps": 2,
           "BLOCK_N2": 1, "BLOCK_K2": 256, "num_warps2": 1, "PDL": 0}


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config: plain 16-byte vector loads of the weights (no cp.async:
    nothing is staged through shared memory) and, with SPLIT_K > 1, the arrival counter's acq_rel atomic."""
    c = {**DEFAULT, **config}
    out = ["ld.global.v4"]
    if int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    if int(c["PDL"]):
        out += ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    return {"ptx_contains": out}


@triton.jit
def w13_kernel(x_ptr, w13_ptr, ids_ptr, h_ptr, ws_ptr, cnt_ptr, stride_xm,
               K: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr, P: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, STEPS: tl.constexpr, PDL: tl.constexpr,
               CHAIN: tl.constexpr):
    if CHAIN:
        # a link of a layer's chain (build's pdl): launched while the router runs, it can fetch nothing before the
        # wait (its rows are the router's picks), and lets w2 launch only after it: w2 reads the ids before its own
        # wait, so they must be the router's finished output by the time any w2 program starts
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    elif PDL:  # let the w2 launch's programs start (and prefetch) once all of these have started
        tl.extra.cuda.gdc_launch_dependents()
    p = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    t = p // TOP_K
    e = tl.load(ids_ptr + p).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * (STEPS * BLOCK_K) + tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + t * stride_xm + offs_k
    g_ptrs = w13_ptr + e * (2 * I * K) + offs_n[:, None] * K + offs_k[None, :]
    u_ptrs = g_ptrs + I * K
    acc_g = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for s in tl.static_range(STEPS):  # straight-line: every load is independent of the sums
        wg = tl.load(g_ptrs + s * BLOCK_K)
        wu = tl.load(u_ptrs + s * BLOCK_K)
        x = tl.load(x_ptrs + s * BLOCK_K).to(tl.float32)
        acc_g += x[None, :] * wg.to(tl.float32)
        acc_u += x[None, :] * wu.to(tl.float32)
    gate = tl.sum(acc_g, axis=1)
    up = tl.sum(acc_u, axis=1)
    h_ptrs = h_ptr + p * I + offs_n
    if SPLIT_K == 1:
        tl.store(h_ptrs, (gate / (1.0 + tl.exp(-gate)) * up).to(h_ptr.dtype.element_ty))
    else:
        tile = p * (2 * I) + offs_n
        tl.store(ws_ptr + pid_k * (P * 2 * I) + tile, gate)
        tl.store(ws_ptr + pid_k * (P * 2 * I) + tile + I, up)
        # all threads' partial stores, then a CTA barrier, then the gpu-scope release of the counter
        tl.debug_barrier()
        cnt = cnt_ptr + p * (I // BLOCK_N) + pid_n
        seen = tl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu")
        if seen == SPLIT_K - 1:
            # the last split of this tile: the others' partials are visible; read them from L2 (.cg)
            g_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
            u_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                g_sum += tl.load(ws_ptr + s * (P * 2 * I) + tile, cache_modifier=".cg")
                u_sum += tl.load(ws_ptr + s * (P * 2 * I) + tile + I, cache_modifier=".cg")
            tl.store(h_ptrs, (g_sum / (1.0 + tl.exp(-g_sum)) * u_sum).to(h_ptr.dtype.element_ty))
            tl.atomic_xchg(cnt, 0, sem="relaxed", scope="gpu")


@triton.jit
def w2_kernel(h_ptr, w2_ptr, ids_ptr, tw_ptr, out_ptr, stride_om,
              K: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr, TOPK_PAD: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    pid_n = tl.program_id(0)
    t = tl.program_id(1)
    offs_j = tl.arange(0, TOPK_PAD)
    j_ok = offs_j < TOP_K
    e = tl.load(ids_ptr + t * TOP_K + offs_j, mask=j_ok, other=0).to(tl.int64)
    wt = tl.load(tw_ptr + t * TOP_K + offs_j, mask=j_ok, other=0.0).to(tl.float32)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < K
    offs_n_safe = tl.where(n_ok, offs_n, 0)  # clamped, not masked: the W load stays vectorised
    offs_k = tl.arange(0, BLOCK_K)
    jm = j_ok[:, None, None]  # constant along K: padded experts (top_k not a power of two) read nothing
    w_ptrs = w2_ptr + e[:, None, None] * (K * I) + offs_n_safe[None, :, None] * I + offs_k[None, None, :]
    h_ptrs = h_ptr + (t * TOP_K + offs_j)[:, None, None] * I + offs_k[None, None, :]
    if PDL:
        # w2 does not depend on w13: load this program's whole share first, then wait for h (BLOCK_K == I)
        w = tl.load(w_ptrs, mask=jm, other=0.0)
        tl.extra.cuda.gdc_wait()
        h = tl.load(h_ptrs, mask=jm, other=0.0)
        part = tl.sum(h.to(tl.float32) * w.to(tl.float32), axis=2)
    else:
        acc = tl.zeros((TOPK_PAD, BLOCK_N, BLOCK_K), dtype=tl.float32)
        for s in tl.static_range(I // BLOCK_K):
            w = tl.load(w_ptrs + s * BLOCK_K, mask=jm, other=0.0)
            h = tl.load(h_ptrs + s * BLOCK_K, mask=jm, other=0.0)
            acc += h.to(tl.float32) * w.to(tl.float32)
        part = tl.sum(acc, axis=2)
    out = tl.sum(part * wt[:, None], axis=0)  # the weighted combine over this token's experts
    tl.store(out_ptr + t * stride_om + offs_n, out.to(out_ptr.dtype.element_ty), mask=n_ok)


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT, **{k: int(v) for k, v in config.items()}}
    env = {**c, **{n: int(shape[n]) for n in ("M", "K", "I", "top_k")}}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} K={env['K']} I={env['I']} "
                             f"top_k={env['top_k']}")
    return c


def _metas(c: dict, shape: dict, pdl: bool, chain: bool = False) -> tuple[dict, dict]:
    m, k, i, top_k = (int(shape[n]) for n in ("M", "K", "I", "top_k"))
    w13 = dict(K=k, I=i, TOP_K=top_k, P=m * top_k, BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"],
               SPLIT_K=c["SPLIT_K"], STEPS=(k // c["BLOCK_K"]) // c["SPLIT_K"], PDL=pdl, CHAIN=chain)
    w2 = dict(K=k, I=i, TOP_K=top_k, TOPK_PAD=triton.next_power_of_2(top_k), BLOCK_N=c["BLOCK_N2"],
              BLOCK_K=c["BLOCK_K2"], PDL=pdl)
    return w13, w2


def compile_ptx(config: dict, shape: dict, arch: str, pdl: int = 0) -> str:
    """Ahead-of-time PTX of both kernels for ``arch`` (e.g. "sm_90a"), no GPU: the same specialisation the
    GPU build gets (16-byte aligned pointers; strides divisible by 16 where K is); pdl as build's."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    w13, w2 = _metas(c, shape, bool(c["PDL"]) and cc >= 90, bool(pdl) and cc >= 90)
    aligned_stride = int(shape["K"]) % 16 == 0
    ptx = []
    for fn, types, meta, warps in (
            (w13_kernel, {"x_ptr": "*bf16", "w13_ptr": "*bf16", "ids_ptr": "*i32", "h_ptr": "*bf16",
                          "ws_ptr": "*fp32", "cnt_ptr": "*i32", "stride_xm": "i32"}, w13, c["num_warps"]),
            (w2_kernel, {"h_ptr": "*bf16", "w2_ptr": "*bf16", "ids_ptr": "*i32", "tw_ptr": "*fp32",
                         "out_ptr": "*bf16", "stride_om": "i32"}, w2, c["num_warps2"])):
        sig = {**types, **{name: "constexpr" for name in meta}}
        attrs = {}
        for idx, name in enumerate(fn.arg_names):
            if types.get(name, "").startswith("*") or (name.startswith("stride") and aligned_stride):
                attrs[(idx,)] = [["tt.divisibility", 16]]
        src = ASTSource(fn=fn, signature=sig, constexprs=meta, attrs=attrs)
        ptx.append(triton.compile(src, target=GPUTarget("cuda", cc, 32),
                                  options={"num_warps": warps, "num_stages": 1,
                                           **({"launch_pdl": True} if (fn is w2_kernel and meta["PDL"])
                                              or (fn is w13_kernel and meta["CHAIN"]) else {})}
                                  ).asm["ptx"])
    return "\n".join(ptx)


def _home_device() -> torch.device:
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def build(config: dict, shape: dict, pdl: int = 0) -> Callable[..., None]:
    """pdl (a layer's chain of kernels, not a tuning parameter: the slot is timed from a clean start) 1 or 2: w13 is
    launched as a programmatic dependent launch of the kernel ahead (the router), waits for it before it reads
    anything, and then lets w2 launch; there is no early weight fetch to make (w13's rows are the router's picks),
    so 2 is 1. sm_90+ GPUs only: elsewhere it is off."""
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl={pdl!r}: one of (0, 1, 2)")
    c = check_constraints(config, shape)
    m, k, i, top_k = (int(shape[n]) for n in ("M", "K", "I", "top_k"))
    p = m * top_k
    home = _home_device()
    # griddepcontrol is PTX for sm_90+; the interpreter (CPU) runs the plain pair, same results
    sm90 = home.type == "cuda" and torch.cuda.get_device_capability(home)[0] >= 9
    pdl_pair, chained = bool(c["PDL"]) and sm90, bool(pdl) and sm90
    w13_meta, w2_meta = _metas(c, shape, pdl_pair, chained)
    n_tiles = i // c["BLOCK_N"]
    # Per device, allocated once (outside any graph capture): h, the split-K partials (every element the
    # reducer reads is rewritten on every call: no zeroing) and counters that must start at zero (each
    # call leaves them zero). Calls on one stream or one graph's replays are serialised, so reuse is safe.
    scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def alloc(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("moe_experts_gemv: call once outside CUDA-graph capture on this device first")
        bufs = (torch.empty((p, i), device=device, dtype=torch.bfloat16),
                torch.empty((max(c["SPLIT_K"], 1) * p * 2 * i,), device=device, dtype=torch.float32),
                torch.zeros((p * n_tiles,), device=device, dtype=torch.int32))
        scratch[device] = bufs
        return bufs

    alloc(home)

    def run(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
            topk_weights: torch.Tensor, out: torch.Tensor) -> None:
        if (x.shape != (m, k) or w13.shape[1:] != (2 * i, k) or w2.shape[1:] != (k, i) or w13.shape[0] != w2.shape[0]
                or topk_ids.shape != (m, top_k) or topk_weights.shape != (m, top_k) or out.shape != (m, k)):
            raise ValueError(f"shapes x{tuple(x.shape)} w13{tuple(w13.shape)} w2{tuple(w2.shape)} "
                             f"ids{tuple(topk_ids.shape)} out{tuple(out.shape)} != built M={m} K={k} I={i} "
                             f"top_k={top_k}")
        if not (w13.is_contiguous() and w2.is_contiguous() and x.stride(1) == 1 and out.stride(1) == 1):
            raise ValueError("w13 and w2 must be contiguous, x and out contiguous along their last dim")
        ids = topk_ids.contiguous()
        tw = topk_weights.contiguous()
        h, ws, cnt = scratch.get(x.device) or alloc(x.device)
        w13_kernel[(p, n_tiles, c["SPLIT_K"])](x, w13, ids, h, ws, cnt, x.stride(0), **w13_meta,
                                               num_warps=c["num_warps"], num_stages=1,
                                               **({"launch_pdl": True} if chained else {}))
        launch = {"launch_pdl": True} if pdl_pair else {}
        w2_kernel[(triton.cdiv(k, c["BLOCK_N2"]), m)](h, w2, ids, tw, out, out.stride(0), **w2_meta,
                                                      num_warps=c["num_warps2"], num_stages=1, **launch)

    return run
