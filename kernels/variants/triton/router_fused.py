"""router in Triton: split-K / E-parallel gate GEMV into an fp32 logits workspace, then the
DeepSeek-V3 noaux_tc grouped top-k epilogue.

EPILOGUE="fused" (ONE launch): every CTA atomically adds its [BLOCK_M, BLOCK_E] partial logits
into the fp32 workspace, then bumps an arrival counter (barrier + acq_rel, gpu scope); the CTA that
arrives last reads the logits back at L2 and re-zeroes the workspace for the next call, runs
sigmoid/softmax + bias + group mask + top-k for every token, and resets the counter. No CTA ever waits
on another, so it cannot deadlock whatever the occupancy (e.g. beside the shared expert on another stream).
EPILOGUE="fused_tiles": the same one launch with a two-level arrival, for grids of hundreds of CTAs: each
(E, M) tile's K splits count on that tile's own counter, and only the last split of a tile counts on the
global one, so no address takes more than max(splits, tiles) arrivals where "fused" takes one per CTA. In
both fused forms every CTA loads the bias up front, beside its W: the epilogue's only dependent read is the
logits.
EPILOGUE="separate" (TWO launches): same GEMV without the counter, then one CTA per EPI_M tokens
runs the epilogue (better for M >= 2, where one CTA doing every row's top-k is the tail) with EPI_WARPS warps.
The top-k makes one reduction per pick (a packed int64 key with its score). Measured on the H200 (tables ZC,
ZD): that and reading the logits with plain L2 loads instead of an acq_rel atomic_xchg per element took the
router from 9.93 / 12.41 / 12.49 / 11.91 / 14.27 us to 8.15 / 9.12 / 9.54 / 9.43 / 11.54 at M = 1 / 2 / 4 / 16 / 64.
TOPK="bitonic" makes all picks at once: tl.topk's bitonic merge network over the same keys (rounds of
independent compare-and-swaps, where the picks are TOP_K dependent reductions), then each pick's score by a
one-hot sum. Why: the H200 block profile of table ZF has the separate epilogue at 3.4-3.5 us of the router's
7.5 at M = 2 and 4 (its GEMV 4.1 us, 79% of the fastest plain read of those bytes). Measured beside the
pick-by-pick configs in one job (table ZG): M = 1 fused 7.35 vs 8.56 us, M = 16 separate 8.47 vs 10.20, M = 64
9.92 vs 11.81; it wins with 4 epilogue warps and loses with 1 (16 keys a thread, 138 registers); 8 gain
nothing over 4 (table ZH). The ZH block profile has the epilogue at 2.5-2.7 us.
PDL=1 (sm_90+, GPU only; separate form) launches the epilogue as a programmatic dependent launch: the GEMV
signals griddepcontrol.launch_dependents as it starts, so the epilogue's CTAs are resident while the GEMV
runs; each loads its bias, then griddepcontrol.wait returns once the GEMV grid has completed and its logits
are visible. Why: at M = 1 the separate form is 7.34 us (table ZH), GEMV ~4 us and epilogue ~2.6 us, and
the epilogue's launch (an empty kernel is 0.62 us in the harness, bench/results/2026-12-03-h200-latency-
floor.md) and its bias load (a DRAM round trip) sit on the critical path between them. The GEMV is launched
plainly, so a call never overlaps the previous call's epilogue (which re-zeroes the workspace). Measured
beside the same configs without it in one job (H200 table ZI): M = 2 / 4 / 16 8.27 / 8.52 / 8.81 us vs 8.99 /
9.13 / 9.21; M = 1 8.31 vs 8.84 with BLOCK_K 128 and 4 warps but 9.01 vs 8.71 with ZH's 256 and 2; M = 64 10.91
vs 10.72. That session ran ~1 us slower than ZH's throughout, so no ZI config displaced a ZH winner.
MATH="fma" (M <= 4) computes the logits on the CUDA cores instead of with tl.dot, in dense_gemm_gemv.py's
one-round-trip shape: a program's K range is a whole number of BLOCK_K steps known at compile time and
unrolled, so all its W loads are in flight at once, and BLOCK_M is M's next power of two, not a 16-row
tensor-core tile. At M = 1 the gate (5.5 MB, HBM floor 1.3 us) was read at 13% of the floor by the tl.dot
loop (H200 table X: 9.96 us), where one 2-16 KB round trip per program is the fastest plain read of
those bytes (bench/results/2026-12-03-h200-latency-floor.md). Measured (H200 table Y), it LOSES to the
tensor-core form: 15.4 us at M=2 and 24.6 at M=4 against 12.5 for tl.dot (96 CTAs of BLOCK_E 64), and no
fma config reached the top 3 at M=1 (9.93 us, dot). Likely cause: its 336-2688 small CTAs each make
BLOCK_M x BLOCK_E relaxed fp32 adds into the logits and one acq_rel add on the single arrival counter,
which serialise at L2, where the dot form makes 96. Kept as a searchable point of the space: the service's
table decides. EPILOGUE="fused_tiles" tested that hypothesis (table ZF, M = 1): the fma form went from 10.82 us
(single counter, table X-ZE) to 8.78, still behind the tensor-core "fused" form's 8.40 in the same job, which
the two-level arrival slows (9.08: its 84 CTAs pay a second dependent atomic and gain nothing).
build(..., pdl=1) is the layer's chain (bench/decode_layer.py's tuned_chain, the export's dispatch(..., pdl=1)): the
GEMV is a dependent launch of the kernel ahead (the post-attention norm), fetches its first W tile (the fma
form: its first unrolled step) before griddepcontrol.wait and x after it, and adds into the workspace only after
it, so the previous call's epilogue has re-zeroed it; a separate epilogue is then always chained, and lets the
experts' w13 launch as it starts. Why: at M = 1 the gate GEMV is one or two DRAM round trips of 5.5 MB at ~4 us,
of the order of the norm ahead of it, and its weights depend on nothing. The service checks that form in its
race (workers/chain.py) on sm_90+.
A shape with ``shared`` = S > 0 (moe_experts_shared's routing, bench/moe_block.py's tuned_shared paths) makes each
output row top_k + S wide: the top-k, then the S shared experts as experts E .. E+S-1 with weight 1 (not scaled),
written by the same epilogue, so that one grouped experts pass computes the routed and the shared experts together
without a launch to build its list. The router slot's own shapes have S = 0.
The workspace (zeroed once at first call) is self-cleaning: every element that a call adds to is
set back to 0 by that call's epilogue. CUDA-graph capturable: no host sync, no allocation
after the first call.
"""

import math

import torch
import triton
import triton.language as tl

CONFIG_SPACE = {
    "MATH": ["dot", "fma"],  # tensor-core tiles, or CUDA-core FMAs for M <= 4 (see the docstring)
    # 4 and 8 went (never in a top 10 of any M in table ZH's 183 passed router runs) to keep the space under
    # the API's cap
    "BLOCK_E": [16, 32, 64],
    "BLOCK_K": [128, 256, 512],
    # 7, 14, 28: hidden 7168 in whole steps of 1024, 512, 256 elements (fewer than 7 splits never filled
    # the SMs: E = 384 is at most 24 tensor-core tiles)
    "SPLIT_K": [7, 8, 14, 16, 28],
    "BLOCK_M": [1, 2, 4, 16, 64],
    # fused: one launch, the last CTA to arrive runs the epilogue; fused_tiles: the same with a two-level
    # arrival (the last split of each E tile, then the last tile: no single counter that every CTA hits);
    # separate: a second launch
    "EPILOGUE": ["fused", "fused_tiles", "separate"],
    # 1 won every bucket of every H200 table (2 and 8 went for EPI_WARPS, 4 for TOPK, under the cap); build()
    # still takes the others (older configs)
    "EPI_M": [1],
    # warps of the separate epilogue launch: 1 keeps each top-k pick's reduction inside one warp (shuffles,
    # no CTA barrier); 4 is what the launch had before this parameter (the GEMV's num_warps, 4 in every win)
    # and what the bitonic top-k won with (table ZG: one warp holds 16 keys a thread, 138 registers); 8 gained
    # nothing over 4 (table ZH) and went for PDL, under the cap (build() still takes it)
    "EPI_WARPS": [1, 4],
    # separate epilogue as a programmatic dependent launch (sm_90+; see the docstring)
    "PDL": [0, 1],
    # pick: TOP_K reductions over E, one after another; bitonic: tl.topk's merge network, all picks at once
    "TOPK": ["pick", "bitonic"],
    "num_warps": [2, 4, 8],  # 1 never reached a top 3 (dropped for EPI_WARPS 8, under the cap)
    "num_stages": [2, 3, 4],
}
CONSTRAINTS = [
    "BLOCK_M <= max(16, M)",
    "BLOCK_K * SPLIT_K <= K",
    "EPI_M <= max(1, M)",
    "EPILOGUE == 'separate' or EPI_WARPS == 1",  # the fused epilogue runs in the GEMV's CTA: one point
    "EPILOGUE == 'separate' or PDL == 0",  # a dependent launch needs a second launch
    "TOPK == 'pick' or top_k > 1",  # tl.topk's merge network needs k >= 2
    "BLOCK_E * BLOCK_K <= 16384",
    "MATH == 'fma' or (BLOCK_M >= 16 and BLOCK_E >= 16)",  # tl.dot's tiles
    "MATH == 'dot' or (M <= 4 and BLOCK_M >= M and BLOCK_M < 2 * M)",  # one BLOCK_M per M
    # fma: every program the same whole number of unrolled steps, whole 16-byte W vectors per thread,
    # <= 256 bytes of loads in flight and <= 64 partial-sum registers a thread
    "MATH == 'dot' or (K % BLOCK_K == 0 and (K // BLOCK_K) % SPLIT_K == 0)",
    "MATH == 'dot' or BLOCK_E * BLOCK_K >= 256 * num_warps",
    "MATH == 'dot' or (K // SPLIT_K) * (BLOCK_M + BLOCK_E) <= 4096 * num_warps",
    "MATH == 'dot' or BLOCK_M * BLOCK_E * BLOCK_K <= 2048 * num_warps",
    "MATH == 'dot' or num_stages == 2",  # unrolled: no pipeline; one value, so a search never re-measures it
]
DEFAULT_CONFIG = {"MATH": "dot", "BLOCK_E": 16, "BLOCK_K": 128, "SPLIT_K": 8, "BLOCK_M": 16, "EPILOGUE": "fused",
                  "EPI_M": 1, "EPI_WARPS": 1, "TOPK": "pick", "PDL": 0, "num_warps": 4,
                  "num_stages": 3}
# relaxed partial-sum adds: LLVM emits them as atom.* or red.* (result unused), so claim the common part
def claims(config: dict, shape: dict) -> dict:
    """The arrival counter's acq_rel add exists only in the fused (one-launch) epilogue: the separate
    one has no counter (seen on the H200: every 'separate' config failed a blanket claim)."""
    c = {**DEFAULT_CONFIG, **config}
    fused = c["EPILOGUE"] != "separate"
    # tl.dot lowers to Hopper wgmma when a warp group owns a 64-row tile, else to mma.sync; fma: 16-byte
    # vector loads of W and no tensor-core instruction at all
    if c["MATH"] == "fma":
        math = "ld.global.v4"
    else:
        math = "wgmma.mma_async" if int(c["BLOCK_M"]) >= 64 and int(c["num_warps"]) % 4 == 0 else "mma.sync"
    pdl = ["griddepcontrol.launch_dependents", "griddepcontrol.wait"] if int(c["PDL"]) and not fused else []
    return {"ptx_contains": (["atom.global.gpu.acq_rel.add"] if fused else []) + ["global.gpu.relaxed.add", math]
            + pdl}
USES_LIBRARY = False

NEG_INF = float("-inf")


@triton.jit
def _keep_larger(key_a, score_a, key_b, score_b):
    a = key_a > key_b  # keys are unique: no ties
    return tl.where(a, key_a, key_b), tl.where(a, score_a, score_b)


@triton.jit
def _route_rows(ws_ptr, bias, ids_ptr, wts_ptr, m0, M, scaling,
                E: tl.constexpr, E_PAD: tl.constexpr, EPI_M: tl.constexpr,
                TOP_K: tl.constexpr, TOP_K_PAD: tl.constexpr, N_GROUP: tl.constexpr,
                TOPK_GROUP: tl.constexpr, NG_PAD: tl.constexpr, SOFTMAX: tl.constexpr,
                NORM: tl.constexpr, BITONIC: tl.constexpr, SHARED: tl.constexpr, SHARED_PAD: tl.constexpr):
    offs_m = m0 + tl.arange(0, EPI_M)
    offs_e = tl.arange(0, E_PAD)
    row_ok = offs_m < M
    col_ok = offs_e < E
    mask2 = row_ok[:, None] & col_ok[None, :]
    # Read the logits at L2 (.cg: never a stale L1 line), then re-zero the workspace with plain stores. The
    # fused epilogue runs after its CTA's acq_rel arrival on the counter, which made every other CTA's adds
    # visible; the separate one is a later launch. (It was an acq_rel atomic_xchg per element: a fenced L2
    # round trip each, one after another in a thread -- 16 in a row for a one-warp epilogue, H200 table ZC.)
    wsp = ws_ptr + offs_m[:, None] * E + offs_e[None, :]
    logit = tl.load(wsp, mask=mask2, other=0.0, cache_modifier=".cg")
    tl.store(wsp, tl.zeros([EPI_M, E_PAD], dtype=tl.float32), mask=mask2)
    logit = tl.where(mask2, logit, float("-inf"))
    if SOFTMAX:
        mx = tl.max(logit, axis=1)
        mx = tl.where(row_ok, mx, 0.0)
        p = tl.exp(logit - mx[:, None])
        p = tl.where(mask2, p, 0.0)
        den = tl.sum(p, axis=1)
        den = tl.where(den > 0, den, 1.0)
        scores = p / den[:, None]
    else:
        scores = 1.0 / (1.0 + tl.exp(-logit))
        scores = tl.where(mask2, scores, 0.0)
    choice = tl.where(mask2, scores + bias[None, :], float("-inf"))
    masked = choice
    if N_GROUP > 1:
        GS: tl.constexpr = E // N_GROUP
        gid = offs_e // GS
        gcol = tl.arange(0, NG_PAD)
        gsc = tl.full([EPI_M, NG_PAD], float("-inf"), tl.float32)
        for g in tl.static_range(N_GROUP):
            v = tl.where((gid == g)[None, :], choice, float("-inf"))
            m1 = tl.max(v, axis=1)
            i1 = tl.argmax(v, axis=1)
            v2 = tl.where(offs_e[None, :] == i1[:, None], float("-inf"), v)
            m2 = tl.max(v2, axis=1)
            gsc = tl.where(gcol[None, :] == g, (m1 + m2)[:, None], gsc)
        keep = tl.zeros([EPI_M, E_PAD], dtype=tl.int1)
        for _ in tl.static_range(TOPK_GROUP):
            gi = tl.argmax(gsc, axis=1)
            keep = keep | (gid[None, :] == gi[:, None])
            gsc = tl.where(gcol[None, :] == gi[:, None], float("-inf"), gsc)
        masked = tl.where(keep, choice, float("-inf"))
    kcol = tl.arange(0, TOP_K_PAD)
    # One reduction per pick (it was two: an argmax, then a sum to fetch the pick's score, each a round of
    # shuffles and a CTA barrier): a unique int64 key per expert -- the choice value's bits made order-
    # preserving as an integer, then E_PAD-1-e so that equal values pick the lowest expert, as argmax does --
    # reduced together with the expert's score.
    bits = masked.to(tl.int32, bitcast=True)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | (E_PAD - 1 - offs_e).to(tl.int64)[None, :]
    if BITONIC:
        # All TOP_K_PAD picks at once: Triton's bitonic top-k over the keys (sorted, largest first; log2 E_PAD
        # merge rounds of independent compare-and-swaps, where the picks are TOP_K dependent reductions),
        # then each pick's score from its expert's column (a masked sum with one non-zero term: exact).
        top = tl.topk(key, TOP_K_PAD, dim=1)
        ids_t = (E_PAD - 1) - (top & 0xFFFFFFFF).to(tl.int32)
        hit = offs_e[None, None, :] == ids_t[:, :, None]
        w_t = tl.sum(tl.where(hit & (kcol < TOP_K)[None, :, None], scores[:, None, :], 0.0), axis=2)
    else:
        ids_t = tl.zeros([EPI_M, TOP_K_PAD], dtype=tl.int32)
        w_t = tl.zeros([EPI_M, TOP_K_PAD], dtype=tl.float32)
        for i in tl.static_range(TOP_K):
            best, sc = tl.reduce((key, scores), 1, _keep_larger)
            idx = (E_PAD - 1) - (best & 0xFFFFFFFF).to(tl.int32)
            ids_t = tl.where(kcol[None, :] == i, idx[:, None], ids_t)
            w_t = tl.where(kcol[None, :] == i, sc[:, None], w_t)
            key = tl.where(key == best[:, None], -9223372036854775808, key)
    if NORM:
        s = tl.sum(w_t, axis=1)
        s = tl.where(s > 0, s, 1.0)
        w_t = w_t / s[:, None]
    w_t = w_t * scaling
    omask = row_ok[:, None] & (kcol < TOP_K)[None, :]
    optr = offs_m[:, None] * (TOP_K + SHARED) + kcol[None, :]
    tl.store(ids_ptr + optr, ids_t, mask=omask)
    tl.store(wts_ptr + optr, w_t, mask=omask)
    if SHARED > 0:
        # the shared experts as experts E.. E+SHARED-1 of weight 1 in every row (moe_experts_shared's input)
        scol = tl.arange(0, SHARED_PAD)
        smask = row_ok[:, None] & (scol < SHARED)[None, :]
        sptr = offs_m[:, None] * (TOP_K + SHARED) + TOP_K + scol[None, :]
        tl.store(ids_ptr + sptr, tl.zeros([EPI_M, SHARED_PAD], dtype=tl.int32) + E + scol[None, :], mask=smask)
        tl.store(wts_ptr + sptr, tl.full([EPI_M, SHARED_PAD], 1.0, tl.float32), mask=smask)


@triton.jit
def _load_bias(bias_ptr, E: tl.constexpr, E_PAD: tl.constexpr):
    """The correction bias as fp32 [E_PAD] (0 past E), for _route_rows."""
    offs = tl.arange(0, E_PAD)
    return tl.load(bias_ptr + offs, mask=offs < E, other=0.0).to(tl.float32)


@triton.jit
def router_gemv_kernel(x_ptr, w_ptr, bias_ptr, ws_ptr, counter_ptr, ids_ptr, wts_ptr,
                       M, stride_xm, scaling,
                       K: tl.constexpr, E: tl.constexpr, K_SPLIT: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                       FUSED_EPI: tl.constexpr, E_PAD: tl.constexpr, EPI_M: tl.constexpr,
                       TOP_K: tl.constexpr, TOP_K_PAD: tl.constexpr, N_GROUP: tl.constexpr,
                       TOPK_GROUP: tl.constexpr, NG_PAD: tl.constexpr, SOFTMAX: tl.constexpr,
                       NORM: tl.constexpr, M_LOOP: tl.constexpr, INTERPRET: tl.constexpr,
                       FMA: tl.constexpr, STEPS: tl.constexpr, TILES: tl.constexpr, BITONIC: tl.constexpr,
                       PDL: tl.constexpr, CHAIN: tl.constexpr, K0: tl.constexpr, SHARED: tl.constexpr,
                       SHARED_PAD: tl.constexpr):
    if PDL or CHAIN:
        # the epilogue launch's CTA (PDL), or in a chain whatever comes next, may start now; it waits for this
        # grid's end
        tl.extra.cuda.gdc_launch_dependents()
    pid_e = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    if FUSED_EPI:
        # Whichever CTA arrives last runs the epilogue: every CTA loads the bias now, beside its W, so that
        # the epilogue's only dependent read is the logits (a DRAM round trip less on its critical path).
        bias = _load_bias(bias_ptr, E, E_PAD)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
    m_ok = offs_m < M
    e_ok = offs_e < E
    k_lo = pid_k * K_SPLIT
    if FMA:
        # straight-line loads (STEPS unrolled, K_SPLIT == STEPS * BLOCK_K exactly), broadcast FMAs into
        # [BLOCK_M, BLOCK_E, BLOCK_K] fp32 partials, one reduction over K at the end; W rows past E are
        # clamped to row 0 (read, never stored) so the W load stays unmasked and vectorised
        offs_k = k_lo + tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + offs_m[:, None, None] * stride_xm + offs_k[None, None, :]
        w_ptrs = w_ptr + tl.where(e_ok, offs_e, 0)[None, :, None] * K + offs_k[None, None, :]
        acc3 = tl.zeros([BLOCK_M, BLOCK_E, BLOCK_K], dtype=tl.float32)
        if CHAIN:  # a link of a chain: the weights' first step is fetched while the kernel ahead runs
            b_first = tl.load(w_ptrs)
            tl.extra.cuda.gdc_wait()
        for s in tl.static_range(STEPS):
            if CHAIN and s == 0:
                b3 = b_first
            else:
                b3 = tl.load(w_ptrs + s * BLOCK_K)
            a3 = tl.load(x_ptrs + s * BLOCK_K, mask=m_ok[:, None, None], other=0.0)
            acc3 += a3.to(tl.float32) * b3.to(tl.float32)
        acc = tl.sum(acc3, axis=2)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_E], dtype=tl.float32)
        if CHAIN:
            # a link of a chain: the first W tile is fetched while the kernel ahead runs, x only after the wait;
            # the loop below starts at K0 = BLOCK_K
            offs_k = k_lo + tl.arange(0, BLOCK_K)
            k_ok = offs_k < K
            b = tl.load(w_ptr + offs_e[:, None] * K + offs_k[None, :], mask=e_ok[:, None] & k_ok[None, :], other=0.0)
            tl.extra.cuda.gdc_wait()
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_ok[:, None] & k_ok[None, :],
                        other=0.0)
            acc += tl.dot(a, tl.trans(b))  # GPU only (INTERPRET is never chained)
        for kk in range(K0, K_SPLIT, BLOCK_K):
            offs_k = k_lo + kk + tl.arange(0, BLOCK_K)
            k_ok = offs_k < K
            a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=m_ok[:, None] & k_ok[None, :],
                        other=0.0)
            b = tl.load(w_ptr + offs_e[:, None] * K + offs_k[None, :], mask=e_ok[:, None] & k_ok[None, :], other=0.0)
            if INTERPRET:
                acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)))
            else:
                acc += tl.dot(a, tl.trans(b))
    tl.atomic_add(ws_ptr + offs_m[:, None] * E + offs_e[None, :], acc,
                  mask=m_ok[:, None] & e_ok[None, :], sem="relaxed", scope="gpu")
    if FUSED_EPI:
        tl.debug_barrier()  # every thread's adds, then one thread's gpu-scope release (the counter add)
        n_e = tl.num_programs(0)
        n_k = tl.num_programs(1)
        n_tiles = n_e * tl.num_programs(2)
        if TILES:
            # Two-level arrival: counter_ptr[1 + tile] counts this (E, M) tile's K splits; its last split
            # (which acquired the others' adds) counts the tile on counter_ptr[0], releasing what it saw
            # (release is cumulative). No address takes more than max(n_k, n_tiles) arrivals.
            seen = tl.atomic_add(counter_ptr + 1 + pid_m * n_e + pid_e, 1, sem="acq_rel", scope="gpu")
            tile_done = seen == n_k - 1
            arrived = seen * 0 - 1  # an int32 like the atomic's result: not the last tile
            if tile_done:
                tl.atomic_xchg(counter_ptr + 1 + pid_m * n_e + pid_e, 0, sem="relaxed", scope="gpu")
                arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
            last = arrived == n_tiles - 1
        else:
            last = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu") == n_k * n_tiles - 1
        if last:
            for m0 in range(0, M_LOOP, EPI_M):  # M_LOOP: the build's M (constexpr bound)
                _route_rows(ws_ptr, bias, ids_ptr, wts_ptr, m0, M, scaling, E, E_PAD, EPI_M, TOP_K,
                            TOP_K_PAD, N_GROUP, TOPK_GROUP, NG_PAD, SOFTMAX, NORM, BITONIC, SHARED, SHARED_PAD)
            tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")


@triton.jit
def router_epilogue_kernel(ws_ptr, bias_ptr, ids_ptr, wts_ptr, M, scaling,
                           E: tl.constexpr, E_PAD: tl.constexpr, EPI_M: tl.constexpr,
                           TOP_K: tl.constexpr, TOP_K_PAD: tl.constexpr, N_GROUP: tl.constexpr,
                           TOPK_GROUP: tl.constexpr, NG_PAD: tl.constexpr, SOFTMAX: tl.constexpr,
                           NORM: tl.constexpr, BITONIC: tl.constexpr, PDL: tl.constexpr, CHAIN: tl.constexpr,
                           SHARED: tl.constexpr, SHARED_PAD: tl.constexpr):
    if CHAIN:  # a link of a chain: the next kernel (the experts' w13) may launch now; it waits for this one's end
        tl.extra.cuda.gdc_launch_dependents()
    bias = _load_bias(bias_ptr, E, E_PAD)  # independent of the GEMV: before the wait
    if PDL:
        tl.extra.cuda.gdc_wait()  # the GEMV grid has completed and its logits are visible
    _route_rows(ws_ptr, bias, ids_ptr, wts_ptr, tl.program_id(0) * EPI_M, M, scaling, E, E_PAD, EPI_M, TOP_K,
                TOP_K_PAD, N_GROUP, TOPK_GROUP, NG_PAD, SOFTMAX, NORM, BITONIC, SHARED, SHARED_PAD)


def _np2(n):
    return 1 << max(0, (int(n) - 1).bit_length())


def _full_config(config):
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    if "EPI_WARPS" not in (config or {}):  # a config from before EPI_WARPS: its epilogue had the GEMV's warps
        cfg["EPI_WARPS"] = cfg["num_warps"]
    if "EPI_M" not in (config or {}):  # DEFAULT_CONFIG's EPI_M was 4 until the space kept only 1
        cfg["EPI_M"] = 4
    return cfg


def _pdl(cfg, cap):
    """The separate epilogue as a dependent launch: griddepcontrol is PTX for sm_90+ (cap: 90 for sm_90);
    elsewhere, and in the interpreter (cap 0), the plain pair runs."""
    return bool(int(cfg["PDL"])) and cfg["EPILOGUE"] == "separate" and cap >= 90


def _consts(cfg, shape, interpret, pdl, chain=False):
    """(gemv constexprs, epilogue constexprs, grid). pdl: the separate epilogue as a dependent launch; chain: the
    whole router as a link of a chain (build's pdl), which makes the separate epilogue a dependent launch too."""
    E, K, top_k = int(shape["E"]), int(shape["K"]), int(shape["top_k"])
    n_group = int(shape.get("n_group", 1) or 1)
    topk_group = int(shape.get("topk_group", 1) or 1)
    shared = int(shape.get("shared", 0) or 0)
    if shared < 0:
        raise ValueError(f"shared={shared}: the number of shared experts appended to each row, >= 0")
    if n_group > 1 and (E % n_group or E // n_group < 2):
        raise ValueError(f"E={E} does not split into {n_group} groups of >= 2 experts")
    split = int(cfg["SPLIT_K"])
    bk = int(cfg["BLOCK_K"])
    k_split = triton.cdiv(triton.cdiv(K, split), bk) * bk
    epi = dict(E=E, E_PAD=_np2(E), EPI_M=int(cfg["EPI_M"]), TOP_K=top_k, TOP_K_PAD=_np2(top_k),
               N_GROUP=n_group, TOPK_GROUP=topk_group, NG_PAD=_np2(max(n_group, 2)),
               SOFTMAX=shape.get("scoring", "sigmoid") == "softmax", NORM=bool(shape.get("norm", True)),
               BITONIC=cfg["TOPK"] == "bitonic", PDL=pdl or (chain and cfg["EPILOGUE"] == "separate"),
               CHAIN=chain, SHARED=shared, SHARED_PAD=_np2(max(shared, 1)))
    fma = cfg["MATH"] == "fma"
    if fma and (K % bk or (K // bk) % split):
        raise ValueError(f"MATH=fma needs whole, equal BLOCK_K steps per split: K={K}, BLOCK_K={bk}, SPLIT_K={split}")
    gemv = dict(K=K, E=E, K_SPLIT=k_split, BLOCK_M=int(cfg["BLOCK_M"]), BLOCK_E=int(cfg["BLOCK_E"]),
                BLOCK_K=bk, FUSED_EPI=cfg["EPILOGUE"] != "separate", TILES=cfg["EPILOGUE"] == "fused_tiles",
                M_LOOP=max(1, int(shape["M"])), FMA=fma, STEPS=(K // bk) // split if fma else 0, INTERPRET=interpret,
                K0=bk if chain and not fma else 0, **{k: v for k, v in epi.items() if k != "E"})
    grid = (triton.cdiv(E, int(cfg["BLOCK_E"])), triton.cdiv(K, k_split))
    return gemv, epi, grid


def build(config, shape, pdl=0):
    """pdl (a layer's chain of kernels, not a tuning parameter: the slot is timed from a clean start) 1 or 2: the GEMV
    is launched as a programmatic dependent launch of the kernel ahead, fetches its first W tile while that runs
    and reads x only after griddepcontrol.wait, and lets the next kernel launch at once; a separate epilogue is
    chained behind it and lets the kernel after the router (the experts' w13) launch. No L2-prefetch level: 2 is 1.
    sm_90+ GPUs only: elsewhere, and in the interpreter, it is off."""
    if pdl not in (0, 1, 2):
        raise ValueError(f"pdl={pdl!r}: one of (0, 1, 2)")
    cfg = _full_config(config)
    M = int(shape["M"])
    E, top_k = int(shape["E"]), int(shape["top_k"])
    scaling = float(shape.get("scaling", 1.0))
    nw, ns = int(cfg["num_warps"]), int(cfg["num_stages"])
    state = {}

    width = top_k + int(shape.get("shared", 0) or 0)

    def run(x, w, bias, topk_ids, topk_weights):
        for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
            if t.shape != (x.shape[0], width) or not t.is_contiguous():
                raise ValueError(f"{name}{tuple(t.shape)}: a contiguous [{x.shape[0]}, {width}] (top_k {top_k} and "
                                 f"{width - top_k} shared experts)")
        interpret = x.device.type == "cpu"
        key = (x.device, interpret)
        st = state.get(key)
        if st is None:  # first call on this device: workspaces (zeroed once, self-cleaning after)
            major, minor = torch.cuda.get_device_capability(x.device) if x.device.type == "cuda" else (0, 0)
            cap = 10 * major + minor
            gemv, epi, grid = _consts(cfg, shape, interpret, _pdl(cfg, cap), bool(pdl) and cap >= 90)
            st = state[key] = {
                "ws": torch.zeros((max(M, 1) * E,), device=x.device, dtype=torch.float32),
                # [0]: CTAs (fused) or E tiles (fused_tiles) arrived; [1:]: each (E, M) tile's splits arrived
                "counter": torch.zeros((1 + grid[0] * triton.cdiv(max(M, 1), gemv["BLOCK_M"]),), device=x.device,
                                       dtype=torch.int32),
                "gemv": gemv, "epi": epi, "grid": grid}
        m = x.shape[0]
        gemv, epi = st["gemv"], st["epi"]
        grid = (*st["grid"], triton.cdiv(m, gemv["BLOCK_M"]))
        router_gemv_kernel[grid](x, w, bias, st["ws"], st["counter"], topk_ids, topk_weights,
                                 m, x.stride(0), scaling, num_warps=nw, num_stages=ns, **gemv,
                                 **({"launch_pdl": True} if gemv["CHAIN"] else {}))
        if not gemv["FUSED_EPI"]:
            launch = {"launch_pdl": True} if epi["PDL"] else {}  # the config's PDL, or a chain
            router_epilogue_kernel[(triton.cdiv(m, epi["EPI_M"]),)](
                st["ws"], bias, topk_ids, topk_weights, m, scaling, num_warps=int(cfg["EPI_WARPS"]), **epi,
                **launch)

    return run


# --- ahead-of-time PTX, no GPU -----------------------------------------------------------------

def _cap(arch):
    return int("".join(ch for ch in str(arch) if ch.isdigit()) or 90)


def _aot(kernel, types, consts, num_warps, num_stages, arch, aligned=(), **options):
    """PTX for one kernel, specialised as the JIT would at run time: pointers (torch allocations)
    and the ints in ``aligned`` (strides that are multiples of 16) carry tt.divisibility=16."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    cap = _cap(arch)
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
                         options={"num_warps": num_warps, "num_stages": num_stages, **options})
    return out.asm["ptx"]


def compile_ptx(config, shape, arch="sm_90a", pdl=0):
    """Both kernels' PTX for ``arch`` with no GPU; pdl as build's (the chained form)."""
    cfg = _full_config(config)
    gemv, epi, _ = _consts(cfg, shape, False, _pdl(cfg, _cap(arch)), bool(pdl) and _cap(arch) >= 90)
    nw, ns = int(cfg["num_warps"]), int(cfg["num_stages"])
    types = {"x_ptr": "*bf16", "w_ptr": "*bf16", "bias_ptr": "*fp32", "ws_ptr": "*fp32",
             "counter_ptr": "*i32", "ids_ptr": "*i32", "wts_ptr": "*fp32", "M": "i32",
             "stride_xm": "i32", "scaling": "fp32"}
    ptx = _aot(router_gemv_kernel, types, gemv, nw, ns, arch, aligned=("stride_xm",),
               **({"launch_pdl": True} if gemv["CHAIN"] else {}))
    if not gemv["FUSED_EPI"]:
        ptx += "\n" + _aot(router_epilogue_kernel, types, epi, int(cfg["EPI_WARPS"]), ns, arch,
                           **({"launch_pdl": True} if epi["PDL"] else {}))
    return ptx
