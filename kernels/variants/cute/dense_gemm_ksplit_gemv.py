"""dense_gemm in CuTe DSL: GEMV with K split across the warps of one CTA (small M, memory-bound decode).

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate.

Why beside dense_gemm_warp_gemv.py: there one warp walks the whole K of its rows, so the bytes a CTA has in
flight are bounded by one warp's unrolled steps; at fused_qkv_a (K = 7168) that is ~28 dependent steps per
warp, and every kernel family we had streamed its 30 MB at ~2.7 TB/s at M = 4-16 (11.1-11.5 us on the H200,
table ZJ) against 8.59 us for a plain read of the same bytes (2026-12-03-h200-latency-floor.md). Split-K
across CTAs (the Triton GEMV's SPLIT_K) reaches more bytes in flight but pays a gpu-scope release/acquire and
an fp32 workspace round trip per CTA, which lost badly there (25 us at SPLIT_K 14). Here the split stays
inside the CTA, so its reduction is a shared-memory one:
- a CTA owns ROWS consecutive rows of W; its KWARPS warps share out K: thread t of the CTA loads the 16-byte
  vectors t, t + 32 * KWARPS, ... of each row (a warp's 32 lanes read 512 contiguous bytes of a row);
- the W vectors of UNROLL steps are loaded first (all of a thread's K range when UNROLL covers it: one DRAM
  round trip per CTA), then each x row's vector of the same K positions is loaded once and multiplied into
  all ROWS rows (x is tiny and L1/L2 resident);
- per (m, row): fp32 partials per lane, a butterfly shuffle inside the warp, lane 0 stores the warp's sum in
  shared memory, one CTA barrier, and thread i sums output i's KWARPS warp sums in warp order (deterministic)
  and writes it as bf16 (and output i + 32 * KWARPS, ..., where a CTA has fewer threads than its M * ROWS outputs).
Every output element is written on every call by exactly one thread; inputs are never written.

CUDA-core math: M * 8 FMAs per 16-byte W vector, so M <= 8 is the target (at M = 16 the FMAs alone take about
as long as fused_qkv_a's HBM floor); the constraints keep M * ROWS accumulators and ROWS * UNROLL W vectors
per thread in registers.

build(config, shape, pdl=1) is the same kernel as a link of a chain of programmatic dependent launches (a layer's
choice, not a tuning parameter): it lets the next kernel launch at once, loads its first chunk of W and only then
waits for the kernel ahead (griddepcontrol.wait) before it reads x; pdl=2 first asks the CTA's rows into L2.
Measured (session ZY, H100; bench/results/2026-12-06-h100-chain-check-zy.json): bitwise equal to the plain build
behind a producer of its x; q_b_proj M = 1 pair 4.79 -> 4.06 us, o_proj 9.30 -> 8.43, fused_qkv_a 15.28 -> 14.94.

Shapes are compile-time constants (a build is per (N, K, M)), and the kernel takes raw pointers, as in
dense_gemm_warp_gemv.py.

Measured on a lent H100 through the service (bench/results/2026-12-05-h100-decode-tuning-h100-zl.md, 72 runs, all
passed the check), against the previous best kernel of the H100's table and cuBLAS in the same child: it won all six
buckets it entered. fused_qkv_a M = 1 11.85 us (85% of the H100's floor; was 12.59), M = 4 13.37 (13.39);
q_b_proj M = 1 3.79 (4.48), M = 4 4.42 (4.67); o_proj M = 1 6.98 (7.32), M = 4 7.92 vs cuBLAS 8.14 (cuBLAS had
kept that bucket). The winners at M = 1 are the one-round-trip configs (UNROLL covers the thread's K steps).
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
    "ROWS": [1, 2, 4, 8],          # W rows per CTA (each thread holds a vector of each)
    # warps per CTA, splitting K; 3/6 and 7/14 split q_lora_rank 1536 and hidden 7168 into whole 256-element steps
    "KWARPS": [1, 2, 3, 4, 6, 7, 8, 14, 16],
    "UNROLL": [1, 2, 4, 8],        # K steps whose W vectors are loaded before the first FMA
}
# Python expressions over config params and shape dims that a config must satisfy.
CONSTRAINTS = [
    "K % 8 == 0",                   # 128-bit loads of bf16 along K
    "N % ROWS == 0",                # a CTA's rows are all in range
    "(K // 8) % (32 * KWARPS) == 0",  # every thread the same whole number of K steps: no ragged step
    "M * ROWS <= 64",               # fp32 accumulators per thread stay in registers
    "ROWS * UNROLL <= 32",          # W vectors in flight per thread: <= 128 registers
    "UNROLL <= K // (256 * KWARPS)",  # no more unrolled steps than a thread has
]
CLAIMS = {"ptx_contains": ["ld.global.v4", "shfl.sync.bfly", "bar.sync"]}

PDL_LEVELS = (0, 1, 2)  # build's pdl: off; chained; chained with the CTA's W rows prefetched into L2
VEC = 8  # bf16 elements per 128-bit load
WARP = 32


@dsl_user_op
def _prefetch_l2(ptr: cute.Pointer, nbytes: int, *, loc=None, ip=None) -> None:
    """cp.async.bulk.prefetch.L2 of nbytes (a multiple of 16) from ptr (16-byte aligned): no registers, no shared
    memory, nothing waits on it. has_side_effects: the compiler must neither drop it nor move it."""
    llvm.inline_asm(None, [ptr.toint(loc=loc, ip=ip).ir_value(loc=loc, ip=ip),
                           cutlass.Int32(nbytes).ir_value(loc=loc, ip=ip)],
                    "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r",
                    has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


@cute.kernel
def _gemv_kernel(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor,
                 M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr,
                 ROWS: cutlass.Constexpr, KWARPS: cutlass.Constexpr, UNROLL: cutlass.Constexpr,
                 PDL: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = tidx // WARP
    lane = tidx % WARP
    n0 = bidx * ROWS

    smem = cutlass.utils.SmemAllocator()
    # One fp32 sum per (warp, m, row): the cross-warp half of the K reduction.
    red = smem.allocate_tensor(cutlass.Float32, cute.make_layout((KWARPS, M * ROWS)), 16)

    # ((1, VEC), (rows, K // VEC)): one mode-0 slice is one 16-byte vector.
    gX = cute.zipped_divide(mX, (1, VEC))
    gW = cute.zipped_divide(mW, (1, VEC))

    acc = cute.make_rmem_tensor(cute.make_layout((M, ROWS)), cutlass.Float32)
    for m in cutlass.range_constexpr(M):
        for r in cutlass.range_constexpr(ROWS):
            acc[m, r] = cutlass.Float32(0.0)

    stride = WARP * KWARPS
    steps = K // VEC // stride                      # a Python int: the constraints make it whole
    if cutlass.const_expr(PDL > 0):
        # chained (build's pdl): the next kernel of the chain may launch now, and until griddepcontrol.wait
        # (after the first chunk's W loads below) this CTA touches only W, which no kernel writes
        cute.arch.griddepcontrol_launch_dependents()
    if cutlass.const_expr(PDL == 2):
        for p in cutlass.range_constexpr((ROWS + stride - 1) // stride):  # the CTA's rows into L2, one a thread
            r = tidx + p * stride
            if r < ROWS:
                _prefetch_l2(gW[(None, (n0 + r, 0))].iterator, K * 2)
    for c in cutlass.range_constexpr((steps + UNROLL - 1) // UNROLL):
        # this chunk's vector indices of the thread: all its W loads are issued before the FMAs below
        kvs = [tidx + (c * UNROLL + s) * stride for s in range(min(UNROLL, steps - c * UNROLL))]
        ws = []
        for kv in kvs:
            for r in cutlass.range_constexpr(ROWS):
                ws.append(gW[(None, (n0 + r, kv))].load().to(cutlass.Float32))
        if cutlass.const_expr(PDL > 0 and c == 0):
            cute.arch.griddepcontrol_wait()  # x is the previous kernel's output
        for s, kv in enumerate(kvs):
            for m in cutlass.range_constexpr(M):
                xv = gX[(None, (m, kv))].load().to(cutlass.Float32)
                for r in cutlass.range_constexpr(ROWS):
                    acc[m, r] = acc[m, r] + (ws[s * ROWS + r] * xv).reduce(
                        cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)

    for m in cutlass.range_constexpr(M):
        for r in cutlass.range_constexpr(ROWS):
            v = acc[m, r]
            for i in cutlass.range_constexpr(5):
                v = v + cute.arch.shuffle_sync_bfly(v, offset=1 << (4 - i))
            if lane == 0:
                red[warp, m * ROWS + r] = v
    cute.arch.sync_threads()
    # M * ROWS outputs over WARP * KWARPS threads: more than one each when a CTA has fewer threads than outputs
    for j in cutlass.range_constexpr((M * ROWS + stride - 1) // stride):
        i = tidx + j * stride
        if i < M * ROWS:
            total = cutlass.Float32(0.0)
            for w in cutlass.range_constexpr(KWARPS):
                total = total + red[w, i]
            mO[i // ROWS, n0 + i % ROWS] = total.to(cutlass.BFloat16)


@cute.jit
def _gemv(x_ptr: cute.Pointer, w_ptr: cute.Pointer, o_ptr: cute.Pointer, stream: cuda.CUstream,
          M: cutlass.Constexpr, N: cutlass.Constexpr, K: cutlass.Constexpr,
          ROWS: cutlass.Constexpr, KWARPS: cutlass.Constexpr, UNROLL: cutlass.Constexpr, PDL: cutlass.Constexpr):
    mX = cute.make_tensor(x_ptr, cute.make_layout((M, K), stride=(K, 1)))
    mW = cute.make_tensor(w_ptr, cute.make_layout((N, K), stride=(K, 1)))
    mO = cute.make_tensor(o_ptr, cute.make_layout((M, N), stride=(N, 1)))
    _gemv_kernel(mX, mW, mO, M, N, K, ROWS, KWARPS, UNROLL, PDL).launch(
        grid=(N // ROWS, 1, 1),
        block=(KWARPS * WARP, 1, 1),
        stream=stream,
        use_pdl=PDL > 0,
    )


def _params(config: dict, shape: dict) -> tuple[int, int, int, int, int, int]:
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    rows = int(config.get("ROWS", 4))
    kwarps = int(config.get("KWARPS", 4))
    unroll = int(config.get("UNROLL", 2))
    env = {"M": m, "N": n, "K": k, "ROWS": rows, "KWARPS": kwarps, "UNROLL": unroll}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={m} N={n} K={k}")
    return m, n, k, rows, kwarps, unroll


def _ptrs(x_addr: int, w_addr: int, o_addr: int) -> tuple:
    bf16, gmem = cutlass.BFloat16, cute.AddressSpace.gmem
    return (make_ptr(bf16, x_addr, gmem, assumed_align=16), make_ptr(bf16, w_addr, gmem, assumed_align=16),
            make_ptr(bf16, o_addr, gmem, assumed_align=16))


def _compile_args(config: dict, shape: dict, stream, pdl: int) -> tuple:
    m, n, k, rows, kwarps, unroll = _params(config, shape)
    if pdl not in PDL_LEVELS:
        raise ValueError(f"pdl={pdl!r}: one of {PDL_LEVELS}")
    # Any 16-byte aligned address serves for compiling: only the layouts are baked in.
    return (*_ptrs(16, 16, 16), stream, m, n, k, rows, kwarps, unroll, pdl)


def compile_target(config: dict, shape: dict, pdl: int = 0) -> tuple:
    """The @cute.jit function and its compile arguments, for an ahead-of-time compile with no GPU."""
    from cutlass.cute.runtime import make_fake_stream

    return _gemv, _compile_args(config, shape, make_fake_stream(), pdl)


def build(config: dict, shape: dict, pdl: int = 0):
    """pdl (a layer's chain of kernels, not a tuning parameter: a slot is timed from a clean start) 1: launched
    as a programmatic dependent launch that lets the next kernel launch at once, loads its first chunk of W and
    only then waits for the previous kernel (griddepcontrol.wait) before touching x; 2: also asks all of its
    rows into L2 before those loads."""
    m, n, k, *_ = _params(config, shape)
    stream0 = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(_gemv, *_compile_args(config, shape, stream0, pdl))

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
