"""dense_gemm in CuTe DSL: a GEMV on the tensor cores (mma.sync m16n8k16), fed straight from 16-byte loads.

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate, for M <= 16 (decode).

Why: the CUDA-core GEMVs (dense_gemm_ksplit_gemv.py, dense_gemm_warp_gemv.py, the Triton GEMV) spend M * 8 FMAs
and 8 bf16->fp32 conversions per 16-byte W vector, so at M = 9-16 the instructions alone take about as long as
fused_qkv_a's HBM floor, and the split-K/swap-AB kernels that use tensor cores stage W through shared memory. Here
each warp computes out^T = W x^T with W as the MMA's A operand (16 rows of N) and x^T as its B operand (8 columns
of M per n-tile), and no shared memory holds W or x:
- a sum over K does not depend on the order of K, so the MMA's logical K slots may map to any physical K as long
  as A and B use the same map. Lane (g, t) (g = lane / 4, t = lane % 4) holds A's K slots {2t, 2t+1, 2t+8, 2t+9}
  of rows g and g+8, and B's same K slots of column g. Mapping those slots to 4 consecutive physical K elements
  that depend only on t makes one 16-byte vector of W row g (8 elements of K) two MMAs' A operand (with row g+8's
  vector), and one 16-byte vector of x row g their B operand: the registers of the loads are the fragments.
- a warp step covers 32 elements of K (lane t's vector at t * 8) of 16 rows; a CTA owns RT row tiles (16 * RT
  rows) and its KWARPS warps interleave over K (warp w takes steps w, w + KWARPS, ...), so a CTA's warps read
  adjacent 64-byte pieces of each row together;
- the W and x vectors of UNROLL steps are loaded before the first MMA (all of a warp's K range when UNROLL covers
  it: one DRAM round trip per CTA);
- the KWARPS partial sums meet in shared memory after one barrier, and thread i sums output i's in warp order
  (deterministic) and stores it as bf16.
x rows past M are read as row M - 1 (in bounds) and their columns never stored. Every output element is written
on every call by exactly one thread; inputs are never written.

Shapes are compile-time constants (a build is per (N, K, M)) and the kernel takes raw pointers, as the other
CuTe GEMVs do.
"""
# No `from __future__ import annotations`: CuTe DSL reads cutlass.Constexpr annotations as objects.


import torch

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils
from cutlass._mlir.dialects import llvm
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import dsl_user_op

CONFIG_SPACE = {
    "RT": [1, 2, 4],               # 16-row tiles of W per CTA
    # warps per CTA, interleaved over K in 32-element steps; 3/6 and 7/14 divide q_lora_rank 1536 and hidden 7168
    "KWARPS": [1, 2, 3, 4, 6, 7, 8, 14, 16],
    "UNROLL": [1, 2, 3, 4, 6, 8, 12, 16],  # K steps whose W and x vectors are loaded before the first MMA
    # 1: first ask L2 for every W line of the warp's K range (no registers held), so the whole range is in flight
    # from DRAM at once even where ptxas places each load just before its MMA (it does: it keeps ~4 in flight)
    "PREFETCH": [0, 1],
}
CONSTRAINTS = [
    "M <= 16",                        # at most two n-tiles of 8 columns
    "N % (16 * RT) == 0",             # a CTA's row tiles are all in range
    "K % (32 * KWARPS) == 0",         # every warp the same whole number of 32-element steps
    "RT * UNROLL <= 16",              # W vectors in flight per thread (2 per row tile and step): <= 128 registers
    "UNROLL <= K // (32 * KWARPS)",   # no more unrolled steps than a warp has
    "KWARPS * RT * ((M + 7) // 8) <= 64",  # the cross-warp sums (n-tiles of 8 columns) fit 32 KB of shared memory
]
CLAIMS = {"ptx_contains": ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ld.global.v4", "bar.sync"]}

VEC = 8  # bf16 elements per 128-bit load
WARP = 32
STEP = 4 * VEC  # K elements of one warp step: 4 lanes (t = 0..3) of one row, a vector each


@dsl_user_op
def _prefetch_l2(ptr: cute.Pointer, *, loc=None, ip=None) -> None:
    # has_side_effects: an instruction with no result that the compiler must neither drop nor move past a barrier
    llvm.inline_asm(None, [ptr.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip)], "prefetch.global.L2 [$0];", "l",
                    has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


@cute.kernel
def _gemv_kernel(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor,
                 M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr,
                 RT: cutlass.Constexpr, KWARPS: cutlass.Constexpr, UNROLL: cutlass.Constexpr,
                 PREFETCH: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = tidx // WARP
    lane = tidx % WARP
    g = lane // 4
    t = lane % 4
    n0 = bidx * (16 * RT)
    NT = 1 if M <= 8 else 2           # n-tiles of 8 columns of M

    mma = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)))

    smem = cutlass.utils.SmemAllocator()
    # One fp32 partial per (warp, W row of the CTA, column of M): the cross-warp half of the K reduction.
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((KWARPS, 16 * RT, 8 * NT)), 16)

    # ((1, VEC), (rows, K // VEC)): one mode-0 slice is one 16-byte vector.
    gX = cute.zipped_divide(mX, (1, VEC))
    gW = cute.zipped_divide(mW, (1, VEC))

    # x row of this lane's B fragment per n-tile; rows past M read row M - 1 (their columns are never stored)
    xrow = [cutlass.min(8 * j + g, M - 1) if 8 * j + 8 > M else 8 * j + g for j in range(NT)]

    acc = cute.make_rmem_tensor(cute.make_layout((4, RT, NT)), cutlass.Float32)
    for i in cutlass.range_constexpr(4 * RT * NT):
        acc[i] = cutlass.Float32(0.0)
    a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), cutlass.BFloat16)  # (V, M, K) for cute.gemm

    steps = K // STEP // KWARPS                       # a Python int: the constraints make it whole
    if PREFETCH:
        # lane (g, t) asks for the 64-byte pieces of rows g and g + 8 of steps t, t + 4, ...: every line once
        for s4 in cutlass.range_constexpr((steps + 3) // 4):
            kv = ((s4 * 4 + t) * KWARPS + warp) * (STEP // VEC)
            if s4 * 4 + t < steps:
                for rt in cutlass.range_constexpr(RT):
                    for half in cutlass.range_constexpr(2):
                        _prefetch_l2(gW[(None, (n0 + rt * 16 + half * 8 + g, kv))].iterator)
    for c in cutlass.range_constexpr((steps + UNROLL - 1) // UNROLL):
        n_s = min(UNROLL, steps - c * UNROLL)
        # vector index along K of this lane in each step of the chunk
        kvs = [((c * UNROLL + s) * KWARPS + warp) * (STEP // VEC) + t for s in range(n_s)]
        # all W vectors of the chunk first, then x: one round trip for the chunk
        ws = []
        for kv in kvs:
            for rt in cutlass.range_constexpr(RT):
                for half in cutlass.range_constexpr(2):   # rows g and g + 8 of the tile
                    v = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16)
                    v.store(gW[(None, (n0 + rt * 16 + half * 8 + g, kv))].load())
                    ws.append(v)
        xs = []
        for kv in kvs:
            for j in cutlass.range_constexpr(NT):
                v = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16)
                v.store(gX[(None, (xrow[j], kv))].load())
                xs.append(v)
        for s in cutlass.range_constexpr(n_s):
            for rt in cutlass.range_constexpr(RT):
                w_lo, w_hi = ws[(s * RT + rt) * 2], ws[(s * RT + rt) * 2 + 1]
                for h in cutlass.range_constexpr(2):       # elements 0-3, then 4-7 of the vectors
                    # A fragment (PTX a0..a7): (g, 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1) (g, 2t+8) (g, 2t+9)
                    # (g+8, 2t+8) (g+8, 2t+9), K slots 2t, 2t+1, 2t+8, 2t+9 = elements 4h .. 4h+3
                    a[0] = w_lo[4 * h]
                    a[1] = w_lo[4 * h + 1]
                    a[2] = w_hi[4 * h]
                    a[3] = w_hi[4 * h + 1]
                    a[4] = w_lo[4 * h + 2]
                    a[5] = w_lo[4 * h + 3]
                    a[6] = w_hi[4 * h + 2]
                    a[7] = w_hi[4 * h + 3]
                    for j in cutlass.range_constexpr(NT):
                        # B fragment (b0..b3): column g, K slots 2t, 2t+1, 2t+8, 2t+9 = the same elements of x
                        b = cute.make_tensor(xs[s * NT + j].iterator + 4 * h, cute.make_layout((4, 1, 1)))
                        d = cute.make_tensor(acc.iterator + 4 * (rt + RT * j), cute.make_layout((4, 1, 1)))
                        cute.gemm(mma, d, a, b, d)

    # C fragment (c0..c3): (row g, col 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1) of each (row tile, n-tile)
    for rt in cutlass.range_constexpr(RT):
        for j in cutlass.range_constexpr(NT):
            for i in cutlass.range_constexpr(4):
                red[warp, rt * 16 + g + 8 * (i // 2), 8 * j + 2 * t + i % 2] = acc[i, rt, j]
    cute.arch.sync_threads()
    # M * 16 * RT outputs, n fastest (coalesced stores), over WARP * KWARPS threads
    threads = WARP * KWARPS
    outs = M * 16 * RT
    for p in cutlass.range_constexpr((outs + threads - 1) // threads):
        i = tidx + p * threads
        if i < outs:
            row = i % (16 * RT)
            m = i // (16 * RT)
            total = cutlass.Float32(0.0)
            for w in cutlass.range_constexpr(KWARPS):
                total = total + red[w, row, m]
            mO[m, n0 + row] = total.to(cutlass.BFloat16)


@cute.jit
def _gemv(x_ptr: cute.Pointer, w_ptr: cute.Pointer, o_ptr: cute.Pointer, stream: cuda.CUstream,
          M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr,
          RT: cutlass.Constexpr, KWARPS: cutlass.Constexpr, UNROLL: cutlass.Constexpr,
          PREFETCH: cutlass.Constexpr):
    mX = cute.make_tensor(x_ptr, cute.make_layout((M, K), stride=(K, 1)))
    mW = cute.make_tensor(w_ptr, cute.make_layout((N, K), stride=(K, 1)))
    mO = cute.make_tensor(o_ptr, cute.make_layout((M, N), stride=(N, 1)))
    _gemv_kernel(mX, mW, mO, M, N, K, RT, KWARPS, UNROLL, PREFETCH).launch(
        grid=(N // (16 * RT), 1, 1),
        block=(KWARPS * WARP, 1, 1),
        stream=stream,
    )


def _params(config: dict, shape: dict) -> tuple[int, int, int, int, int, int, int]:
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    rt = int(config.get("RT", 1))
    kwarps = int(config.get("KWARPS", 4))
    unroll = int(config.get("UNROLL", 2))
    prefetch = int(config.get("PREFETCH", 0))
    env = {"M": m, "N": n, "K": k, "RT": rt, "KWARPS": kwarps, "UNROLL": unroll, "PREFETCH": prefetch}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={m} N={n} K={k}")
    return m, n, k, rt, kwarps, unroll, prefetch


def _ptrs(x_addr: int, w_addr: int, o_addr: int) -> tuple:
    bf16, gmem = cutlass.BFloat16, cute.AddressSpace.gmem
    return (make_ptr(bf16, x_addr, gmem, assumed_align=16), make_ptr(bf16, w_addr, gmem, assumed_align=16),
            make_ptr(bf16, o_addr, gmem, assumed_align=16))


def _compile_args(config: dict, shape: dict, stream) -> tuple:
    # Any 16-byte aligned address serves for compiling: only the layouts are baked in.
    return (*_ptrs(16, 16, 16), stream, *_params(config, shape))


def compile_target(config: dict, shape: dict) -> tuple:
    """The @cute.jit function and its compile arguments, for an ahead-of-time compile with no GPU."""
    from cutlass.cute.runtime import make_fake_stream

    return _gemv, _compile_args(config, shape, make_fake_stream())


def build(config: dict, shape: dict):
    m, n, k, *_ = _params(config, shape)
    stream0 = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(_gemv, *_compile_args(config, shape, stream0))

    def run(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        # Static layouts: the tensors must be exactly the compiled shapes, contiguous, 16B aligned.
        if x.shape != (m, k) or w.shape != (n, k) or out.shape != (m, n):
            raise ValueError(f"shapes {tuple(x.shape)} {tuple(w.shape)} {tuple(out.shape)} != built M={m} N={n} K={k}")
        if not (x.is_contiguous() and w.is_contiguous() and out.is_contiguous()):
            raise ValueError("x, w and out must be contiguous")
        xa, wa, oa = x.data_ptr(), w.data_ptr(), out.data_ptr()
        if (xa | wa | oa) & 15:
            raise ValueError("x, w and out must be 16-byte aligned")
        # The current stream, so CUDA-graph capture and stream semantics hold.
        compiled(*_ptrs(xa, wa, oa), cuda.CUstream(torch.cuda.current_stream().cuda_stream))

    return run
