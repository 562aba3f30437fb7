"""dense_gemm in Triton: swap-AB tensor-core GEMM for decode batches (M = 1..64), split-K in one launch.

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate.

Why another tensor-core kernel beside dense_gemm_splitk.py: that one computes x[BLOCK_M, K] @ w^T with
the batch as the MMA's row dimension, so a warp group never owns the 64 rows Hopper's wgmma needs and Triton
lowers it to mma.sync; on the H200 it streamed o_proj's 14.7 MB at ~1.9 TB/s at M = 4 and 16 (8.0 us against
cuBLAS's ~7.0) and lost lm_head from M = 32 up (2026-12-03-h200-dense-gemm-triton-lm-head.md: 100 us against
76 at M = 64). Here the operands are swapped, the decode GEMM's usual trick: the program computes
out^T[BLOCK_N, BLOCK_M] = w[BLOCK_N, K] @ x^T, so W's rows fill the MMA's 64-row side (wgmma m64nXk16 with a
4-warp group, BLOCK_M = 16..64 as its N) and the tiny batch is the narrow side. Both operands stream through
shared memory in a pipelined K loop (num_stages buffers), and the wgmma is asynchronous, so the next tiles'
loads are in flight while the tensor cores run.
- LOAD = "ptr": W tiles by pointer (16-byte cp.async into the pipeline's buffers);
  LOAD = "tma": W tiles by a host-built tensor descriptor (Hopper's bulk tensor copy: one thread issues a
  whole [BLOCK_N, BLOCK_K] tile, rows past N are zero-filled by the copy engine). x always by pointer (its
  tile is 32-128x smaller).
- SPLIT_K > 1 shares the K steps out across programs (cdiv(N, BLOCK_N) * SPLIT_K CTAs: o_proj's N = 7168 at
  BLOCK_N 64 is only 112 tiles for 132 SMs). Each split stores its fp32 partial into a workspace
  [SPLIT_K, M, N] and bumps its N tile's int32 counter (acq_rel, gpu scope); the split that arrives last
  sums the partials in split order (deterministic), writes bf16 out and resets the counter: one launch.
Every output element is written on every call by exactly one program; inputs are never written.
Measured on the H200 (table ZJ, each against cuBLAS in the same child): it wins lm_head at M = 4 and 16 (72.70 and
73.68 us vs 78.99 and 76.35, 95% of the floor, the bulk tensor copy ahead of pointer loads there) and fused_qkv_a at
M = 64 (13.88 vs 15.82), and loses o_proj at every M (7.1-7.5 us at M = 1-16 vs ~6.8-7.0; still ~0.6-1.2 us ahead of
the mma.sync kernel at the same tiles): o_proj's K = 1024 gives each CTA 2-4 K steps, so its first round trip is
never hidden; there the one-round-trip CUDA-core GEMV is the kernel that beats cuBLAS.

Under TRITON_INTERPRET=1 (CPU) tl.dot on bf16 is wrong, so the build upcasts the tiles to fp32 under the
UPCAST constexpr there, and LOAD = "tma" runs the interpreter's emulation of the descriptor load.
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [16, 32, 64],          # the MMA's N: the batch, padded
    "BLOCK_N": [64, 128, 256],        # the MMA's M: W rows, whole 64-row wgmma tiles
    "BLOCK_K": [64, 128, 256],
    "SPLIT_K": [1, 2, 4, 8, 16],
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4, 5, 6],
    "LOAD": ["ptr", "tma"],
}
# Python expressions over config params and shape dims; a config must satisfy all of them.
CONSTRAINTS = [
    "BLOCK_M >= M",
    "BLOCK_M < 2 * M or BLOCK_M == 16",   # the smallest tile that holds M (tl.dot needs >= 16)
    "BLOCK_K * SPLIT_K <= K",
    "BLOCK_N <= N",
    "BLOCK_N >= 16 * num_warps",          # each warp group owns >= 64 W rows: wgmma, not mma.sync
    # the pipeline's buffers (W and x tiles per stage) fit Hopper's 227 KB of shared memory with room for
    # the layout conversions Triton adds
    "num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608",
    "BLOCK_N * BLOCK_M <= 128 * 32 * num_warps",   # the fp32 accumulator: <= 32 registers a thread
]
DEFAULT = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 4, "num_stages": 4,
           "LOAD": "ptr"}
STR_PARAMS = ("LOAD",)


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config: wgmma (a warp group owns >= 64 W rows), the pipeline's
    async copies (cp.async for pointer loads, the bulk tensor copy for LOAD = "tma") when the K loop has two
    or more steps, and the split-K arrival's acq_rel atomic."""
    c = {**DEFAULT, **config}
    out = ["wgmma.mma_async"]
    steps = -(-int(shape["K"]) // (int(c["SPLIT_K"]) * int(c["BLOCK_K"]))) if "K" in shape else 2
    if c["LOAD"] == "tma":
        out.append("cp.async.bulk.tensor")
    elif int(c["num_stages"]) > 1 and steps > 1:
        out.append("cp.async")
    if int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    return {"ptx_contains": out}


@triton.jit
def swapab_gemm_kernel(x_ptr, w_ptr, w_desc, out_ptr, ws_ptr, cnt_ptr, M, N, K,
                       stride_xm, stride_wn, stride_om,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       SPLIT_K: tl.constexpr, K_PER_SPLIT: tl.constexpr, EVEN_K: tl.constexpr,
                       UPCAST: tl.constexpr, NUM_STAGES: tl.constexpr, TMA: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    # Pointer loads clamp W rows instead of masking them (rows past N load row 0 and are never stored), which
    # keeps the W load unmasked and vectorised on the EVEN_K path; the descriptor zero-fills them instead.
    offs_n_safe = tl.where(n_ok, offs_n, 0)
    k_base = pid_k * K_PER_SPLIT
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k_base + offs_k)[None, :]
    w_ptrs = w_ptr + offs_n_safe[:, None] * stride_wn + (k_base + offs_k)[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in tl.range(0, K_PER_SPLIT, BLOCK_K, num_stages=NUM_STAGES):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            if TMA:
                w = w_desc.load([pid_n * BLOCK_N, k_base + k0])
            else:
                w = tl.load(w_ptrs)
        else:
            k_ok = (k_base + k0 + offs_k) < K
            if K_PER_SPLIT % BLOCK_K != 0:
                k_ok = k_ok & ((k0 + offs_k) < K_PER_SPLIT)
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            if TMA:  # past K the copy engine zero-fills; within the next split's K, x's zeros cancel W
                w = w_desc.load([pid_n * BLOCK_N, k_base + k0])
            else:
                w = tl.load(w_ptrs, mask=k_ok[None, :], other=0.0)
        if UPCAST:
            acc += tl.dot(w.to(tl.float32), tl.trans(x.to(tl.float32)))
        else:
            acc = tl.dot(w, tl.trans(x), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    # acc is out^T: element (n, m) goes to out[m, n]
    mask = n_ok[:, None] & m_ok[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptr + offs_m[None, :] * stride_om + offs_n[:, None], acc.to(out_ptr.dtype.element_ty),
                 mask=mask)
    else:
        tile = offs_m[None, :] * N + offs_n[:, None]
        tl.store(ws_ptr + pid_k * M * N + tile, acc, mask=mask)
        # Every thread's partial is stored before the barrier; the release of the arrival makes them visible
        # at GPU scope to the split that arrives last, whose acquire orders its reads after.
        tl.debug_barrier()
        cptr = cnt_ptr + pid_n
        arrived = tl.atomic_add(cptr, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):  # split order, whoever arrives last: deterministic
                total += tl.load(ws_ptr + s * M * N + tile, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + offs_m[None, :] * stride_om + offs_n[:, None],
                     total.to(out_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(cptr, 0, sem="relaxed", scope="gpu")  # ready for the next call


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT, **{k: v if k in STR_PARAMS else int(v) for k, v in config.items()}}
    if c["LOAD"] not in CONFIG_SPACE["LOAD"]:
        raise ValueError(f"LOAD must be one of {CONFIG_SPACE['LOAD']}, not {c['LOAD']!r}")
    env = {**c, "M": int(shape["M"]), "N": int(shape["N"]), "K": int(shape["K"])}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} N={env['N']} K={env['K']}")
    return c


def _meta(c: dict, shape: dict, upcast: bool) -> dict:
    k, split, bk = int(shape["K"]), c["SPLIT_K"], c["BLOCK_K"]
    even_k = k % (bk * split) == 0
    # Each split covers a whole number of BLOCK_K steps; the last split is masked when K is ragged.
    k_per_split = k // split if even_k else triton.cdiv(triton.cdiv(k, split), bk) * bk
    return {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": bk, "SPLIT_K": split,
            "K_PER_SPLIT": k_per_split, "EVEN_K": even_k, "UPCAST": upcast, "NUM_STAGES": c["num_stages"],
            "TMA": c["LOAD"] == "tma"}


def _w_descriptor(w: torch.Tensor, c: dict):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(w, [c["BLOCK_N"], c["BLOCK_K"]])


def compile_ptx(config: dict, shape: dict, arch: str) -> str:
    """Ahead-of-time PTX for ``arch`` (e.g. "sm_90a") with no GPU, for the same specialisation the GPU build
    uses (contiguous, 16-byte aligned bf16 tensors; M, N, K and strides as runtime ints)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    ptr = "*bf16"
    desc = f"tensordesc<bf16[{c['BLOCK_N']}, {c['BLOCK_K']}]>" if c["LOAD"] == "tma" else "constexpr"
    sig = {"x_ptr": ptr, "w_ptr": ptr, "w_desc": desc, "out_ptr": ptr, "ws_ptr": "*fp32", "cnt_ptr": "*i32",
           "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_om": "i32"}
    meta = _meta(c, shape, upcast=False)
    constexprs = dict(meta)
    if c["LOAD"] != "tma":
        constexprs["w_desc"] = None
    sig.update({name: "constexpr" for name in meta})
    idx = {name: i for i, name in enumerate(sig)}
    aligned = ["x_ptr", "w_ptr", "out_ptr", "ws_ptr", "cnt_ptr"]
    aligned += ["K", "stride_xm", "stride_wn"] if int(shape["K"]) % 16 == 0 else []
    aligned += ["N", "stride_om"] if int(shape["N"]) % 16 == 0 else []
    attrs = {(idx[name],): [["tt.divisibility", 16]] for name in aligned}
    src = ASTSource(fn=swapab_gemm_kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                            options={"num_warps": c["num_warps"], "num_stages": c["num_stages"]})
    return kernel.asm["ptx"]


def _home_device() -> torch.device:
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def build(config: dict, shape: dict) -> Callable[..., None]:
    c = check_constraints(config, shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    meta = _meta(c, shape, upcast=interpret)
    split = c["SPLIT_K"]
    grid = (triton.cdiv(n, c["BLOCK_N"]), split)
    tma = meta["TMA"]
    # Per device, allocated once outside any graph capture: the split-K partials (every element the last
    # split reads is rewritten on every call: no zeroing) and counters that start at zero (each call leaves
    # them zero). Calls on one stream or one graph's replays are serialised, so reuse is safe.
    scratch: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def alloc(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("dense_gemm_swapab: call once outside CUDA-graph capture on this device first")
        bufs = (torch.empty((max(split, 1) * m * n,), device=device, dtype=torch.float32),
                torch.zeros((grid[0],), device=device, dtype=torch.int32))
        scratch[device] = bufs
        return bufs

    alloc(_home_device())

    def run(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        if x.shape != (m, k) or w.shape != (n, k) or out.shape != (m, n):
            raise ValueError(f"shapes {tuple(x.shape)} {tuple(w.shape)} {tuple(out.shape)} != built M={m} N={n} K={k}")
        if x.stride(1) != 1 or w.stride(1) != 1 or out.stride(1) != 1:
            raise ValueError("x, w and out must be contiguous along their last dim")
        ws, cnt = scratch.get(x.device) or alloc(x.device)
        w_desc = _w_descriptor(w, c) if tma else None
        swapab_gemm_kernel[grid](x, w, w_desc, out, ws, cnt, m, n, k, x.stride(0), w.stride(0), out.stride(0),
                                 **meta, num_warps=c["num_warps"], num_stages=c["num_stages"])

    return run
