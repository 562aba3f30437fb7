"""moe_experts in Triton: decode-time grouped expert MLP over the (token, expert) pairs, grouped by
expert ON THE DEVICE, so each selected expert's weights are streamed once however many tokens
picked it. THREE launches, no host sync, CUDA-graph capturable:

1. align (1 CTA): counting sort of the M*top_k pairs by expert -- an int32 atomic histogram over E
   (each pair gets its slot in its expert), a cumsum over E for the group starts, and the compact
   list of the distinct experts (group g -> expert, start, count; -1 marks unused groups). O(P + E).
2. w13 + silu*mul: grid (max groups = min(P, E), I / BLOCK_N, SPLIT_K); a CTA loads its expert's
   gate rows [n] and up rows [I + n] once and multiplies the gathered token rows of the group.
   SPLIT_K == 1 fuses silu(g)*u in the epilogue; SPLIT_K > 1 (needed at small M to fill 132 SMs:
   8 experts x 8 N-blocks = 64 CTAs at M=1) adds fp32 partials atomically into a workspace and
   the last-arriving CTA of each (group, N-block) reads them back with atomic_xchg(ws, 0) (which
   also re-zeroes them), applies silu*mul and writes h [P, I] bf16. No CTA waits on another.
3. w2 + weighted combine, COMBINE="grouped": grid (max groups, K / BLOCK_N2): each expert's w2
   rows read once; weighted partials go atomically into an fp32 [M, K] workspace; per (token,
   N-block) arrival counters -- the CTA that brings a token's top_k-th contribution reads the row
   back (xchg 0), casts and writes out. COMBINE="pairs": grid (M, K / BLOCK_N2), each CTA sums
   its token's top_k experts itself (no atomics, deterministic; weights re-read per pair, so only
   for M small enough that pairs rarely share experts).
ALIGN="tiles" (M > BLOCK_M; the same as "sort" below that) makes the groups BLOCK_M-row tiles: the align kernel lists
each expert's rows as ceil(count / BLOCK_M) tiles, and every kernel after it runs one tile per CTA where "sort" runs
a group's tiles one after another in one CTA (its M_CHUNKS loop, each tile reading the expert's weights again). An
expert that many tokens picked -- moe_experts_shared's shared expert, picked by all M -- then spreads over M /
BLOCK_M CTAs instead of making each of its CTAs M / BLOCK_M times longer than the rest. That is the likely cause of
the H100's decode layer at M = 64 (session 26): w13 650 vs 597 us and w2 364 vs 313 with the shared expert's 64
rows as one more group, where one more expert's bytes is ~3 us.
ALIGN="none" (M <= 8) skips the align launch: each (token, expert) pair is its own group (expert = the
pair's top-k id, one row), so the grid has M*top_k groups and no kernel has to sort. Correct for any M; an
expert picked by two tokens is then read twice, so it pays only where pairs rarely share experts -- M = 1,
where the top-k are distinct, saves a launch and the align kernel's chain of atomics out of ~40 us.
PDL=1 (ALIGN="none", grouped combine, BLOCK_K2 = I; sm_90+ GPUs) prefetches w2 during w13: the w2 launch
is a programmatic dependent launch, w13 signals griddepcontrol.launch_dependents as it starts, and each w2
program loads its expert's [BLOCK_N2, I] rows (the expert is the router's top-k id, ready before w13 ran)
BEFORE griddepcontrol.wait, which returns once w13 has completed and h is visible. w13 itself is launched
plainly, so the pair never overlaps what ran before it. Measured (H200 table ZA), it LOSES at the same tiles:
M=1 39.0 vs 38.3 us, M=2 72.7 vs 70.2, M=4 114.3 vs 106.0. w13 already streams 59 MB near the HBM rate at
M=1, so the early w2 reads share bandwidth rather than fill idle time, and the prefetched tile costs the w2
kernel occupancy (114 registers). It pays in shared_expert_gemv, whose two launches are latency-bound.
At M <= 4 the CUDA-core moe_experts_gemv.py beats this kernel on the H200 (M=1 28.49 vs 35.14 us, table ZE);
the tensor-core tiles keep M >= 16, where one expert's weights serve several tokens.
Workspaces are allocated and zeroed on the first call on a device, then kept clean by the kernels
themselves. Every element of out is written by every call.
"""

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "BLOCK_M": [16, 32, 64],
    "BLOCK_N": [16, 32, 64],
    "BLOCK_K": [128, 256],  # 64 never won on the H200 (dropped to keep PDL under the API's cap)
    "SPLIT_K": [1, 2, 4, 8],
    "num_warps": [4, 8],  # 2 warps never won on the H200 and kept the space under the API's 100k-point cap
    "num_stages": [3, 4],  # 2 won none of the 53 tables' grouped winners; dropped to make room for ALIGN "tiles"
    "COMBINE": ["grouped", "pairs"],
    # the H200 table (bench/results/2026-12-03-h200-decode-tuning-r.sqlite): w2 tiles of 128 rows won at every
    # M and time falls with the width at M=1 (32: 49.5 us, 64: 44.1, 128: 40.7); 2 warps for w2 lost (45.4)
    "BLOCK_N2": [64, 128],  # 32 was the slowest at every M
    "BLOCK_K2": [64, 128, 256],
    "num_warps2": [4, 8],
    "num_stages2": [2, 3],
    "ALIGN": ["sort", "none", "tiles"],  # "sort" first: what the versions before this parameter did
    "PDL": [0, 1],
}
CONSTRAINTS = [
    "BLOCK_M <= max(16, M)",
    "BLOCK_N <= I",
    "BLOCK_K * SPLIT_K <= K",
    "BLOCK_K2 <= I",
    "BLOCK_N * BLOCK_K <= 16384",
    "BLOCK_N2 * BLOCK_K2 <= 16384",
    "COMBINE == 'grouped' or M <= 8",
    "ALIGN != 'none' or M <= 8",
    "ALIGN != 'tiles' or M > BLOCK_M",  # below that every group is one tile: the same kernels as "sort"
    "PDL == 0 or (ALIGN == 'none' and COMBINE == 'grouped' and BLOCK_K2 >= I)",  # prefetch: the whole K of w2
]
DEFAULT_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 4, "num_warps": 4, "num_stages": 3,
                  "COMBINE": "grouped", "BLOCK_N2": 64, "BLOCK_K2": 128, "num_warps2": 4, "num_stages2": 2,
                  "ALIGN": "sort", "PDL": 0}


def claims(config, shape):
    """What the sm_90a PTX shows: the tensor-core w13 pipelined with cp.async (Triton lowers tl.dot to Hopper's
    wgmma where a warp group owns a 64-row tile, else to mma.sync: an H100 run of BLOCK_M 64 was refused for
    claiming mma.sync), and acq_rel arrival atomics wherever a kernel counts arrivals (the align histogram,
    w13's split-K, w2's grouped combine)."""
    c = _full_config(config)
    wgmma = int(c["BLOCK_M"]) >= 64 and int(c["num_warps"]) % 4 == 0
    out = ["wgmma.mma_async" if wgmma else "mma.sync", "cp.async"]
    if c["ALIGN"] != "none" or c["COMBINE"] == "grouped" or int(c["SPLIT_K"]) > 1:
        out.append("atom.global.gpu.acq_rel.add")
    if int(c["PDL"]):
        out += ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
    return {"ptx_contains": out}
USES_LIBRARY = False


@triton.jit
def moe_align_kernel(ids_ptr, ecnt_ptr, estart_ptr, sorted_ptr, pos_ptr, g_expert_ptr, g_start_ptr, g_count_ptr,
                     P, E: tl.constexpr, E_PAD: tl.constexpr, P_PAD: tl.constexpr, MAX_G: tl.constexpr,
                     G_PAD: tl.constexpr, INTERPRET: tl.constexpr, TILE_M: tl.constexpr, TILES_PER_E: tl.constexpr):
    """TILE_M == 0: one group per expert present; else one group per TILE_M-row tile of each expert's rows."""
    p = tl.arange(0, P_PAD)
    p_ok = p < P
    ids = tl.load(ids_ptr + p, mask=p_ok, other=0)
    # slot of each pair inside its expert (order within an expert is arbitrary)
    pos = tl.atomic_add(ecnt_ptr + ids, tl.full([P_PAD], 1, tl.int32), mask=p_ok, sem="acq_rel", scope="gpu")
    tl.store(pos_ptr + p, pos, mask=p_ok)
    tl.debug_barrier()
    e = tl.arange(0, E_PAD)
    e_ok = e < E
    if INTERPRET:
        c = tl.load(ecnt_ptr + e, mask=e_ok, other=0)
        tl.store(ecnt_ptr + e, tl.zeros([E_PAD], tl.int32), mask=e_ok)
    else:  # read the histogram at L2 and re-zero it for the next call
        c = tl.atomic_xchg(ecnt_ptr + e, tl.zeros([E_PAD], tl.int32), mask=e_ok, sem="acq_rel", scope="gpu")
    c = tl.where(e_ok, c, 0)
    gstart = tl.cumsum(c, axis=0) - c
    tl.store(estart_ptr + e, gstart, mask=e_ok)
    if TILE_M == 0:
        present = (c > 0).to(tl.int32)
        gidx = tl.cumsum(present, axis=0) - present
        n_groups = tl.sum(present, axis=0)
        has = present > 0
        tl.store(g_expert_ptr + gidx, e, mask=has)
        tl.store(g_start_ptr + gidx, gstart, mask=has)
        tl.store(g_count_ptr + gidx, c, mask=has)
    else:  # expert e's tiles are groups tstart[e] .. tstart[e] + ntiles[e] - 1
        ntiles = (c + TILE_M - 1) // TILE_M
        tstart = tl.cumsum(ntiles, axis=0) - ntiles
        n_groups = tl.sum(ntiles, axis=0)
        for j in tl.static_range(TILES_PER_E):
            has = j < ntiles
            tl.store(g_expert_ptr + tstart + j, e, mask=has)
            tl.store(g_start_ptr + tstart + j, gstart + j * TILE_M, mask=has)
            tl.store(g_count_ptr + tstart + j, tl.minimum(c - j * TILE_M, TILE_M), mask=has)
    g = tl.arange(0, G_PAD)
    tl.store(g_expert_ptr + g, tl.full([G_PAD], -1, tl.int32), mask=(g >= n_groups) & (g < MAX_G))
    tl.debug_barrier()
    st = tl.load(estart_ptr + ids, mask=p_ok, other=0)
    pos2 = tl.load(pos_ptr + p, mask=p_ok, other=0)
    tl.store(sorted_ptr + st + pos2, p, mask=p_ok)


@triton.jit
def moe_w13_kernel(x_ptr, w13_ptr, h_ptr, ws_ptr, cnt_ptr, sorted_ptr, g_expert_ptr, g_start_ptr, g_count_ptr,
                   stride_xm,
                   K: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr, K_SPLIT: tl.constexpr,
                   M_CHUNKS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   SPLIT_K: tl.constexpr, INTERPRET: tl.constexpr, PDL: tl.constexpr):
    if PDL:  # the w2 launch's programs may start (and prefetch) once all of these have started
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    e = tl.load(g_expert_ptr + g)
    if e >= 0:
        start = tl.load(g_start_ptr + g)
        cnt = tl.load(g_count_ptr + g)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < I
        wbase = w13_ptr + e.to(tl.int64) * (2 * I * K)
        for mc in tl.static_range(M_CHUNKS):
            if mc * BLOCK_M < cnt:
                r = mc * BLOCK_M + tl.arange(0, BLOCK_M)
                r_ok = r < cnt
                pair = tl.load(sorted_ptr + start + r, mask=r_ok, other=0)
                tok = pair // TOP_K
                acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for kk in range(0, K_SPLIT, BLOCK_K):
                    offs_k = pid_k * K_SPLIT + kk + tl.arange(0, BLOCK_K)
                    k_ok = offs_k < K
                    a = tl.load(x_ptr + tok[:, None] * stride_xm + offs_k[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
                    wm = n_ok[:, None] & k_ok[None, :]
                    bg = tl.load(wbase + offs_n[:, None] * K + offs_k[None, :], mask=wm, other=0.0)
                    bu = tl.load(wbase + (I + offs_n)[:, None] * K + offs_k[None, :], mask=wm, other=0.0)
                    if INTERPRET:
                        af = a.to(tl.float32)
                        acc_g += tl.dot(af, tl.trans(bg.to(tl.float32)))
                        acc_u += tl.dot(af, tl.trans(bu.to(tl.float32)))
                    else:
                        acc_g += tl.dot(a, tl.trans(bg))
                        acc_u += tl.dot(a, tl.trans(bu))
                omask = r_ok[:, None] & n_ok[None, :]
                if SPLIT_K == 1:
                    hv = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
                    tl.store(h_ptr + pair[:, None] * I + offs_n[None, :], hv.to(h_ptr.dtype.element_ty), mask=omask)
                else:
                    wsp = ws_ptr + pair[:, None] * (2 * I) + offs_n[None, :]
                    tl.atomic_add(wsp, acc_g, mask=omask, sem="relaxed", scope="gpu")
                    tl.atomic_add(wsp + I, acc_u, mask=omask, sem="relaxed", scope="gpu")
        if SPLIT_K > 1:
            tl.debug_barrier()
            cptr = cnt_ptr + g * tl.num_programs(1) + pid_n
            arrived = tl.atomic_add(cptr, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_K - 1:
                for mc in tl.static_range(M_CHUNKS):
                    if mc * BLOCK_M < cnt:
                        r = mc * BLOCK_M + tl.arange(0, BLOCK_M)
                        r_ok = r < cnt
                        pair = tl.load(sorted_ptr + start + r, mask=r_ok, other=0)
                        omask = r_ok[:, None] & n_ok[None, :]
                        wsp = ws_ptr + pair[:, None] * (2 * I) + offs_n[None, :]
                        zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                        if INTERPRET:
                            gv = tl.load(wsp, mask=omask, other=0.0)
                            uv = tl.load(wsp + I, mask=omask, other=0.0)
                            tl.store(wsp, zero, mask=omask)
                            tl.store(wsp + I, zero, mask=omask)
                        else:
                            gv = tl.atomic_xchg(wsp, zero, mask=omask, sem="acq_rel", scope="gpu")
                            uv = tl.atomic_xchg(wsp + I, zero, mask=omask, sem="acq_rel", scope="gpu")
                        hv = gv / (1.0 + tl.exp(-gv)) * uv
                        tl.store(h_ptr + pair[:, None] * I + offs_n[None, :], hv.to(h_ptr.dtype.element_ty), mask=omask)
                tl.atomic_xchg(cptr, 0, sem="relaxed", scope="gpu")


@triton.jit
def moe_w2_grouped_kernel(h_ptr, w2_ptr, tw_ptr, ows_ptr, cnt_ptr, out_ptr, sorted_ptr, g_expert_ptr, g_start_ptr,
                          g_count_ptr, stride_om,
                          K: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr, M_CHUNKS: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          INTERPRET: tl.constexpr, PDL: tl.constexpr):
    g = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(g_expert_ptr + g)
    if e >= 0:
        start = tl.load(g_start_ptr + g)
        cnt = tl.load(g_count_ptr + g)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < K
        wbase = w2_ptr + e.to(tl.int64) * (K * I)
        nb = tl.num_programs(1)
        if PDL:
            # this expert's w2 rows do not depend on w13 (BLOCK_K == I): load them, then wait for h
            offs_kp = tl.arange(0, BLOCK_K)
            b_pre = tl.load(wbase + offs_n[:, None] * I + offs_kp[None, :], mask=n_ok[:, None], other=0.0)
            tl.extra.cuda.gdc_wait()
        for mc in tl.static_range(M_CHUNKS):
            if mc * BLOCK_M < cnt:
                r = mc * BLOCK_M + tl.arange(0, BLOCK_M)
                r_ok = r < cnt
                pair = tl.load(sorted_ptr + start + r, mask=r_ok, other=0)
                tok = pair // TOP_K
                wt = tl.load(tw_ptr + pair, mask=r_ok, other=0.0)
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                if PDL:
                    a = tl.load(h_ptr + pair[:, None] * I + offs_kp[None, :], mask=r_ok[:, None], other=0.0)
                    acc += tl.dot(a, tl.trans(b_pre))
                else:
                    for k0 in range(0, I, BLOCK_K):
                        offs_k = k0 + tl.arange(0, BLOCK_K)
                        k_ok = offs_k < I
                        a = tl.load(h_ptr + pair[:, None] * I + offs_k[None, :], mask=r_ok[:, None] & k_ok[None, :],
                                    other=0.0)
                        b = tl.load(wbase + offs_n[:, None] * I + offs_k[None, :], mask=n_ok[:, None] & k_ok[None, :],
                                    other=0.0)
                        if INTERPRET:
                            acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)))
                        else:
                            acc += tl.dot(a, tl.trans(b))
                acc = acc * wt[:, None]
                omask = r_ok[:, None] & n_ok[None, :]
                wsp = ows_ptr + tok[:, None] * K + offs_n[None, :]
                tl.atomic_add(wsp, acc, mask=omask, sem="relaxed", scope="gpu")
                tl.debug_barrier()
                ticket = tl.atomic_add(cnt_ptr + tok * nb + pid_n, tl.full([BLOCK_M], 1, tl.int32), mask=r_ok,
                                       sem="acq_rel", scope="gpu")
                last = r_ok & (ticket == TOP_K - 1)
                lmask = last[:, None] & n_ok[None, :]
                zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                if INTERPRET:
                    v = tl.load(wsp, mask=lmask, other=0.0)
                    tl.store(wsp, zero, mask=lmask)
                else:
                    v = tl.atomic_xchg(wsp, zero, mask=lmask, sem="acq_rel", scope="gpu")
                tl.store(out_ptr + tok[:, None] * stride_om + offs_n[None, :], v.to(out_ptr.dtype.element_ty), mask=lmask)
                tl.store(cnt_ptr + tok * nb + pid_n, tl.zeros([BLOCK_M], tl.int32), mask=last)


@triton.jit
def moe_w2_pairs_kernel(h_ptr, w2_ptr, ids_ptr, tw_ptr, out_ptr, stride_om,
                        K: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < K
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        e = tl.load(ids_ptr + t * TOP_K + j)
        wt = tl.load(tw_ptr + t * TOP_K + j)
        wbase = w2_ptr + e.to(tl.int64) * (K * I)
        part = tl.zeros([BLOCK_N], dtype=tl.float32)
        for k0 in range(0, I, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            k_ok = offs_k < I
            hv = tl.load(h_ptr + (t * TOP_K + j) * I + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            b = tl.load(wbase + offs_n[:, None] * I + offs_k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            part += tl.sum(b.to(tl.float32) * hv[None, :], axis=1)
        acc += wt * part
    tl.store(out_ptr + t * stride_om + offs_n, acc.to(out_ptr.dtype.element_ty), mask=n_ok)


def _np2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def _full_config(config):
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    return cfg


def _consts(cfg, shape, interpret, pdl=False):
    """pdl: the config asks for PDL AND the target runs griddepcontrol (sm_90+, not the interpreter)."""
    E, K, I, top_k, M = (int(shape[n]) for n in ("E", "K", "I", "top_k", "M"))
    M = max(M, 1)
    P = M * top_k
    sort = cfg["ALIGN"] != "none"
    tiles = cfg["ALIGN"] == "tiles"
    bm = int(cfg["BLOCK_M"])
    max_g = min(P, E) if sort else P  # unsorted: one group per pair
    if tiles:  # at most one partial tile per expert present: sum ceil(c_e / bm) <= G + (P - G) // bm
        max_g += (P - max_g) // bm
    split = int(cfg["SPLIT_K"])
    bk = int(cfg["BLOCK_K"])
    k_split = triton.cdiv(triton.cdiv(K, split), bk) * bk
    split = triton.cdiv(K, k_split)  # effective split (no empty K slices)
    align = dict(E=E, E_PAD=_np2(E), P_PAD=max(16, _np2(P)), MAX_G=max_g, G_PAD=_np2(max_g), INTERPRET=interpret,
                 TILE_M=bm if tiles else 0, TILES_PER_E=triton.cdiv(M, bm) if tiles else 1)
    # a CTA loops over its group's tiles with "sort"; with "tiles" a group is one tile, an unsorted group one row
    chunks = triton.cdiv(M, bm) if sort and not tiles else 1
    w13 = dict(K=K, I=I, TOP_K=top_k, K_SPLIT=k_split, M_CHUNKS=chunks, BLOCK_M=bm,
               BLOCK_N=int(cfg["BLOCK_N"]), BLOCK_K=bk, SPLIT_K=split, INTERPRET=interpret, PDL=pdl)
    if cfg["COMBINE"] == "grouped":
        w2 = dict(K=K, I=I, TOP_K=top_k, M_CHUNKS=chunks, BLOCK_M=bm, BLOCK_N=int(cfg["BLOCK_N2"]),
                  BLOCK_K=min(int(cfg["BLOCK_K2"]), _np2(I)), INTERPRET=interpret, PDL=pdl)
    else:
        w2 = dict(K=K, I=I, TOP_K=top_k, BLOCK_N=int(cfg["BLOCK_N2"]), BLOCK_K=min(int(cfg["BLOCK_K2"]), _np2(I)))
    dims = dict(E=E, K=K, I=I, top_k=top_k, M=M, P=P, max_g=max_g, nb1=triton.cdiv(I, int(cfg["BLOCK_N"])),
                nb2=triton.cdiv(K, int(cfg["BLOCK_N2"])))
    return align, w13, w2, dims


def build(config, shape):
    cfg = _full_config(config)
    grouped = cfg["COMBINE"] == "grouped"
    sort = cfg["ALIGN"] != "none"
    nw, ns = int(cfg["num_warps"]), int(cfg["num_stages"])
    nw2, ns2 = int(cfg["num_warps2"]), int(cfg["num_stages2"])
    state = {}

    def _init(dev, interpret):
        pdl = (bool(int(cfg["PDL"])) and not interpret and dev.type == "cuda"
               and torch.cuda.get_device_capability(dev)[0] >= 9)
        align, w13, w2, d = _consts(cfg, shape, interpret, pdl)
        i32 = dict(device=dev, dtype=torch.int32)
        return {"align": align, "w13": w13, "w2": w2, "d": d,
                "ecnt": torch.zeros((d["E"],), **i32), "estart": torch.zeros((d["E"],), **i32),
                "sorted": torch.zeros((d["P"],), **i32), "pos": torch.zeros((d["P"],), **i32),
                "g_expert": torch.full((d["max_g"],), -1, **i32), "g_start": torch.zeros((d["max_g"],), **i32),
                "g_count": torch.zeros((d["max_g"],), **i32),
                "h": torch.zeros((d["P"], d["I"]), device=dev, dtype=torch.bfloat16),
                "ws13": torch.zeros((d["P"] * 2 * d["I"] if w13["SPLIT_K"] > 1 else 1,), device=dev, dtype=torch.float32),
                "cnt13": torch.zeros((d["max_g"] * d["nb1"],), **i32),
                "ows": torch.zeros((d["M"] * d["K"] if grouped else 1,), device=dev, dtype=torch.float32),
                "cnt2": torch.zeros((d["M"] * d["nb2"] if grouped else 1,), **i32),
                # ALIGN="none": pair p is group p, starting at row p of the identity order, one row long
                "pairs": torch.arange(d["P"], **i32), "ones": torch.ones((d["P"],), **i32)}

    def run(x, w13, w2, topk_ids, topk_weights, out):
        interpret = x.device.type == "cpu"
        key = (x.device, interpret)
        st = state.get(key)
        if st is None:
            st = state[key] = _init(x.device, interpret)
        d = st["d"]
        m = x.shape[0]
        if m != d["M"]:
            raise ValueError(f"built for M={d['M']}, called with {m} tokens")
        ids = topk_ids.contiguous()
        tw = topk_weights.contiguous()
        if sort:
            moe_align_kernel[(1,)](ids, st["ecnt"], st["estart"], st["sorted"], st["pos"], st["g_expert"],
                                   st["g_start"], st["g_count"], d["P"], num_warps=4, **st["align"])
            groups = (st["sorted"], st["g_expert"], st["g_start"], st["g_count"])
        else:  # the top-k ids themselves are the groups' experts
            groups = (st["pairs"], ids, st["pairs"], st["ones"])
        moe_w13_kernel[(d["max_g"], d["nb1"], st["w13"]["SPLIT_K"])](
            x, w13, st["h"], st["ws13"], st["cnt13"], *groups, x.stride(0), num_warps=nw, num_stages=ns, **st["w13"])
        if grouped:
            launch = {"launch_pdl": True} if st["w2"]["PDL"] else {}
            moe_w2_grouped_kernel[(d["max_g"], d["nb2"])](
                st["h"], w2, tw, st["ows"], st["cnt2"], out, *groups, out.stride(0), num_warps=nw2,
                num_stages=ns2, **st["w2"], **launch)
        else:
            moe_w2_pairs_kernel[(m, d["nb2"])](st["h"], w2, ids, tw, out, out.stride(0), num_warps=nw2,
                                               num_stages=ns2, **st["w2"])

    return run


# --- ahead-of-time PTX, no GPU -----------------------------------------------------------------

def _aot(kernel, types, consts, num_warps, num_stages, arch, aligned=(), pdl_launch=False):
    """PTX for one kernel, specialised as the JIT would at run time: pointers (torch allocations)
    and the ints in ``aligned`` (strides that are multiples of 16) carry tt.divisibility=16."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    cap = int("".join(ch for ch in str(arch) if ch.isdigit()) or 90)
    sig, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in consts:
            sig[name] = "constexpr"
            continue
        sig[name] = types[name]
        if types[name].startswith("*") or name in aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(kernel, sig, consts, attrs)
    out = triton.compile(src, target=GPUTarget("cuda", cap, 32),
                         options={"num_warps": num_warps, "num_stages": num_stages,
                                  **({"launch_pdl": True} if pdl_launch else {})})
    return out.asm["ptx"]


def compile_ptx(config, shape, arch="sm_90a"):
    cfg = _full_config(config)
    pdl = bool(int(cfg["PDL"])) and int("".join(ch for ch in str(arch) if ch.isdigit()) or 90) >= 90
    align, w13, w2, _ = _consts(cfg, shape, False, pdl)
    types = {n: "*i32" for n in ("ids_ptr", "ecnt_ptr", "estart_ptr", "sorted_ptr", "pos_ptr", "g_expert_ptr",
                                 "g_start_ptr", "g_count_ptr", "cnt_ptr")}
    types.update({"x_ptr": "*bf16", "w13_ptr": "*bf16", "h_ptr": "*bf16", "ws_ptr": "*fp32", "w2_ptr": "*bf16",
                  "tw_ptr": "*fp32", "ows_ptr": "*fp32", "out_ptr": "*bf16", "P": "i32", "stride_xm": "i32",
                  "stride_om": "i32"})
    al = ("stride_xm", "stride_om")
    ptx = [_aot(moe_align_kernel, types, align, 4, 1, arch)] if cfg["ALIGN"] != "none" else []
    ptx.append(_aot(moe_w13_kernel, types, w13, int(cfg["num_warps"]), int(cfg["num_stages"]), arch, al))
    k2 = moe_w2_grouped_kernel if cfg["COMBINE"] == "grouped" else moe_w2_pairs_kernel
    ptx.append(_aot(k2, types, w2, int(cfg["num_warps2"]), int(cfg["num_stages2"]), arch, al, pdl_launch=pdl))
    return "\n".join(ptx)
