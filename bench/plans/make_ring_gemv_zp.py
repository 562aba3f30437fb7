# Writes session ZP's plans for the ring GEMV (kernels/variants/cute/dense_gemm_ring_gemv.py); run from the repo
# root. Session ZN (H200 table 2026-12-06-h200-decode-tuning-zn) left fused_qkv_a at 10.55 us (M = 4) and 11.46
# (M = 16) against a 7.24 us floor, and o_proj M = 16 on cuBLAS: the fenced tensor-core GEMV drains its loads
# every chunk and its registers hold what is in flight (114 at fused_qkv_a M = 16: one CTA per SM, 41.6% of DRAM
# throughput in ncu). The ring GEMV keeps STAGES - 1 steps in flight in shared memory instead, so this plan spans
# the ring depth and the warps per CTA at M = 4 and 16 of the three projections (the buckets whose geomeans miss),
# a few M = 1 points beside the K-split winners, and XRING 0 (x loaded at the step) as the control.
# - ring_gemv_zp.json: the ring GEMV alone (70 runs);
# - zp_all.json: that, then session ZO's fenced neighbours (zo_fenced.json, 36 runs, never run), for an H200 call.
# The service takes a config only if it sets every parameter of the variant's CONFIG_SPACE, so each config here
# sets KSPLIT and ROTATE too (1 and 0: the kernel ZP ran, before either existed).
import json
from pathlib import Path

F = "kernels/variants/cute/dense_gemm_ring_gemv.py"
# (shape, M): (WROWS, RT, KWARPS, STAGES, XRING); K // 32 = 224 (fused_qkv_a), 48 (q_b_proj), 32 (o_proj) steps
CONFIGS = {
    ("fused_qkv_a", 16): ((16, 1, 8, 8, 1), (16, 1, 8, 6, 1), (16, 1, 4, 12, 1), (16, 1, 7, 8, 1), (16, 1, 14, 4, 1),
                          (16, 1, 16, 4, 1), (16, 2, 8, 6, 1), (16, 2, 14, 4, 1), (8, 1, 8, 6, 1), (8, 1, 4, 8, 1),
                          (16, 1, 8, 8, 0)),
    ("fused_qkv_a", 4): ((8, 1, 8, 8, 1), (8, 1, 4, 12, 1), (8, 1, 7, 8, 1), (8, 1, 14, 4, 1), (8, 2, 8, 6, 1),
                         (8, 1, 8, 8, 0), (16, 1, 8, 8, 1), (16, 1, 4, 12, 1), (8, 1, 16, 4, 1), (8, 2, 4, 8, 1)),
    ("fused_qkv_a", 1): ((8, 1, 8, 8, 1), (8, 1, 4, 12, 1), (16, 1, 8, 8, 1), (8, 1, 14, 4, 1)),
    ("o_proj", 16): ((16, 1, 4, 4, 1), (16, 1, 2, 8, 1), (16, 1, 1, 8, 1), (16, 1, 1, 16, 1), (8, 1, 2, 8, 1),
                     (8, 1, 4, 4, 1), (16, 2, 2, 8, 1), (16, 1, 2, 8, 0), (16, 1, 4, 8, 1)),
    ("o_proj", 4): ((8, 1, 2, 8, 1), (8, 1, 4, 4, 1), (8, 1, 1, 16, 1), (8, 1, 4, 8, 1), (8, 2, 2, 8, 1),
                    (8, 1, 2, 8, 0), (16, 1, 2, 8, 1), (8, 1, 1, 8, 1), (8, 2, 4, 4, 1)),
    ("o_proj", 1): ((8, 1, 2, 8, 1), (8, 1, 4, 8, 1), (16, 1, 2, 8, 1), (8, 1, 1, 16, 1)),
    ("q_b_proj", 16): ((16, 1, 4, 6, 1), (16, 1, 6, 8, 1), (8, 1, 4, 6, 1), (8, 1, 6, 8, 1), (8, 1, 3, 8, 1),
                       (8, 1, 8, 6, 1), (8, 1, 12, 4, 1), (8, 1, 2, 12, 1), (16, 1, 3, 8, 1)),
    ("q_b_proj", 4): ((8, 1, 4, 6, 1), (8, 1, 6, 8, 1), (8, 1, 3, 8, 1), (8, 1, 8, 6, 1), (8, 1, 12, 4, 1),
                      (8, 1, 2, 12, 1), (8, 1, 6, 4, 1), (16, 1, 6, 8, 1), (8, 1, 4, 12, 1)),
    ("q_b_proj", 1): ((8, 1, 4, 6, 1), (8, 1, 6, 8, 1), (8, 1, 12, 4, 1), (16, 1, 6, 8, 1), (8, 1, 3, 8, 1)),
}
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}
plans = Path("bench/plans")


def ring(w: int, rt: int, kw: int, st: int, xr: int, ks: int = 1, rot: int = 0) -> dict:
    return dict(WROWS=w, RT=rt, KWARPS=kw, STAGES=st, XRING=xr, KSPLIT=ks, ROTATE=rot)


def plan_items(table: dict, rotations: tuple[int, ...] = (0,)) -> list[dict]:
    """One plan item per (shape, M) of table, a ring config per tuple and rotation."""
    return [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
             "configs": [ring(*c, rot=r) for c in configs for r in rotations]}
            for (shape, m), configs in table.items()]


def key(i: dict, c: dict) -> tuple:  # one run of a plan item
    return i["shapes"][0], i["batch_sizes"][0], tuple(sorted(c.items()))


def without(variants: list[dict], runs: set[tuple]) -> list[dict]:
    """variants less the runs already held elsewhere."""
    return [{**i, "configs": [c for c in i["configs"] if key(i, c) not in runs]} for i in variants]


def write(name: str, variants: list[dict]) -> None:
    json.dump({"deployment": DEPLOYMENT, "variants": variants}, open(plans / f"{name}.json", "w"), indent=1)
    print(name, sum(len(i["configs"]) for i in variants), "runs")


items = plan_items(CONFIGS)
write("ring_gemv_zp", items)
write("zp_all", items + json.load(open(plans / "zo_fenced.json"))["variants"])

# Session ZQ: the ring GEMV with KSPLIT. Session ZP's H100 call (2026-12-06-h100-decode-tuning-h100-zp) ran the
# 70 configs above, all correct: 16-row tiles beat 8-row ones at every M (fused_qkv_a M = 16: 14.66 against 17.64
# us at the same warps) and XRING 0 lost everywhere, i.e. x's bytes matter: each CTA reads all of x, so 16-row
# tiles at M = 16 move as many bytes of x from L2 as of W. KSPLIT gives a CTA more rows (RT 2-4: a half to a
# quarter of x's traffic) on a slice of K, and keeps the CTA count; each bucket repeats its best KSPLIT 1 config
# of the H100 call as the in-run reference.
# - ring_ksplit_zq.json: those (44 runs); zq_all.json: those, then the rest of ring_gemv_zp.json's 70 (108 runs),
#   for an H200 call.
KSPLIT_CONFIGS = {  # (shape, M): (WROWS, RT, KWARPS, STAGES, XRING, KSPLIT)
    ("fused_qkv_a", 16): ((16, 4, 8, 4, 1, 4), (16, 4, 4, 8, 1, 4), (16, 2, 8, 6, 1, 2), (16, 2, 4, 8, 1, 2),
                          (16, 2, 8, 4, 1, 4), (16, 4, 8, 4, 1, 2), (16, 1, 8, 6, 1, 2), (16, 4, 4, 6, 1, 8),
                          (16, 2, 7, 8, 1, 2), (16, 1, 7, 8, 1, 1)),
    ("fused_qkv_a", 4): ((16, 4, 8, 4, 1, 4), (16, 2, 8, 6, 1, 2), (16, 2, 4, 8, 1, 4), (16, 4, 4, 8, 1, 4),
                         (8, 4, 8, 4, 1, 4), (16, 1, 8, 8, 1, 2), (16, 1, 8, 8, 1, 1)),
    ("fused_qkv_a", 1): ((16, 4, 8, 4, 1, 4), (16, 2, 8, 6, 1, 2)),
    ("o_proj", 16): ((16, 4, 2, 8, 1, 2), (16, 4, 4, 4, 1, 2), (16, 2, 2, 8, 1, 2), (16, 4, 1, 8, 1, 4),
                     (16, 4, 2, 4, 1, 4), (16, 2, 2, 8, 1, 1)),
    ("o_proj", 4): ((16, 4, 2, 8, 1, 2), (16, 2, 2, 8, 1, 2), (8, 4, 2, 8, 1, 2), (16, 4, 1, 8, 1, 4),
                    (8, 2, 4, 4, 1, 1)),
    ("q_b_proj", 16): ((16, 1, 4, 6, 1, 2), (16, 2, 4, 4, 1, 3), (16, 2, 2, 8, 1, 3), (16, 4, 2, 8, 1, 3),
                       (16, 1, 2, 12, 1, 2), (16, 2, 3, 8, 1, 2), (16, 1, 4, 6, 1, 1)),
    ("q_b_proj", 4): ((16, 1, 6, 4, 1, 2), (16, 2, 4, 4, 1, 3), (16, 1, 3, 8, 1, 2), (16, 2, 2, 8, 1, 3),
                      (16, 1, 6, 8, 1, 1)),
    ("q_b_proj", 1): ((16, 1, 6, 4, 1, 2), (16, 1, 3, 8, 1, 2)),
}
ks_items = plan_items(KSPLIT_CONFIGS)
write("ring_ksplit_zq", ks_items)
# ZP's runs that ZQ already holds as references are not repeated
write("zq_all", ks_items + without(items, {key(i, c) for i in ks_items for c in i["configs"]}))

# Session ZS: ROTATE. Every CTA of the ring GEMV reads all of x in the same order, so at any moment the 132+ CTAs
# ask for the same few lines of x, which live in a few L2 slices; ROTATE 1 starts CTA b at step b mod steps. The
# H100 calls of sessions ZP and ZQ give the three best KSPLIT 1 configs per bucket, each run here with ROTATE 0
# (the in-run reference) and 1.
# - ring_rotate_zs.json: those (54 runs); zs_all.json: their ROTATE 1 half, then ring_gemv_zp.json's 70 (which
#   hold the references), for an H200 call.
TOP3 = {  # (shape, M): (WROWS, RT, KWARPS, STAGES, XRING), best first (H100, sessions ZP and ZQ)
    ("fused_qkv_a", 1): ((16, 1, 8, 8, 1), (8, 1, 4, 12, 1), (8, 1, 8, 8, 1)),
    ("fused_qkv_a", 4): ((16, 1, 8, 8, 1), (8, 1, 7, 8, 1), (8, 2, 4, 8, 1)),
    ("fused_qkv_a", 16): ((16, 1, 7, 8, 1), (16, 1, 14, 4, 1), (16, 1, 8, 8, 1)),
    ("o_proj", 1): ((16, 1, 2, 8, 1), (8, 1, 1, 16, 1), (8, 1, 4, 8, 1)),
    ("o_proj", 4): ((8, 2, 4, 4, 1), (16, 1, 2, 8, 1), (8, 2, 2, 8, 1)),
    ("o_proj", 16): ((16, 2, 2, 8, 1), (16, 1, 1, 16, 1), (16, 1, 1, 8, 1)),
    ("q_b_proj", 1): ((16, 1, 6, 8, 1), (8, 1, 12, 4, 1), (8, 1, 4, 6, 1)),
    ("q_b_proj", 4): ((16, 1, 6, 8, 1), (8, 1, 6, 4, 1), (8, 1, 12, 4, 1)),
    ("q_b_proj", 16): ((16, 1, 4, 6, 1), (16, 1, 3, 8, 1), (16, 1, 6, 8, 1)),
}

write("ring_rotate_zs", plan_items(TOP3, (0, 1)))
write("zs_all", plan_items(TOP3, (1,)) + items)

# Session ZT: on an H200, zs_all.json; on an H100, whose session ZS call found ROTATE 1 faster in 18 of 27 pairs
# (q_b_proj M = 16: 4.69 against 5.31 us; fused_qkv_a M = 16: 13.85 against 14.34), ring_rotate_zt.json: the rest
# of ZP's 70 configs with ROTATE 1 (43 runs).
zt = without(items, {key(i, c) for i in plan_items(TOP3) for c in i["configs"]})
write("ring_rotate_zt", [{**i, "configs": [dict(c, ROTATE=1) for c in i["configs"]]} for i in zt])
