"""dense_gemm in Triton: batch-aware small-M GEMM with split-K (decode: M = 1..64).

out[M, N] = x[M, K] @ w[N, K]^T, bf16 in and out, fp32 accumulate.

At decode M the GEMM is memory-bound on W, so the kernel is shaped for W bandwidth:
- one M tile (BLOCK_M >= M, padded rows are masked to zero) so W is read exactly once;
- W tiles [BLOCK_N, BLOCK_K] are contiguous along K: coalesced 16-byte loads, pipelined over
  num_stages;
- SPLIT_K splits K across programs so that even N = 1536 gives >= 132 SMs enough CTAs
  (cdiv(N, BLOCK_N) * SPLIT_K of them).
With SPLIT_K > 1 each split writes an fp32 partial into a workspace [SPLIT_K, M, N] (plain stores:
no zeroing pass, deterministic), and REDUCE picks who sums the splits and casts to bf16:
- "kernel": a second tiny kernel (two launches);
- "last_cta": the split that arrives last at its output tile (an int32 arrival counter per tile,
  acq_rel at GPU scope, reset by that split) sums the partials in split order: one launch, still
  deterministic. At decode M a launch and its tail are ~1-2 us of a 5-13 us GEMM.
Every output element is written on every call by exactly one program.

Under TRITON_INTERPRET=1 (CPU) tl.dot on bf16 is wrong, so the build upcasts the tiles to fp32
under the UPCAST constexpr there; the compiled GPU path keeps bf16 operands for the tensor cores.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [16, 32, 64],
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_K": [64, 128, 256, 512],
    "SPLIT_K": [1, 2, 4, 8, 16],
    "num_warps": [2, 4, 8],
    "num_stages": [2, 3, 4, 5],
    "REDUCE": ["kernel", "last_cta"],
}
# Python expressions over config params and shape dims; a config must satisfy all of them.
CONSTRAINTS = [
    "BLOCK_M >= M",
    "BLOCK_M < 2 * M or BLOCK_M == 16",  # the smallest tile that holds M (tl.dot needs >= 16)
    "BLOCK_K * SPLIT_K <= K",
    "BLOCK_N <= N",
    "BLOCK_N * BLOCK_K <= 32768",        # W tile in registers / shared memory per stage
    "num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608",  # pipelined tiles fit Hopper smem
]
DEFAULT = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 4, "num_stages": 3,
           "REDUCE": "kernel"}


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config: Triton lowers tl.dot to Hopper wgmma when a warp
    group (4 warps) owns a 64-row tile, else to mma.sync; a K loop of two or more steps is pipelined
    with cp.async (one step, e.g. o_proj's K=1024 split 4 ways at BLOCK_K=256, has nothing to overlap:
    seen on the H200)."""
    c = {**DEFAULT, **config}
    wgmma = int(c["BLOCK_M"]) >= 64 and int(c["num_warps"]) % 4 == 0
    out = ["wgmma.mma_async" if wgmma else "mma.sync.aligned"]
    steps = -(-int(shape["K"]) // (int(c["SPLIT_K"]) * int(c["BLOCK_K"]))) if "K" in shape else 2
    if int(c["num_stages"]) > 1 and steps > 1:
        out.append("cp.async")
    if c["REDUCE"] == "last_cta" and int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    return {"ptx_contains": out}


@triton.jit
def splitk_gemm_kernel(x_ptr, w_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K,
                       stride_xm, stride_wn, stride_om,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       SPLIT_K: tl.constexpr, K_PER_SPLIT: tl.constexpr, EVEN_K: tl.constexpr,
                       UPCAST: tl.constexpr, NUM_STAGES: tl.constexpr, LAST_CTA: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        # chained (build's pdl): the next kernel may launch now; nothing is read before the kernel ahead, which
        # writes x, is done (its launch and this kernel's overlap; the weights are not fetched early here)
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    # Clamp W rows instead of masking them: out-of-range rows load a valid row and are never stored,
    # which keeps the W load unmasked (and vectorised) on the common EVEN_K path.
    offs_n_safe = tl.where(n_ok, offs_n, 0)
    k_base = pid_k * K_PER_SPLIT
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k_base + offs_k)[None, :]
    w_ptrs = w_ptr + offs_n_safe[:, None] * stride_wn + (k_base + offs_k)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K_PER_SPLIT, BLOCK_K, num_stages=NUM_STAGES):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            w = tl.load(w_ptrs)
        else:
            k_ok = (k_base + k0 + offs_k) < K
            if K_PER_SPLIT % BLOCK_K != 0:
                k_ok = k_ok & ((k0 + offs_k) < K_PER_SPLIT)
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[None, :], other=0.0)
        if UPCAST:
            acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)))
        else:
            acc += tl.dot(x, tl.trans(w))
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=mask)
    else:
        ws = ws_ptr + pid_k * M * N + offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws, acc, mask=mask)
        if LAST_CTA:
            # Every thread's partial is stored before the barrier; the release of the arrival makes them
            # visible at GPU scope to the split that arrives last, whose acquire orders its reads after.
            tl.debug_barrier()
            cptr = cnt_ptr + pid_m * tl.num_programs(0) + pid_n
            arrived = tl.atomic_add(cptr, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_K - 1:
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in tl.static_range(SPLIT_K):  # split order, whoever arrives last: deterministic
                    part = ws_ptr + s * M * N + offs_m[:, None] * N + offs_n[None, :]
                    total += tl.load(part, mask=mask, other=0.0, cache_modifier=".cg")  # L2, not a stale L1
                tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
                         total.to(out_ptr.dtype.element_ty), mask=mask)
                tl.atomic_xchg(cptr, 0, sem="relaxed", scope="gpu")  # ready for the next call


@triton.jit
def splitk_reduce_kernel(ws_ptr, out_ptr, M, N, stride_om, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * M * N + offs, mask=ok, other=0.0)
    row = offs // N
    col = offs % N
    tl.store(out_ptr + row * stride_om + col, acc.to(out_ptr.dtype.element_ty), mask=ok)


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT, **{k: v if k == "REDUCE" else int(v) for k, v in config.items()}}
    if c["REDUCE"] not in CONFIG_SPACE["REDUCE"]:
        raise ValueError(f"REDUCE must be one of {CONFIG_SPACE['REDUCE']}, not {c['REDUCE']!r}")
    env = {**c, "M": int(shape["M"]), "N": int(shape["N"]), "K": int(shape["K"])}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} N={env['N']} K={env['K']}")
    return c


def _meta(c: dict, shape: dict, upcast: bool, pdl: bool = False) -> dict:
    k, split, bk = int(shape["K"]), c["SPLIT_K"], c["BLOCK_K"]
    even_k = k % (bk * split) == 0
    # Each split covers a whole number of BLOCK_K steps; the last split is masked when K is ragged.
    k_per_split = k // split if even_k else triton.cdiv(triton.cdiv(k, split), bk) * bk
    return {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": bk, "SPLIT_K": split,
            "K_PER_SPLIT": k_per_split, "EVEN_K": even_k, "UPCAST": upcast, "NUM_STAGES": c["num_stages"],
            "LAST_CTA": c["REDUCE"] == "last_cta" and split > 1, "PDL": pdl}


def compile_ptx(config: dict, shape: dict, arch: str, pdl: int = 0) -> str:
    """Ahead-of-time PTX for ``arch`` (e.g. "sm_90a") with no GPU, for the same specialisation the
    GPU build uses (contiguous, 16-byte aligned bf16 tensors; M, N, K and strides as runtime ints)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    ptr = "*bf16"
    sig = {"x_ptr": ptr, "w_ptr": ptr, "out_ptr": ptr, "ws_ptr": "*fp32", "cnt_ptr": "*i32",
           "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_om": "i32"}
    meta = _meta(c, shape, upcast=False, pdl=bool(pdl))
    sig.update({name: "constexpr" for name in meta})
    # Pointers 16-byte aligned and K-strides divisible by 16 elements: what Triton specialises on
    # for real torch tensors of these shapes (attrs in the [["tt.divisibility", 16]] form).
    idx = {name: i for i, name in enumerate(sig)}
    aligned = ["x_ptr", "w_ptr", "out_ptr", "ws_ptr", "cnt_ptr"]
    aligned += ["K", "stride_xm", "stride_wn"] if int(shape["K"]) % 16 == 0 else []
    aligned += ["N", "stride_om"] if int(shape["N"]) % 16 == 0 else []
    attrs = {(idx[name],): [["tt.divisibility", 16]] for name in aligned}
    src = ASTSource(fn=splitk_gemm_kernel, signature=sig, constexprs=meta, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                            options={"num_warps": c["num_warps"], "num_stages": c["num_stages"]})
    return kernel.asm["ptx"]


def build(config: dict, shape: dict, pdl: int = 0):
    """pdl (a layer's chain of kernels, not a tuning parameter: a slot is timed from a clean start) 1 or 2: launched
    as a programmatic dependent launch that lets the next kernel launch at once and waits for the kernel ahead
    (griddepcontrol.wait) before it reads anything; this kernel has no early weight fetch, so 2 is 1. sm_90+ GPUs
    only: elsewhere it is off."""
    c = check_constraints(config, shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl={pdl!r}: one of (0, 1, 2)")
    chained = bool(pdl) and not interpret and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    meta = _meta(c, shape, upcast=interpret, pdl=chained)
    split = c["SPLIT_K"]
    grid = (triton.cdiv(n, c["BLOCK_N"]), split, triton.cdiv(m, c["BLOCK_M"]))
    reduce_block = 1024
    reduce_grid = (triton.cdiv(m * n, reduce_block),)
    last_cta = meta["LAST_CTA"]
    workspace: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def run(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
        if x.shape != (m, k) or w.shape != (n, k) or out.shape != (m, n):
            raise ValueError(f"shapes {tuple(x.shape)} {tuple(w.shape)} {tuple(out.shape)} != built M={m} N={n} K={k}")
        if x.stride(1) != 1 or w.stride(1) != 1 or out.stride(1) != 1:
            raise ValueError("x, w and out must be contiguous along their last dim")
        if split > 1:
            if x.device not in workspace:  # allocated once per device; stream order makes reuse safe
                # the arrival counters start at zero and the last split of each tile resets its own
                workspace[x.device] = (torch.empty((split, m, n), device=x.device, dtype=torch.float32),
                                       torch.zeros(grid[0] * grid[2], device=x.device, dtype=torch.int32))
            ws, cnt = workspace[x.device]
        else:
            ws, cnt = out, out  # unused when SPLIT_K == 1 (the split-K epilogue is compiled out)
        splitk_gemm_kernel[grid](x, w, out, ws, cnt, m, n, k, x.stride(0), w.stride(0), out.stride(0), **meta,
                                 num_warps=c["num_warps"], num_stages=c["num_stages"],
                                 **({"launch_pdl": True} if chained else {}))
        if split > 1 and not last_cta:
            splitk_reduce_kernel[reduce_grid](ws, out, m, n, out.stride(0), SPLIT_K=split, BLOCK=reduce_block,
                                              num_warps=4)

    return run
