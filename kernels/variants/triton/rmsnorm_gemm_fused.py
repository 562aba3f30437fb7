"""rmsnorm_gemm in Triton: RMSNorm folded into a small-M split-K GEMM, one launch.

out[M, N] = (x * rsqrt(mean(x^2) + eps) * g) @ w^T, bf16 in and out, fp32 statistics and accumulate.

The same kernel serves the mla_norms_gemm slot (a shape with a KV dim): the MLA layer's other latent norm,
kv_out = rmsnorm(kv) * kv_g over the kv_lora_rank columns, rides in the same launch as one extra column of
programs (grid dim 0), whose SPLIT_K programs per M tile share its rows. That norm is tiny (M x 512) but as its
own step it costs a launch (five, as vLLM's forward_native) on the critical path of every decode layer.

The per-row scale rsqrt(mean(x^2) + eps) is one number per row, so it can be applied to the GEMM's
result instead of its input: each program multiplies its x tile by the norm weight g (elementwise,
then bf16 for the tensor cores), accumulates (x*g) @ w^T, and sums x^2 over the same K range from the
same loads. The normalised activations are never stored and x is read once per program.
- SPLIT_K == 1: a program walks all of K, so its sum of squares is the row's: scale and store.
- SPLIT_K > 1: each split stores its fp32 partial product and its partial sums of squares into
  workspaces, then bumps an arrival counter for its output tile (acq_rel, GPU scope); the split that
  arrives last sums both in split order (deterministic), scales, writes bf16 and resets the counter
  for the next call (dense_gemm_splitk.py's REDUCE="last_cta" protocol). One launch either way.
At decode M the GEMM is bound by W's bytes, as in dense_gemm_splitk.py: one M tile, W tiles
contiguous along K, pipelined over num_stages, and SPLIT_K to give N = 1536 enough CTAs for 132 SMs.
Every output element is written on every call by exactly one program; inputs are never written.

Under TRITON_INTERPRET=1 (CPU) tl.dot on bf16 is wrong, so the operands are upcast to fp32 there
(UPCAST); the compiled GPU path keeps bf16 operands for the tensor cores.
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
    "SPLIT_K": [1, 2, 3, 4, 6, 8],  # 3 and 6 split q_lora_rank = 1536 into whole 512/256 steps
    "num_warps": [2, 4, 8],
    "num_stages": [2, 3, 4, 5],
}
CONSTRAINTS = [
    "BLOCK_M >= M",
    "BLOCK_M < 2 * M or BLOCK_M == 16",  # the smallest tile that holds M (tl.dot needs >= 16)
    "BLOCK_K * SPLIT_K <= K",
    "BLOCK_N <= N",
    "BLOCK_N * BLOCK_K <= 32768",
    "num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608",  # pipelined tiles fit Hopper smem
    # the fp32 x*g tile and the bf16 W tile of one step: <= 384 bytes a thread (sm_90a ptxas: 512 bytes,
    # BLOCK_N 32 x BLOCK_K 512 on 4 warps, took 255 registers and spilled; 384 took 167, no spill)
    "(4 * BLOCK_M + 2 * BLOCK_N) * BLOCK_K <= 384 * 32 * num_warps",
]
DEFAULT_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 3, "num_warps": 4, "num_stages": 3}


def claims(config: dict, shape: dict) -> dict:
    """What the sm_90a PTX shows for this config (as dense_gemm_splitk.py's claims)."""
    c = {**DEFAULT_CONFIG, **config}
    wgmma = int(c["BLOCK_M"]) >= 64 and int(c["num_warps"]) % 4 == 0
    out = ["wgmma.mma_async" if wgmma else "mma.sync.aligned"]
    if int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    return {"ptx_contains": out}


@triton.jit
def _prefetch_rows_l2(w_ptr, row0, N, stride_wn, k_base, ROWS: tl.constexpr, NBYTES: tl.constexpr):
    """Thread 0 of the program asks NBYTES (16-byte aligned, a multiple of 16) of each of rows row0 .. row0 + ROWS
    - 1 (clamped to N - 1) from column k_base into L2 (sm_90 bulk prefetch: no registers, nothing waits on it)."""
    for r in tl.static_range(ROWS):
        row = tl.minimum(row0 + r, N - 1).to(tl.int64)
        tl.inline_asm_elementwise(
            "{ .reg .pred %pf; .reg .b32 %tx; mov.u32 %tx, %tid.x; setp.eq.u32 %pf, %tx, 0; "
            "@%pf cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [w_ptr + row * stride_wn + k_base + tl.zeros([1], tl.int64), tl.full([1], NBYTES, tl.int32)],
            dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _norm_gemm_tile(x_ptr, g_ptr, w_ptr, out_ptr, ws_ptr, ss_ptr, cnt_ptr, M, N, K, eps,
                    stride_xm, stride_wn, stride_om, pid_n, pid_k, pid_m,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    SPLIT_K: tl.constexpr, K_PER_SPLIT: tl.constexpr, EVEN_K: tl.constexpr,
                    UPCAST: tl.constexpr, NUM_STAGES: tl.constexpr):
    """One (N tile, K split, M tile) of the normed GEMM."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    offs_n_safe = tl.where(n_ok, offs_n, 0)  # clamped rows load a valid row and are never stored
    k_base = pid_k * K_PER_SPLIT
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k_base + offs_k)[None, :]
    w_ptrs = w_ptr + offs_n_safe[:, None] * stride_wn + (k_base + offs_k)[None, :]
    g_ptrs = g_ptr + k_base + offs_k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in tl.range(0, K_PER_SPLIT, BLOCK_K, num_stages=NUM_STAGES):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            g = tl.load(g_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_ok = (k_base + k0 + offs_k) < K
            if K_PER_SPLIT % BLOCK_K != 0:
                k_ok = k_ok & ((k0 + offs_k) < K_PER_SPLIT)
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            g = tl.load(g_ptrs, mask=k_ok, other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[None, :], other=0.0)
        xf = x.to(tl.float32)
        ss += tl.sum(xf * xf, axis=1)
        a = xf * g.to(tl.float32)[None, :]
        if UPCAST:
            acc += tl.dot(a, tl.trans(w.to(tl.float32)))
        else:
            acc += tl.dot(a.to(w.dtype), tl.trans(w))
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
    mask = m_ok[:, None] & n_ok[None, :]
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    if SPLIT_K == 1:
        rstd = tl.rsqrt(ss / K + eps)
        tl.store(out_ptrs, (acc * rstd[:, None]).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        n_tiles = tl.cdiv(N, BLOCK_N)  # the kv column, if any, is not a tile
        tile = pid_m * n_tiles + pid_n
        tl.store(ws_ptr + pid_k * M * N + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask)
        # every N tile of a split computes the same sums of squares; each keeps its own copy so
        # the last split of a tile needs nothing from programs outside that tile's counter
        ss_tile = ss_ptr + (pid_k * tl.num_programs(2) * n_tiles + tile) * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(ss_tile, ss)
        # all threads store, barrier, one release (the atomic); the last split acquires, then reads (.cg: L2)
        tl.debug_barrier()
        cptr = cnt_ptr + tile
        arrived = tl.atomic_add(cptr, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            ss_all = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):  # split order, whoever arrives last: deterministic
                part = ws_ptr + s * M * N + offs_m[:, None] * N + offs_n[None, :]
                total += tl.load(part, mask=mask, other=0.0, cache_modifier=".cg")
                ss_s = ss_ptr + (s * tl.num_programs(2) * n_tiles + tile) * BLOCK_M + tl.arange(0, BLOCK_M)
                ss_all += tl.load(ss_s, cache_modifier=".cg")
            rstd = tl.rsqrt(ss_all / K + eps)
            tl.store(out_ptrs, (total * rstd[:, None]).to(out_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(cptr, 0, sem="relaxed", scope="gpu")  # ready for the next call


@triton.jit
def _kv_norm_rows(kv_ptr, kvw_ptr, kvo_ptr, M, KV, eps, stride_kvm, stride_kvom, pid_k, pid_m,
                  BLOCK_M: tl.constexpr, SPLIT_K: tl.constexpr, KV_BLOCK: tl.constexpr, KV_ROWS: tl.constexpr):
    """kv_out = rmsnorm(kv) * kv_g for this M tile's rows, KV_ROWS at a time, chunks dealt round the SPLIT_K
    programs of the kv column. Rounded as forward_native: normalise in fp32, round, multiply in the model dtype."""
    offs_c = tl.arange(0, KV_BLOCK)
    c_ok = offs_c < KV
    kv_g = tl.load(kvw_ptr + offs_c, mask=c_ok, other=0.0)
    for r0 in range(pid_k * KV_ROWS, BLOCK_M, SPLIT_K * KV_ROWS):
        rows = pid_m * BLOCK_M + r0 + tl.arange(0, KV_ROWS)
        ok = (rows < M)[:, None] & c_ok[None, :]
        v = tl.load(kv_ptr + rows[:, None] * stride_kvm + offs_c[None, :], mask=ok, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(v * v, axis=1) / KV + eps)
        # the model-dtype multiply as fp32 of the two rounded factors, rounded once: what a bf16 multiply is, and
        # Triton's interpreter has no bf16 arithmetic
        y = (v * rstd[:, None]).to(kvo_ptr.dtype.element_ty).to(tl.float32) * kv_g.to(tl.float32)[None, :]
        tl.store(kvo_ptr + rows[:, None] * stride_kvom + offs_c[None, :], y.to(kvo_ptr.dtype.element_ty), mask=ok)


@triton.jit
def rmsnorm_gemm_kernel(x_ptr, g_ptr, w_ptr, out_ptr, ws_ptr, ss_ptr, cnt_ptr, kv_ptr, kvw_ptr, kvo_ptr,
                        M, N, K, KV, eps, stride_xm, stride_wn, stride_om, stride_kvm, stride_kvom,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT_K: tl.constexpr, K_PER_SPLIT: tl.constexpr, EVEN_K: tl.constexpr,
                        UPCAST: tl.constexpr, NUM_STAGES: tl.constexpr, PDL: tl.constexpr,
                        KV_BLOCK: tl.constexpr, KV_ROWS: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    if PDL > 0:
        # chained (build's pdl): the next kernel may launch now, and nothing but W is touched before the wait for
        # the previous kernel, which writes x (and kv); level 2 asks this program's W slice into L2 meanwhile
        tl.extra.cuda.gdc_launch_dependents()
        if PDL == 2:
            _prefetch_rows_l2(w_ptr, pid_n * BLOCK_N, N, stride_wn, pid_k * K_PER_SPLIT, BLOCK_N, K_PER_SPLIT * 2)
        tl.extra.cuda.gdc_wait()
    # mla_norms_gemm: the last column of programs is the kv latent's norm. The constexpr test stays apart from the
    # runtime one (not one `and`), so that rmsnorm_gemm's kernel has no kv branch at all.
    if KV_BLOCK > 0:
        if pid_n == tl.num_programs(0) - 1:
            _kv_norm_rows(kv_ptr, kvw_ptr, kvo_ptr, M, KV, eps, stride_kvm, stride_kvom, pid_k, pid_m,
                          BLOCK_M, SPLIT_K, KV_BLOCK, KV_ROWS)
        else:
            _norm_gemm_tile(x_ptr, g_ptr, w_ptr, out_ptr, ws_ptr, ss_ptr, cnt_ptr, M, N, K, eps,
                            stride_xm, stride_wn, stride_om, pid_n, pid_k, pid_m,
                            BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, K_PER_SPLIT, EVEN_K, UPCAST, NUM_STAGES)
    else:
        _norm_gemm_tile(x_ptr, g_ptr, w_ptr, out_ptr, ws_ptr, ss_ptr, cnt_ptr, M, N, K, eps,
                        stride_xm, stride_wn, stride_om, pid_n, pid_k, pid_m,
                        BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, K_PER_SPLIT, EVEN_K, UPCAST, NUM_STAGES)


def check_constraints(config: dict, shape: dict) -> dict:
    c = {**DEFAULT_CONFIG, **{k: int(v) for k, v in config.items()}}
    unknown = set(c) - set(CONFIG_SPACE)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(CONFIG_SPACE)}")
    env = {**c, "M": int(shape["M"]), "N": int(shape["N"]), "K": int(shape["K"])}
    for rule in CONSTRAINTS:
        if not eval(rule, {}, env):  # noqa: S307 - rules are this module's own constants
            raise ValueError(f"config {config} violates {rule!r} for M={env['M']} N={env['N']} K={env['K']}")
    return c


def _meta(c: dict, shape: dict, upcast: bool, pdl: int = 0) -> dict:
    k, split, bk = int(shape["K"]), c["SPLIT_K"], c["BLOCK_K"]
    even_k = k % (bk * split) == 0
    # Each split covers a whole number of BLOCK_K steps; the last split is masked when K is ragged.
    k_per_split = k // split if even_k else triton.cdiv(triton.cdiv(k, split), bk) * bk
    # the kv norm (mla_norms_gemm's shapes carry KV): a power-of-two row block, rows at a time within about 16 fp32
    # registers a thread; 0 compiles it out (rmsnorm_gemm)
    kv_block = triton.next_power_of_2(int(shape["KV"])) if shape.get("KV") else 0
    kv_rows = min(c["BLOCK_M"], max(1, 512 * c["num_warps"] // kv_block)) if kv_block else 0
    return {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": bk, "SPLIT_K": split,
            "K_PER_SPLIT": k_per_split, "EVEN_K": even_k, "UPCAST": upcast, "NUM_STAGES": c["num_stages"],
            "PDL": pdl, "KV_BLOCK": kv_block, "KV_ROWS": kv_rows}


def compile_ptx(config: dict, shape: dict, arch: str = "sm_90a", pdl: int = 0) -> str:
    """Ahead-of-time PTX for ``arch`` with no GPU, specialised as the JIT is for real torch tensors of
    these shapes (16-byte aligned pointers; K-strides divisible by 16 elements when K is)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    c = check_constraints(config, shape)
    cc = int("".join(ch for ch in arch if ch.isdigit()))
    sig = {"x_ptr": "*bf16", "g_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32",
           "ss_ptr": "*fp32", "cnt_ptr": "*i32", "kv_ptr": "*bf16", "kvw_ptr": "*bf16", "kvo_ptr": "*bf16",
           "M": "i32", "N": "i32", "K": "i32", "KV": "i32", "eps": "fp32",
           "stride_xm": "i32", "stride_wn": "i32", "stride_om": "i32", "stride_kvm": "i32", "stride_kvom": "i32"}
    meta = _meta(c, shape, upcast=False, pdl=pdl)
    sig.update({name: "constexpr" for name in meta})
    idx = {name: i for i, name in enumerate(sig)}
    aligned = ["x_ptr", "g_ptr", "w_ptr", "out_ptr", "ws_ptr", "ss_ptr", "cnt_ptr", "kv_ptr", "kvw_ptr", "kvo_ptr"]
    aligned += ["K", "stride_xm", "stride_wn"] if int(shape["K"]) % 16 == 0 else []
    aligned += ["N", "stride_om"] if int(shape["N"]) % 16 == 0 else []
    attrs = {(idx[name],): [["tt.divisibility", 16]] for name in aligned}
    src = ASTSource(fn=rmsnorm_gemm_kernel, signature=sig, constexprs=meta, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                            options={"num_warps": c["num_warps"], "num_stages": c["num_stages"]})
    return kernel.asm["ptx"]


def build(config: dict, shape: dict, pdl: int = 0):
    """For rmsnorm_gemm ``fn(x, norm_weight, w, out)``; for mla_norms_gemm (the shape has KV) ``fn(x, norm_weight,
    w, kv, kv_norm_weight, out, kv_out)``, the kv latent normed in the same launch. x and kv may be strided row
    views (the attention block passes columns of the fused_qkv_a output).

    pdl (a layer's chain of kernels, not a tuning parameter: a slot is timed from a clean start) 1: launched as
    a programmatic dependent launch that lets the next kernel launch at once and waits for the previous kernel
    (griddepcontrol.wait) before it reads anything; 2: first asks its W slice into L2. sm_90+ GPUs only: elsewhere
    it is off."""
    c = check_constraints(config, shape)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    kv_dim = int(shape.get("KV") or 0)
    eps = float(shape["eps"])
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl={pdl!r}: one of (0, 1, 2)")
    if interpret or not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pdl = 0
    meta = _meta(c, shape, upcast=interpret, pdl=pdl)
    split = c["SPLIT_K"]
    n_tiles, m_tiles = triton.cdiv(n, c["BLOCK_N"]), triton.cdiv(m, c["BLOCK_M"])
    grid = (n_tiles + (1 if kv_dim else 0), split, m_tiles)
    tiles = n_tiles * m_tiles
    workspace: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def launch(x, norm_weight, w, out, kv_in, kv_norm_weight, kv_out) -> None:
        if x.shape != (m, k) or w.shape != (n, k) or norm_weight.shape != (k,) or out.shape != (m, n):
            raise ValueError(f"shapes {tuple(x.shape)} {tuple(norm_weight.shape)} {tuple(w.shape)} "
                             f"{tuple(out.shape)} != built M={m} N={n} K={k}")
        if x.stride(1) != 1 or w.stride(1) != 1 or out.stride(1) != 1 or norm_weight.stride(0) != 1:
            raise ValueError("x, norm_weight, w and out must be contiguous along their last dim")
        if split > 1:
            if x.device not in workspace:  # once per device; stream order makes reuse safe
                # counters start at zero and the last split of each tile resets its own
                workspace[x.device] = (
                    torch.empty((split, m, n), device=x.device, dtype=torch.float32),
                    torch.empty((split, tiles, c["BLOCK_M"]), device=x.device, dtype=torch.float32),
                    torch.zeros(tiles, device=x.device, dtype=torch.int32))
            ws, ss, cnt = workspace[x.device]
        else:
            ws, ss, cnt = out, out, out  # unused when SPLIT_K == 1 (compiled out)
        rmsnorm_gemm_kernel[grid](x, norm_weight, w, out, ws, ss, cnt, kv_in, kv_norm_weight, kv_out,
                                  m, n, k, kv_dim, eps, x.stride(0), w.stride(0), out.stride(0),
                                  kv_in.stride(0), kv_out.stride(0), **meta,
                                  num_warps=c["num_warps"], num_stages=c["num_stages"],
                                  **({"launch_pdl": True} if pdl else {}))

    if not kv_dim:
        def run(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
            launch(x, norm_weight, w, out, x, norm_weight, out)  # the kv arguments are compiled out
        return run

    def run_mla(x: torch.Tensor, norm_weight: torch.Tensor, w: torch.Tensor, kv: torch.Tensor,
                kv_norm_weight: torch.Tensor, out: torch.Tensor, kv_out: torch.Tensor) -> None:
        if kv.shape != (m, kv_dim) or kv_norm_weight.shape != (kv_dim,) or kv_out.shape != (m, kv_dim):
            raise ValueError(f"shapes {tuple(kv.shape)} {tuple(kv_norm_weight.shape)} {tuple(kv_out.shape)} "
                             f"!= built M={m} KV={kv_dim}")
        if kv.stride(1) != 1 or kv_out.stride(1) != 1 or kv_norm_weight.stride(0) != 1:
            raise ValueError("kv, kv_norm_weight and kv_out must be contiguous along their last dim")
        launch(x, norm_weight, w, out, kv, kv_norm_weight, kv_out)

    return run_mla
