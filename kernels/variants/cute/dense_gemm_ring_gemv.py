"""dense_gemm in CuTe DSL: the tensor-core GEMV (mma.sync m16n8k16) with W streamed through a per-thread ring of
shared memory that cp.async fills STAGES - 1 steps ahead.

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate, for M <= 16 (decode).

Why: dense_gemm_mma_gemv.py feeds its MMAs from the registers of 16-byte global loads, so the bytes a thread has in
flight are registers. Unfenced, ptxas issues each load ~4 MMAs ahead of its use; fenced, a whole chunk is in
flight but drains before the next one starts (a DRAM round trip per chunk), and at fused_qkv_a M = 16 its 114
registers left one CTA per SM: 20.5% achieved occupancy, 41.6% of DRAM throughput in Nsight Compute (session ZN,
bench/results/2026-12-06-h200-ncu-dense.md), 12.99 us against the Triton split-K's 11.46. Here the loads are
cp.async copies into shared memory, which hold no registers while in flight: a thread keeps STAGES - 1 steps of
its W vectors (and its x vectors, XRING 1) in flight at all times, the way a multistage GEMM keeps its tiles, and
reads a step back with ld.shared just before the step's MMAs.
Each thread reads back only the bytes it copied itself, so cp.async.wait_group alone orders the copy before the
read: no barrier in the loop. A slot is refilled one step after it was read (its registers have fed that step's
MMAs), so no copy overwrites bytes a read still needs. The ring is laid out thread-fastest in 16-byte units, so a
warp's 32 copies or reads of one vector touch 512 contiguous bytes (no bank conflicts).

The MMA mapping is the one of dense_gemm_mma_gemv.py: a sum over K does not depend on the order of K, so lane
(g, t) (g = lane / 4, t = lane % 4) takes A's K slots {2t, 2t+1, 2t+8, 2t+9} and B's same slots from 4 consecutive
elements of one 16-byte vector (elements 4h .. 4h+3 for the step's two K halves h): the vector read back is the
fragment. WROWS 16: W rows g and g + 8 of a 16-row tile are A, x row 8j + g is B (n-tile j); WROWS 8: x rows g and
g + 8 are A (zeros past M <= 8), W row g of an 8-row tile is B. A warp step covers 32 elements of K (lane t's
vector at t * 8); a CTA owns RT row tiles and its KWARPS warps interleave over K (warp w takes steps w, w + KWARPS,
...); the KWARPS partial sums meet in shared memory after one barrier, and thread i sums output i's in warp order
(deterministic) and stores it as bf16. x rows past M are read as row M - 1 (in bounds) and their outputs never
stored. Every output element is written on every call by exactly one thread; inputs are never written.

KSPLIT > 1 splits K over that many CTAs per row block (grid y), each on a contiguous slice: every CTA reads all of
x over its K, so at 16-row tiles and M = 16 x's bytes from L2 equal W's; RT 2-4 row tiles per CTA cut that to a
half or a quarter and KSPLIT keeps the CTA count. Each CTA stores its fp32 partials to the build's own buffer,
fences, and counts itself in with one atomic per CTA; the CTA that counts last fences, adds the KSPLIT partials of
each output in K order (deterministic), stores bf16 and sets the counter back to 0 for the next call. A build's
buffers serve one stream at a time, as a decode step's kernels do.

Measured (session ZP, H100, KSPLIT 1 only; bench/results/2026-12-06-h100-decode-tuning-h100-zp.md): correct in
all 70 runs and in the export's self-test; won o_proj M = 16 (8.12 us against cuBLAS's 8.26, which had won every
earlier H100 table there) and q_b_proj M = 16 (5.05); second at fused_qkv_a M = 16 (14.41 against the Triton
split-K's 14.04; the fenced tensor-core GEMV took 14.79). 16-row tiles beat 8-row tiles at every M (fused_qkv_a
M = 16: 14.66 against 17.64 us at 8 warps), and x loaded at the step (XRING 0) lost every pair, hence KSPLIT.
Measured (session ZQ, H100; -h100-zq.md): all 44 KSPLIT runs correct, none faster than its KSPLIT 1 reference
(fused_qkv_a M = 16: 15.43 against 14.52 us; Nsight Compute: 53.8% against 62.5% of DRAM throughput), so x's L2
traffic is not what holds the KSPLIT 1 kernel back; the last CTA's atomic and partial reads add a round trip.
ROTATE 1 tries the other reading of the same data: all CTAs read x in the same order, so at any moment they ask
a few L2 slices for the same lines; CTA b starts its loop at step b mod steps instead.
Measured (sessions ZS and ZT, H100; -h100-zs.md, -h100-zt.md): ROTATE 1 faster in 18 of 27 pairs (q_b_proj
M = 16: 4.69 against 5.31 us; fused_qkv_a M = 16: 13.85 against 14.34, ncu 64.9% against 62.7% of DRAM
throughput); the ring now holds the H100's M = 4 and 16 buckets of all three shapes. Not yet run on an H200.

build(config, shape, pdl=1) is the same kernel as a link of a chain of programmatic dependent launches (a layer's
choice, not a tuning parameter): it lets the next kernel launch at once, copies the prologue's W, waits for the kernel
ahead (griddepcontrol.wait) and only then copies x, as groups of their own (groups complete in order, so the loop's
waits are unchanged); pdl=2 first asks the CTA's W slice into L2. Measured (session ZY, H100;
bench/results/2026-12-06-h100-chain-check-zy.json): bitwise equal to the plain build behind a producer of its x;
q_b_proj M = 4 pair 5.70 -> 4.80 us, o_proj M = 16 10.26 -> 9.34; the L2 prefetch lost at fused_qkv_a.

Shapes are compile-time constants (a build is per (N, K, M)) and the kernel takes raw pointers, as the other
CuTe GEMVs do.
"""
# No `from __future__ import annotations`: CuTe DSL reads cutlass.Constexpr annotations as objects.


import torch

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils
from cutlass._mlir.dialects import llvm, nvvm
from cutlass._mlir.dialects.nvvm import AtomicOpKind, MemOrderKind, MemScopeKind
from cutlass.cute.nvgpu import cpasync
from cutlass.cute.runtime import make_ptr
from cutlass.cutlass_dsl import T, dsl_user_op

CONFIG_SPACE = {
    # rows of W per MMA tile: 16 = W is the A operand (x^T the B operand, 8 columns of M per n-tile); 8 = W is the
    # B operand (x the A operand, all 16 rows of M in one MMA): half the rows per CTA, so twice the CTAs
    "WROWS": [8, 16],
    "RT": [1, 2, 4],               # row tiles of W per CTA
    # warps per CTA, interleaved over K in 32-element steps; 3/6/12/24 divide q_lora_rank 1536, 7/14/28 hidden 7168
    "KWARPS": [1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 28, 32],
    "STAGES": [2, 3, 4, 6, 8, 12, 16],  # ring slots per thread: STAGES - 1 steps in flight while one is computed
    "XRING": [0, 1],  # 1: x's vectors go through the ring too; 0: plain loads at the step (x is small, L2-resident)
    # CTAs per row block, each on a contiguous 1/KSPLIT of K: every CTA reads all of x for its K, so more rows per
    # CTA (RT) cut x's L2 traffic and KSPLIT keeps the CTA count; the last CTA of a row block to finish adds the
    # KSPLIT fp32 partials in K order and stores bf16
    "KSPLIT": [1, 2, 3, 4, 7, 8],
    # 1: CTA b starts its K loop at step b mod steps (a rotation of the same sum), so that the CTAs, which all read
    # the same x, do not ask the same L2 slices for the same lines of x at the same moment
    "ROTATE": [0, 1],
}
CONSTRAINTS = [
    "M <= 16",                        # all of M in 16 MMA rows (WROWS 8) or two n-tiles of 8 columns (WROWS 16)
    "N % (WROWS * RT) == 0",          # a CTA's row tiles are all in range
    "K % (32 * KWARPS * KSPLIT) == 0",         # every warp the same whole number of 32-element steps
    "STAGES <= K // (32 * KWARPS * KSPLIT)",   # no more slots than a warp has steps
    "K // (32 * KWARPS * KSPLIT) <= 112",      # the loop is unrolled at compile time: bounded code size
    "KWARPS * WROWS * RT * ((M + 7) // 8) <= 1024",  # the cross-warp sums fit 32 KB of shared memory
    # the ring (16 bytes per thread, vector and slot), the cross-warp sums and the counter's word within the
    # SM's 227 KB
    "STAGES * (RT * WROWS // 8 + XRING * ((M + 7) // 8)) * 32 * KWARPS * 16"
    " + KWARPS * WROWS * RT * 8 * ((M + 7) // 8) * 4 + 16 <= 232448",
]
CLAIMS = {"ptx_contains": ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "cp.async.cg.shared.global",
                           "cp.async.wait_group", "bar.sync"]}

PDL_LEVELS = (0, 1, 2)  # build's pdl: off; chained; chained with the CTA's W slice prefetched into L2
VEC = 8  # bf16 elements per 16-byte vector
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


@dsl_user_op
def _atomic_add(ptr: cute.Pointer, value: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Int32:
    """atom.add.u32 at GPU scope, relaxed: the writers' fences before it and the reader's fence after it order
    the partials (the fence-fence synchronisation of the PTX memory model)."""
    return cutlass.Int32(nvvm.atomicrmw(T.i32(), AtomicOpKind.ADD, ptr.llvm_ptr, value.ir_value(loc=loc, ip=ip),
                                        mem_order=MemOrderKind.RELAXED, syncscope=MemScopeKind.GPU, loc=loc, ip=ip))


@dsl_user_op
def _prefetch_l2(ptr: cute.Pointer, nbytes: int, *, loc=None, ip=None) -> None:
    """cp.async.bulk.prefetch.L2 of nbytes (a multiple of 16) from ptr (16-byte aligned): no registers, no shared
    memory, nothing waits on it. has_side_effects: the compiler must neither drop it nor move it."""
    llvm.inline_asm(None, [ptr.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip),
                           cutlass.Int32(nbytes).ir_value(loc=loc, ip=ip)],
                    "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r",
                    has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


def _vector(src):
    v = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16)
    v.store(src.load())
    return v


@cute.kernel
def _gemv_kernel(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, mP: cute.Tensor, mC: cute.Tensor,
                 M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr, WROWS: cutlass.Constexpr,
                 RT: cutlass.Constexpr, KWARPS: cutlass.Constexpr, STAGES: cutlass.Constexpr,
                 XRING: cutlass.Constexpr, KSPLIT: cutlass.Constexpr, ROTATE: cutlass.Constexpr,
                 PDL: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, kz, _ = cute.arch.block_idx()   # row block, K slice
    warp = tidx // WARP
    lane = tidx % WARP
    g = lane // 4
    t = lane % 4
    n0 = bidx * (WROWS * RT)
    MT = (M + 7) // 8                 # 8-row groups of M: n-tiles (WROWS 16), or A's halves in use (WROWS 8)
    NT = MT if WROWS == 16 else 1     # MMAs per row tile, K half and step
    VW = RT * WROWS // 8              # W vectors of a thread per step
    VX = MT * XRING                   # x vectors of a thread per step that go through the ring
    THREADS = WARP * KWARPS

    mma = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(cutlass.BFloat16, cutlass.Float32, (16, 8, 16)))
    # W bypasses L1 (read once); x may hit L1, as other CTAs on the SM read the same x
    copy_w = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), cutlass.BFloat16,
                                 num_bits_per_copy=128)
    copy_x = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.ALWAYS), cutlass.BFloat16,
                                 num_bits_per_copy=128)

    smem = cutlass.utils.SmemAllocator()
    # (vector, thread, vector of the step, slot): thread-fastest 16-byte units
    ring = smem.allocate_tensor(cutlass.BFloat16, cute.make_layout(((1, VEC), THREADS, VW + VX, STAGES)), 16)
    # One fp32 partial per (warp, W row of the CTA, column of M): the cross-warp half of the K reduction.
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((KWARPS, WROWS * RT, 8 * MT)), 16)
    last = smem.allocate_tensor(cutlass.Int32, cute.make_layout(1), 4)  # KSPLIT > 1: the counter's old value

    # ((1, VEC), (rows, K // VEC)): one mode-0 slice is one 16-byte vector.
    gX = cute.zipped_divide(mX, (1, VEC))
    gW = cute.zipped_divide(mW, (1, VEC))

    # x row of this lane per 8-row group of M; rows past M read row M - 1 (their outputs are never stored)
    xrow = [cutlass.min(8 * j + g, M - 1) if 8 * j + 8 > M else 8 * j + g for j in range(MT)]
    # W row of this lane per W vector of a step: row tile rt, half (rows g, g + 8 of a 16-row tile)
    wrow = [n0 + rt * WROWS + half * 8 + g for rt in range(RT) for half in range(WROWS // 8)]

    steps = K // STEP // KWARPS // KSPLIT             # a Python int: the constraints make it whole

    rot = (bidx % steps) * ROTATE                     # 0 when ROTATE is 0 (folded by the compiler)

    def kv_of(s: int):  # vector index along K of this lane in the warp's step s of the CTA's K slice
        return ((kz * steps + (s + rot) % steps) * KWARPS + warp) * (STEP // VEC) + t

    def one(src):  # a 16-byte vector as (the copy atom's 8 values, 1 copy)
        return cute.make_tensor(src.iterator, cute.make_layout((VEC, 1)))

    def issue_w(s: int) -> None:  # the W copies of step s into its slot, s % STAGES
        for v in cutlass.range_constexpr(VW):
            cute.copy(copy_w, one(gW[(None, (wrow[v], kv_of(s)))]), one(ring[(None, tidx, v, s % STAGES)]))

    def issue_x(s: int) -> None:
        for j in cutlass.range_constexpr(VX):
            cute.copy(copy_x, one(gX[(None, (xrow[j], kv_of(s)))]), one(ring[(None, tidx, VW + j, s % STAGES)]))

    acc = cute.make_rmem_tensor(cute.make_layout((4, RT, NT)), cutlass.Float32)
    for i in cutlass.range_constexpr(4 * RT * NT):
        acc[i] = cutlass.Float32(0.0)
    a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), cutlass.BFloat16)  # (V, M, K) for cute.gemm
    zero = cute.make_rmem_tensor(cute.make_layout(VEC), cutlass.BFloat16)    # A's rows 8-15 when M <= 8
    for i in cutlass.range_constexpr(VEC):
        zero[i] = cutlass.BFloat16(0.0)

    if cutlass.const_expr(PDL > 0):
        # chained (build's pdl): the next kernel of the chain may launch now, and until griddepcontrol.wait this
        # CTA touches only W, which no kernel writes; x is the previous kernel's output
        cute.arch.griddepcontrol_launch_dependents()
    if cutlass.const_expr(PDL == 2):
        # all of the CTA's W slice asked into L2 while the previous kernel runs, a row per thread
        for p in cutlass.range_constexpr((WROWS * RT + THREADS - 1) // THREADS):
            r = tidx + p * THREADS
            if r < WROWS * RT:
                _prefetch_l2(gW[(None, (n0 + r, kz * (K // KSPLIT // VEC)))].iterator, K // KSPLIT * 2)
    # Prologue: steps 0 .. STAGES - 2 in flight, a group each (the constraints give at least STAGES steps).
    # Chained, W's groups go first and x's follow the wait as groups of their own: groups complete in order, so
    # waiting for all but the newest STAGES - 1 still lands step s's W and x before its reads.
    for s in cutlass.range_constexpr(STAGES - 1):
        issue_w(s)
        if cutlass.const_expr(PDL == 0):
            issue_x(s)
        cute.arch.cp_async_commit_group()
    if cutlass.const_expr(PDL > 0):
        cute.arch.griddepcontrol_wait()
        if cutlass.const_expr(VX > 0):
            for s in cutlass.range_constexpr(STAGES - 1):
                issue_x(s)
                cute.arch.cp_async_commit_group()
    for s in cutlass.range_constexpr(steps):
        # refill the slot step s - 1 was read from; one group per step even when empty, so that waiting for all
        # but the newest STAGES - 1 groups always means step s has landed
        if cutlass.const_expr(s + STAGES - 1 < steps):
            issue_w(s + STAGES - 1)
            issue_x(s + STAGES - 1)
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(STAGES - 1)
        slot = s % STAGES
        ws = [_vector(ring[(None, tidx, v, slot)]) for v in range(VW)]
        if cutlass.const_expr(XRING):
            xs = [_vector(ring[(None, tidx, VW + j, slot)]) for j in range(MT)]
        else:
            xs = [_vector(gX[(None, (xrow[j], kv_of(s)))]) for j in range(MT)]
        for rt in cutlass.range_constexpr(RT):
            for h in cutlass.range_constexpr(2):       # elements 0-3, then 4-7 of the vectors
                if cutlass.const_expr(WROWS == 16):
                    # A: W rows g, g + 8 of the tile; B (b0..b3): x row 8j + g, K slots as A's
                    _a_fragment(a, ws[rt * 2], ws[rt * 2 + 1], h)
                    for j in cutlass.range_constexpr(NT):
                        b = cute.make_tensor(xs[j].iterator + 4 * h, cute.make_layout((4, 1, 1)))
                        d = cute.make_tensor(acc.iterator + 4 * (rt + RT * j), cute.make_layout((4, 1, 1)))
                        cute.gemm(mma, d, a, b, d)
                else:
                    # A: x rows g, g + 8; B: W row g of the tile
                    _a_fragment(a, xs[0], xs[1] if MT == 2 else zero, h)
                    b = cute.make_tensor(ws[rt].iterator + 4 * h, cute.make_layout((4, 1, 1)))
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
    rows = WROWS * RT
    outs = M * rows
    for p in cutlass.range_constexpr((outs + THREADS - 1) // THREADS):
        i = tidx + p * THREADS
        if i < outs:
            row = i % rows
            m = i // rows
            total = cutlass.Float32(0.0)
            for w in cutlass.range_constexpr(KWARPS):
                total = total + red[w, row, m]
            if cutlass.const_expr(KSPLIT == 1):
                mO[m, n0 + row] = total.to(cutlass.BFloat16)
            else:
                mP[kz, m, n0 + row] = total
    if cutlass.const_expr(KSPLIT > 1):
        # Each writer fences its partials, the barrier gathers the fences, one atomic counts the CTA in; the CTA
        # that counts last fences again (acquire) and owns the row block's outputs, then rearms the counter.
        cute.arch.fence_acq_rel_gpu()
        cute.arch.sync_threads()
        if tidx == 0:
            last[0] = _atomic_add(mC.iterator + bidx, cutlass.Int32(1))
        cute.arch.sync_threads()
        if last[0] == KSPLIT - 1:
            cute.arch.fence_acq_rel_gpu()
            for p in cutlass.range_constexpr((outs + THREADS - 1) // THREADS):
                i = tidx + p * THREADS
                if i < outs:
                    row = i % rows
                    m = i // rows
                    total = cutlass.Float32(0.0)
                    for z in cutlass.range_constexpr(KSPLIT):   # K order: the same sum on every call
                        total = total + mP[z, m, n0 + row]
                    mO[m, n0 + row] = total.to(cutlass.BFloat16)
            if tidx == 0:
                mC[bidx] = cutlass.Int32(0)


@cute.jit
def _gemv(x_ptr: cute.Pointer, w_ptr: cute.Pointer, o_ptr: cute.Pointer, p_ptr: cute.Pointer, c_ptr: cute.Pointer,
          stream: cuda.CUstream, M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr,
          WROWS: cutlass.Constexpr, RT: cutlass.Constexpr, KWARPS: cutlass.Constexpr, STAGES: cutlass.Constexpr,
          XRING: cutlass.Constexpr, KSPLIT: cutlass.Constexpr, ROTATE: cutlass.Constexpr, PDL: cutlass.Constexpr):
    mX = cute.make_tensor(x_ptr, cute.make_layout((M, K), stride=(K, 1)))
    mW = cute.make_tensor(w_ptr, cute.make_layout((N, K), stride=(K, 1)))
    mO = cute.make_tensor(o_ptr, cute.make_layout((M, N), stride=(N, 1)))
    mP = cute.make_tensor(p_ptr, cute.make_layout((KSPLIT, M, N), stride=(M * N, N, 1)))  # fp32 partials
    mC = cute.make_tensor(c_ptr, cute.make_layout(N // (WROWS * RT)))                    # a counter per row block
    _gemv_kernel(mX, mW, mO, mP, mC, M, N, K, WROWS, RT, KWARPS, STAGES, XRING, KSPLIT, ROTATE, PDL).launch(
        grid=(N // (WROWS * RT), KSPLIT, 1),
        block=(KWARPS * WARP, 1, 1),
        stream=stream,
        use_pdl=PDL > 0,
    )


def _params(config: dict, shape: dict) -> tuple[int, ...]:
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    wrows = int(config.get("WROWS", 16))
    rt = int(config.get("RT", 1))
    kwarps = int(config.get("KWARPS", 8))
    stages = int(config.get("STAGES", 4))
    xring = int(config.get("XRING", 1))
    ksplit = int(config.get("KSPLIT", 1))
    rotate = int(config.get("ROTATE", 0))
    env = {"M": m, "N": n, "K": k, "WROWS": wrows, "RT": rt, "KWARPS": kwarps, "STAGES": stages, "XRING": xring,
           "KSPLIT": ksplit, "ROTATE": rotate}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={m} N={n} K={k}")
    return m, n, k, wrows, rt, kwarps, stages, xring, ksplit, rotate


def _ptrs(x_addr: int, w_addr: int, o_addr: int, p_addr: int, c_addr: int) -> tuple:
    bf16, gmem = cutlass.BFloat16, cute.AddressSpace.gmem
    return (make_ptr(bf16, x_addr, gmem, assumed_align=16), make_ptr(bf16, w_addr, gmem, assumed_align=16),
            make_ptr(bf16, o_addr, gmem, assumed_align=16), make_ptr(cutlass.Float32, p_addr, gmem, assumed_align=16),
            make_ptr(cutlass.Int32, c_addr, gmem, assumed_align=16))


def _compile_args(config: dict, shape: dict, stream, pdl: int) -> tuple:
    if pdl not in PDL_LEVELS:
        raise ValueError(f"pdl={pdl!r}: one of {PDL_LEVELS}")
    # Any 16-byte aligned address serves for compiling: only the layouts are baked in.
    return (*_ptrs(16, 16, 16, 16, 16), stream, *_params(config, shape), pdl)


def compile_target(config: dict, shape: dict, pdl: int = 0) -> tuple:
    """The @cute.jit function and its compile arguments, for an ahead-of-time compile with no GPU."""
    from cutlass.cute.runtime import make_fake_stream

    return _gemv, _compile_args(config, shape, make_fake_stream(), pdl)


def build(config: dict, shape: dict, pdl: int = 0):
    """pdl (a layer's chain of kernels, not a tuning parameter: a slot is timed from a clean start) 1: launched
    as a programmatic dependent launch that lets the next kernel launch at once, copies its first STAGES - 1 steps
    of W into the ring and only then waits for the previous kernel (griddepcontrol.wait) before touching x;
    2: also asks all of its W slice into L2 before the wait."""
    m, n, k, wrows, rt, _, _, _, ksplit, _ = _params(config, shape)
    stream0 = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(_gemv, *_compile_args(config, shape, stream0, pdl))
    # KSPLIT > 1: the build's own partials and counters (zero; each call's last CTA per row block rearms its
    # counter), so a build serves one stream at a time, as a decode step's kernels do
    dev = torch.device("cuda", torch.cuda.current_device())
    partials = torch.empty((ksplit, m, n) if ksplit > 1 else (4,), dtype=torch.float32, device=dev)
    counters = torch.zeros(n // (wrows * rt), dtype=torch.int32, device=dev)

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
        compiled(*_ptrs(xa, wa, oa, partials.data_ptr(), counters.data_ptr()),
                 cuda.CUstream(torch.cuda.current_stream().cuda_stream))

    return run
