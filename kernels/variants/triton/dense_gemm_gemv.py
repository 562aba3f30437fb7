"""dense_gemm in Triton: CUDA-core GEMV for the smallest decode batches (M = 1..16), split-K in ONE launch.

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate.

Why not the tensor-core split-K kernel (dense_gemm_splitk.py) at M <= 16: tl.dot needs a 16-row tile, so
at M = 1..8 most of its math is padding, and with SPLIT_K > 1 it launches a second reduce kernel. In a
CUDA graph each extra launch costs ~1-2 us, while q_b_proj's whole HBM floor is ~1.1 us. So here:
- each program owns BLOCK_N rows of W and one K range; W tiles [BLOCK_N, BLOCK_K] are contiguous along K
  (16-byte vector loads or cp.async, unmasked when BLOCK_K divides K) and read exactly once; x[M, k-tile]
  is tiny and cache-resident. No tl.dot: broadcast multiply-adds on the CUDA cores into fp32 partial sums
  [BLOCK_M, BLOCK_N, BLOCK_K], reduced over K once after the loop, so BLOCK_M is the next power of two
  >= M, down to 1. (At M = 16 that is 16 FMAs per W element, about what the CUDA cores can do at HBM
  rate: larger M belongs to the tensor-core kernel, and the constraints stop at 16.)
- SPLIT_K > 1 shares the K steps out across programs (cdiv(N, BLOCK_N) * SPLIT_K CTAs: enough for 132
  SMs even at N = 1536). Each split stores an fp32 partial into a workspace [SPLIT_K, M, N], then bumps a
  per-N-tile int32 counter with an acq_rel gpu-scope atomic; the program that sees SPLIT_K - 1 (the last
  one of its tile) sums the partials in split order (deterministic), writes bf16 out and resets the
  counter to 0 for the next call (e.g. the next CUDA-graph replay). Ordering is CUTLASS's GenericBarrier
  pattern: all threads store, CTA barrier, one thread's release (the atomic); one thread's acquire (the
  same atomic), CTA barrier, all threads read (.cg: from L2). Workspace and counters are allocated once
  per built kernel (at build on the current device; lazily, outside graph capture, on another device).
Every output element is written on every call by exactly one program; inputs are never written.

num_stages = 0 is the one-round-trip mode: each split is a whole number of BLOCK_K steps known at compile
time (a constexpr), unrolled with static_range: no load waits on another or on a sum, so they can all be
in flight at once and a program waits for DRAM about once, not once per K step (sm_90a PTX for q_b_proj
at BLOCK_N 4, BLOCK_K 512, SPLIT_K 1: all 15 vector loads come before the first FMA). At decode sizes that wait (~1 us)
is the floor's own order of magnitude (q_b_proj: 4.7 MB, 1.1 us), so a runtime K loop of 2-3 steps pays it
2-3 times. The constraints keep the bytes in flight at <= 256 per thread: a GEMV mode for M <= 8.

Tried and dropped (H200 table ZF, commit 5554bf7): summing each thread's 16-byte W vector in registers every
K step (partials [BLOCK_M, BLOCK_N, BLOCK_K / 8], 8x fewer accumulator registers, so M = 4 could keep M = 1's
wide tiles). It lost at every config tried, beside the elementwise-partials control in the same job: M = 1
12.47 vs 9.94 us at the same tiles, M = 4 14.44 at best vs 11.10. ptxas showed the same 16-byte cp.async, but
the products no longer contracted into FMAs (32 fma + 88 add a step vs 64 fma) and each thread's sums became
chains of 8 dependent adds.

Under TRITON_INTERPRET=1 (CPU) the same code runs: the interpreter executes programs one after another,
so the counter protocol reduces to "the last split of a tile sums". There is no tl.dot, so no UPCAST
switch is needed: both paths convert the bf16 operands to fp32 explicitly.
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [1, 2, 4, 8, 16],
    "BLOCK_N": [4, 8, 16, 32, 64],
    "BLOCK_K": [128, 256, 512, 1024],
    # 3/6/12 and 7/14 split q_lora_rank 1536 and hidden 7168 into whole 512-element steps: at SPLIT_K 14,
    # BLOCK_N 16 fused_qkv_a is 1,848 CTAs of one 16 KB round trip each, the shape of the fastest plain
    # read of those bytes (bench/results/2026-12-03-h200-latency-floor.md)
    "SPLIT_K": [1, 2, 3, 4, 6, 7, 8, 12, 14, 16],
    "num_warps": [1, 2, 4, 8],
    "num_stages": [0, 1, 2, 3, 4],  # 0: the K range unrolled, all loads up front (see the docstring)
}
# Python expressions over config params and shape dims; a config must satisfy all of them.
CONSTRAINTS = [
    "M <= 16",                            # larger M is the tensor-core kernel's job
    "BLOCK_M >= M",
    "BLOCK_M < 2 * M",                    # exactly one BLOCK_M per M: the next power of two
    "BLOCK_K * SPLIT_K <= K",             # every split gets at least one K step
    "BLOCK_N <= N",
    "BLOCK_N * BLOCK_K >= 256 * num_warps",  # every thread loads whole 16-byte vectors of W
    "BLOCK_M * BLOCK_N * BLOCK_K <= 4096 * num_warps",  # fp32 partial sums: <= 128 registers a thread
    # unrolled: every split the same whole number of BLOCK_K steps; <= 256 bytes of W and x in flight a thread
    # and <= 64 accumulator registers (without these, M = 16 at K = 7168 compiled to 255 registers and
    # spilled: bench/compiler_report.py --plan)
    "num_stages > 0 or (K % BLOCK_K == 0 and (K // BLOCK_K) % SPLIT_K == 0)",
    "num_stages > 0 or (K // SPLIT_K) * (BLOCK_M + BLOCK_N) <= 4096 * num_warps",
    "num_stages > 0 or BLOCK_M * BLOCK_N * BLOCK_K <= 2048 * num_warps",
]
DEFAULT = {"BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3}


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config (checked by compiling on the CPU)."""
    c = {**DEFAULT, **config}
    # num_stages > 1: the software pipeliner streams W through shared memory with 16-byte cp.async
    # (the K loop's bounds are runtime values, so it is always pipelined); num_stages == 1: plain 16-byte
    # vector loads straight into registers.
    out = []
    if int(shape.get("K", 16)) % 16 == 0:  # else Triton cannot prove 16-byte alignment: scalar loads
        out.append("cp.async.cg.shared.global" if int(c["num_stages"]) > 1 else "ld.global.v4")  # 0 and 1: plain
    if int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")  # the split-K arrival counter
    return {"ptx_contains": out}


@triton.jit
def gemv_splitk_kernel(x_ptr, w_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K,
                       stride_xm, stride_wn, stride_om,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, EVEN_M: tl.constexpr,
                       NUM_STAGES: tl.constexpr, STEPS_PER_SPLIT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    # Clamp W rows instead of masking them: out-of-range rows read a valid row and are never stored,
    # which keeps the W load unmasked (and vectorised) on the EVEN_K path.
    offs_n_safe = tl.where(n_ok, offs_n, 0)
    # Whole BLOCK_K steps shared out as evenly as possible (K = 7168 over 2 splits of 1024: 4 + 3 steps),
    # so no split needs a K mask unless BLOCK_K itself does not divide K.
    n_steps = tl.cdiv(K, BLOCK_K)
    step_lo = (pid_k * n_steps) // SPLIT_K
    step_hi = ((pid_k + 1) * n_steps) // SPLIT_K
    # 3-D pointer tiles, so each load gets its own coalesced layout (8 contiguous K elements = 16 bytes per
    # thread) and the product needs no layout shuffle: x [BLOCK_M, 1, BLOCK_K], W [1, BLOCK_N, BLOCK_K].
    k_lo = step_lo * BLOCK_K
    x_ptrs = x_ptr + offs_m[:, None, None] * stride_xm + (k_lo + offs_k)[None, None, :]
    w_ptrs = w_ptr + offs_n_safe[None, :, None] * stride_wn + (k_lo + offs_k)[None, None, :]
    m_ok3 = m_ok[:, None, None]
    # Elementwise fp32 partial sums, reduced over K once after the loop: a per-step tl.sum would pay a
    # cross-thread (shuffle / shared-memory) reduction on every K step (2-3x the loop's instructions at
    # M = 1 on sm_90a). CONSTRAINTS bound this accumulator to <= 128 registers per thread.
    acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
    if NUM_STAGES == 0:
        # Straight-line code: the loads do not depend on each other or on the sums, so all are in
        # flight at once (EVEN_K and an even split are constraints of this mode).
        for s in tl.static_range(STEPS_PER_SPLIT):
            w = tl.load(w_ptrs + s * BLOCK_K)
            if EVEN_M:
                x = tl.load(x_ptrs + s * BLOCK_K)
            else:
                x = tl.load(x_ptrs + s * BLOCK_K, mask=m_ok3, other=0.0)
            acc += x.to(tl.float32) * w.to(tl.float32)
    else:
        for step in tl.range(step_lo, step_hi, num_stages=NUM_STAGES):
            if EVEN_K:
                w = tl.load(w_ptrs)
                if EVEN_M:
                    x = tl.load(x_ptrs)
                else:
                    x = tl.load(x_ptrs, mask=m_ok3, other=0.0)
            else:
                k_ok = ((step * BLOCK_K + offs_k) < K)[None, None, :]
                w = tl.load(w_ptrs, mask=k_ok, other=0.0)
                x = tl.load(x_ptrs, mask=m_ok3 & k_ok, other=0.0)
            acc += x.to(tl.float32) * w.to(tl.float32)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
    acc = tl.sum(acc, axis=2)
    mask = m_ok[:, None] & n_ok[None, :]
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tile = offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws_ptr + pid_k * M * N + tile, acc, mask=mask)
        # Every thread's partial store is ordered before the release below (CTA barrier, then the
        # cumulative gpu-scope release of the atomic).
        tl.debug_barrier()
        seen = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if seen == SPLIT_K - 1:
            # The last split of this N tile: the acquire made the others' partials visible; read them
            # from L2 (.cg), never from a possibly stale L1 line, and sum in split order.
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(ws_ptr + s * M * N + tile, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(out_ptrs, total.to(out_ptr.dtype.element_ty), mask=mask)
            # Every split of this tile has counted, so nobody else touches the counter in this launch:
            # zero it for the next launch (stream order publishes it).
            tl.atomic_xchg(cnt_ptr + pid_n, 0, sem="relaxed", scope="gpu")


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT, **{k: int(v) for k, v in config.items()}}
    env = {**c, "M": int(shape["M"]), "N": int(shape["N"]), "K": int(shape["K"])}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} N={env['N']} K={env['K']}")
    return c


def _meta(c: dict, shape: dict) -> dict:
    return {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"], "SPLIT_K": c["SPLIT_K"],
            "EVEN_K": int(shape["K"]) % c["BLOCK_K"] == 0, "EVEN_M": int(shape["M"]) == c["BLOCK_M"],
            "NUM_STAGES": c["num_stages"],
            "STEPS_PER_SPLIT": (int(shape["K"]) // c["BLOCK_K"]) // c["SPLIT_K"] if c["num_stages"] == 0 else 0}


def compile_ptx(config: dict, shape: dict, arch: str) -> str:
    """Ahead-of-time PTX for ``arch`` (e.g. "sm_90a") with no GPU, for the same specialisation the
    GPU build uses (contiguous, 16-byte aligned tensors; M, N, K and strides as runtime ints)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    ptr = "*bf16"
    sig = {"x_ptr": ptr, "w_ptr": ptr, "out_ptr": ptr, "ws_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32",
           "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_om": "i32"}
    meta = _meta(c, shape)
    sig.update({name: "constexpr" for name in meta})
    # Pointers 16-byte aligned and ints divisible by 16 where the shape makes them so: what Triton
    # specialises on for real torch tensors of these shapes (attrs in the [["tt.divisibility", 16]] form).
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4)}
    if int(shape["K"]) % 16 == 0:
        for i in (7, 8, 9):  # K, stride_xm, stride_wn
            attrs[(i,)] = [["tt.divisibility", 16]]
    if int(shape["N"]) % 16 == 0:
        for i in (6, 10):  # N, stride_om
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=gemv_splitk_kernel, signature=sig, constexprs=meta, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                            options={"num_warps": c["num_warps"], "num_stages": max(c["num_stages"], 1)})
    return kernel.asm["ptx"]


def _home_device() -> torch.device:
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def build(config: dict, shape: dict) -> Callable[..., None]:
    c = check_constraints(config, shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    meta = _meta(c, shape)
    split = c["SPLIT_K"]
    n_tiles = triton.cdiv(n, c["BLOCK_N"])
    grid = (n_tiles, split)
    # Split-K scratch, per device: fp32 partials (every element the reducer reads is rewritten by its
    # split on every call, so no zeroing) and counters that MUST start at zero (each call leaves them
    # zero again). One set per built fn: calls on one stream (or one graph's replays) are serialised,
    # so reuse is safe; the same fn running concurrently on two streams would race on them.
    scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def alloc(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Allocated inside a capture the buffers would belong to the graph's private pool.
            raise RuntimeError("dense_gemm_gemv: call once outside CUDA-graph capture on this device first")
        bufs = (torch.empty((split, m, n), device=device, dtype=torch.float32),
                torch.zeros((n_tiles,), device=device, dtype=torch.int32))
        scratch[device] = bufs
        return bufs

    if split > 1:
        alloc(_home_device())

    def run(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        if x.shape != (m, k) or w.shape != (n, k) or out.shape != (m, n):
            raise ValueError(f"shapes {tuple(x.shape)} {tuple(w.shape)} {tuple(out.shape)} != built M={m} N={n} K={k}")
        if x.stride(1) != 1 or w.stride(1) != 1 or out.stride(1) != 1:
            raise ValueError("x, w and out must be contiguous along their last dim")
        if split > 1:
            ws, cnt = scratch.get(x.device) or alloc(x.device)
        else:
            ws, cnt = out, out  # unused when SPLIT_K == 1 (that branch is compiled out)
        gemv_splitk_kernel[grid](x, w, out, ws, cnt, m, n, k, x.stride(0), w.stride(0), out.stride(0), **meta,
                                 num_warps=c["num_warps"], num_stages=max(c["num_stages"], 1))

    return run
