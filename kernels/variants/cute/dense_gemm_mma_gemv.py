"""dense_gemm in CuTe DSL: a GEMV on the tensor cores (mma.sync m16n8k16), fed straight from 16-byte loads.

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate, for M <= 16 (decode).

Why: the CUDA-core GEMVs (dense_gemm_ksplit_gemv.py, dense_gemm_warp_gemv.py, the Triton GEMV) spend M * 8 FMAs
and 8 bf16->fp32 conversions per 16-byte W vector, so at M = 9-16 the instructions alone take about as long as
fused_qkv_a's HBM floor, and the split-K/swap-AB kernels that use tensor cores stage W through shared memory. Here
no shared memory holds W or x: a sum over K does not depend on the order of K, so the MMA's logical K slots may
map to any physical K as long as A and B use the same map. Lane (g, t) (g = lane / 4, t = lane % 4) holds A's K
slots {2t, 2t+1, 2t+8, 2t+9} of A rows g and g+8, and B's same K slots of B column g; mapping those slots to 4
consecutive physical K elements that depend only on t makes one 16-byte vector (8 elements of K) the operand of
two MMAs: the registers of the loads are the fragments. Two orientations (WROWS):
- 16: out^T = W x^T, W rows g and g + 8 of a 16-row tile are A, x row 8j + g is B (n-tile j of 8 columns of M);
- 8: out = x W^T, x rows g and g + 8 are A (zeros past M <= 8), W row g of an 8-row tile is B: half the rows per
  CTA, so twice the CTAs on the same N.
A warp step covers 32 elements of K (lane t's vector at t * 8) of each row; a CTA owns RT row tiles and its KWARPS
warps interleave over K (warp w takes steps w, w + KWARPS, ...), so a CTA's warps read adjacent 64-byte pieces of
each row together. The W and x vectors of UNROLL steps are loaded before the chunk's MMAs in the source; the KWARPS
partial sums meet in shared memory after one barrier, and thread i sums output i's in warp order (deterministic)
and stores it as bf16. x rows past M are read as row M - 1 (in bounds) and their outputs never stored. Every output
element is written on every call by exactly one thread; inputs are never written.

Measured (session ZM, H100, the first form: WROWS 16 only, with an optional L2 prefetch since removed;
bench/results/2026-12-06-h100-decode-tuning-h100-zm.md and -h100-ncu-dense.md): correct in all 72 runs; it won
o_proj M = 4 (7.77 us against the K-split GEMV's 7.92 and cuBLAS's 8.14) and lost fused_qkv_a (14.7 us at M = 1,
20.4 at M = 16): ptxas issues each load ~4 MMAs ahead of its use, whatever the source order, so one 448-thread
CTA per SM kept too few bytes in flight (22% achieved occupancy, 57% of DRAM throughput in ncu); the prefetch
made 31 of 36 configs slower. Hence WROWS 8, up to 32 warps per CTA, and FENCE.
Measured (session ZN, H200, this form; bench/results/2026-12-06-h200-decode-tuning-zn.md): correct in all 90 runs;
fenced configs won q_b_proj M = 4 (4.15 us, 1.64x over cuBLAS) and M = 16 (4.60, 1.21x) and o_proj M = 4 (6.24,
1.08x). The best fenced config beat the best unfenced one at M = 16 of every shape, but at fused_qkv_a M = 16
(12.99 us) it still lost to the Triton split-K (11.46): 114 registers leave one CTA per SM and each chunk costs a
DRAM round trip (20.5% achieved occupancy, 41.6% of DRAM throughput in ncu, -h200-ncu-dense.md).

Shapes are compile-time constants (a build is per (N, K, M)) and the kernel takes raw pointers, as the other
CuTe GEMVs do.
"""
# No `from __future__ import annotations`: CuTe DSL reads cutlass.Constexpr annotations as objects.


import torch

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils
from cutlass.cute.runtime import make_ptr

CONFIG_SPACE = {
    # rows of W per MMA tile: 16 = W is the A operand (x^T the B operand, 8 columns of M per n-tile); 8 = W is the
    # B operand (x the A operand, all 16 rows of M in one MMA): half the rows per CTA, so twice the CTAs
    "WROWS": [8, 16],
    "RT": [1, 2, 4],               # row tiles of W per CTA
    # warps per CTA, interleaved over K in 32-element steps; 3/6/12/24 divide q_lora_rank 1536, 7/14/28 hidden 7168
    "KWARPS": [1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 28, 32],
    "UNROLL": [1, 2, 3, 4, 6, 7, 8, 12, 14, 16],  # K steps whose W and x vectors are loaded before the first MMA
    # 1: a CTA-scope fence after each chunk's loads, so ptxas issues them all before the chunk's MMAs (without it
    # ptxas places each load ~4 MMAs ahead of its use, whatever the source order): UNROLL steps in flight per lane
    "FENCE": [0, 1],
}
CONSTRAINTS = [
    "M <= 16",                        # all of M in 16 MMA rows (WROWS 8) or two n-tiles of 8 columns (WROWS 16)
    "N % (WROWS * RT) == 0",          # a CTA's row tiles are all in range
    "K % (32 * KWARPS) == 0",         # every warp the same whole number of 32-element steps
    "RT * WROWS // 8 * UNROLL <= 32",  # W vectors in flight per thread: <= 128 registers
    "UNROLL <= K // (32 * KWARPS)",   # no more unrolled steps than a warp has
    "KWARPS * WROWS * RT * ((M + 7) // 8) <= 1024",  # the cross-warp sums fit 32 KB of shared memory
    # with the fence all of a chunk's W and x vectors are live at once: <= 160 registers of them per thread, and
    # the CTA's threads times those registers within the SM's 65,536
    "FENCE * (RT * WROWS // 8 + (M + 7) // 8) * UNROLL <= 40",
    "FENCE * ((RT * WROWS // 8 + (M + 7) // 8) * UNROLL * 4 + 24) * 32 * KWARPS <= 65536",
]
CLAIMS = {"ptx_contains": ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ld.global.v4", "bar.sync"]}

VEC = 8  # bf16 elements per 128-bit load
WARP = 32
STEP = 4 * VEC  # K elements of one warp step: 4 lanes (t = 0..3) of one row, a vector each


def _a_fragment(a, lo, hi, h: int) -> None:
    """A's PTX registers a0..a7 are (row g, K slot 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1) (g, 2t+8) (g, 2t+9)
    (g+8, 2t+8) (g+8, 2t+9); K slots 2t, 2t+1, 2t+8, 2t+9 are elements 4h .. 4h+3 of the lane's vectors."""
    a[0] = lo[4 * h]
    a[1] = lo[4 * h + 1]
    a[2] = hi[4 * h]
    a[3] = hi[4 * h + 1]
    a[4] = lo[4 * h + 2]
    a[5] = lo[4 * h + 3]
    a[6] = hi[4 * h + 2]
    a[7] = hi[4 * h + 3]


def _vector(src):
    v = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16)
    v.store(src.load())
    return v


@cute.kernel
def _gemv_kernel(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor,
                 M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr, WROWS: cutlass.Constexpr,
                 RT: cutlass.Constexpr, KWARPS: cutlass.Constexpr, UNROLL: cutlass.Constexpr,
                 FENCE: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = tidx // WARP
    lane = tidx % WARP
    g = lane // 4
    t = lane % 4
    n0 = bidx * (WROWS * RT)
    MT = (M + 7) // 8                 # 8-row groups of M: n-tiles (WROWS 16), or A's halves in use (WROWS 8)
    NT = MT if WROWS == 16 else 1     # MMAs per row tile, K half and step

    mma = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)))

    smem = cutlass.utils.SmemAllocator()
    # One fp32 partial per (warp, W row of the CTA, column of M): the cross-warp half of the K reduction.
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((KWARPS, WROWS * RT, 8 * MT)), 16)

    # ((1, VEC), (rows, K // VEC)): one mode-0 slice is one 16-byte vector.
    gX = cute.zipped_divide(mX, (1, VEC))
    gW = cute.zipped_divide(mW, (1, VEC))

    # x row of this lane per 8-row group of M; rows past M read row M - 1 (their outputs are never stored)
    xrow = [cutlass.min(8 * j + g, M - 1) if 8 * j + 8 > M else 8 * j + g for j in range(MT)]

    acc = cute.make_rmem_tensor(cute.make_layout((4, RT, NT)), cutlass.Float32)
    for i in cutlass.range_constexpr(4 * RT * NT):
        acc[i] = cutlass.Float32(0.0)
    a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), cutlass.BFloat16)  # (V, M, K) for cute.gemm
    zero = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16)    # A's rows 8-15 when M <= 8
    for i in cutlass.range_constexpr(VEC):
        zero[i] = cutlass.BFloat16(0.0)

    steps = K // STEP // KWARPS                       # a Python int: the constraints make it whole
    for c in cutlass.range_constexpr((steps + UNROLL - 1) // UNROLL):
        n_s = min(UNROLL, steps - c * UNROLL)
        # vector index along K of this lane in each step of the chunk
        kvs = [((c * UNROLL + s) * KWARPS + warp) * (STEP // VEC) + t for s in range(n_s)]
        # all W vectors of the chunk first, then x: one round trip for the chunk if FENCE (else ptxas moves each
        # load towards its MMA; the H100 run of session ZM measured that an L2 prefetch of the range did not help)
        ws = [_vector(gW[(None, (n0 + rt * WROWS + half * 8 + g, kv))])
              for kv in kvs for rt in range(RT) for half in range(WROWS // 8)]
        xs = [_vector(gX[(None, (xrow[j], kv))]) for kv in kvs for j in range(MT)]
        if cutlass.const_expr(FENCE):
            cute.arch.fence_acq_rel_cta()   # no load above moves below it: they are all in flight together
        for s in cutlass.range_constexpr(n_s):
            for rt in cutlass.range_constexpr(RT):
                for h in cutlass.range_constexpr(2):       # elements 0-3, then 4-7 of the vectors
                    if cutlass.const_expr(WROWS == 16):
                        # A: W rows g, g + 8 of the tile; B (b0..b3): x row 8j + g, K slots as A's
                        _a_fragment(a, ws[(s * RT + rt) * 2], ws[(s * RT + rt) * 2 + 1], h)
                        for j in cutlass.range_constexpr(NT):
                            b = cute.make_tensor(xs[s * MT + j].iterator + 4 * h, cute.make_layout((4, 1, 1)))
                            d = cute.make_tensor(acc.iterator + 4 * (rt + RT * j), cute.make_layout((4, 1, 1)))
                            cute.gemm(mma, d, a, b, d)
                    else:
                        # A: x rows g, g + 8; B: W row g of the tile
                        _a_fragment(a, xs[s * MT], xs[s * MT + 1] if MT == 2 else zero, h)
                        b = cute.make_tensor(ws[s * RT + rt].iterator + 4 * h, cute.make_layout((4, 1, 1)))
                        d = cute.make_tensor(acc.iterator + 4 * rt, cute.make_layout((4, 1, 1)))
                        cute.gemm(mma, d, a, b, d)

    # C (c0..c3): (A row g, B column 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1) of each (row tile, n-tile)
    for rt in cutlass.range_constexpr(RT):
        for j in cutlass.range_constexpr(NT):
            for i in cutlass.range_constexpr(4 if MT == 2 or WROWS == 16 else 2):
                if cutlass.const_expr(WROWS == 16):
                    red[warp, rt * 16 + g + 8 * (i // 2), 8 * j + 2 * t + i % 2] = acc[i, rt, j]
                else:
                    red[warp, rt * 8 + 2 * t + i % 2, g + 8 * (i // 2)] = acc[i, rt, j]
    cute.arch.sync_threads()
    # M * WROWS * RT outputs, n fastest (coalesced stores), over WARP * KWARPS threads
    threads = WARP * KWARPS
    rows = WROWS * RT
    outs = M * rows
    for p in cutlass.range_constexpr((outs + threads - 1) // threads):
        i = tidx + p * threads
        if i < outs:
            row = i % rows
            m = i // rows
            total = cutlass.Float32(0.0)
            for w in cutlass.range_constexpr(KWARPS):
                total = total + red[w, row, m]
            mO[m, n0 + row] = total.to(cutlass.BFloat16)


@cute.jit
def _gemv(x_ptr: cute.Pointer, w_ptr: cute.Pointer, o_ptr: cute.Pointer, stream: cuda.CUstream,
          M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr,
          WROWS: cutlass.Constexpr, RT: cutlass.Constexpr, KWARPS: cutlass.Constexpr, UNROLL: cutlass.Constexpr,
          FENCE: cutlass.Constexpr):
    mX = cute.make_tensor(x_ptr, cute.make_layout((M, K), stride=(K, 1)))
    mW = cute.make_tensor(w_ptr, cute.make_layout((N, K), stride=(K, 1)))
    mO = cute.make_tensor(o_ptr, cute.make_layout((M, N), stride=(N, 1)))
    _gemv_kernel(mX, mW, mO, M, N, K, WROWS, RT, KWARPS, UNROLL, FENCE).launch(
        grid=(N // (WROWS * RT), 1, 1),
        block=(KWARPS * WARP, 1, 1),
        stream=stream,
    )


def _params(config: dict, shape: dict) -> tuple[int, int, int, int, int, int, int, int]:
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    wrows = int(config.get("WROWS", 16))
    rt = int(config.get("RT", 1))
    kwarps = int(config.get("KWARPS", 4))
    unroll = int(config.get("UNROLL", 2))
    fence = int(config.get("FENCE", 0))
    env = {"M": m, "N": n, "K": k, "WROWS": wrows, "RT": rt, "KWARPS": kwarps, "UNROLL": unroll, "FENCE": fence}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={m} N={n} K={k}")
    return m, n, k, wrows, rt, kwarps, unroll, fence


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
