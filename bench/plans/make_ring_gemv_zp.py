# Writes session ZP's plans for the ring GEMV (kernels/variants/cute/dense_gemm_ring_gemv.py); run from the repo
# root. Session ZN (H200 table 2026-12-06-h200-decode-tuning-zn) left fused_qkv_a at 10.55 us (M = 4) and 11.46
# (M = 16) against a 7.24 us floor, and o_proj M = 16 on cuBLAS: the fenced tensor-core GEMV drains its loads
# every chunk and its registers hold what is in flight (114 at fused_qkv_a M = 16: one CTA per SM, 41.6% of DRAM
# throughput in ncu). The ring GEMV keeps STAGES - 1 steps in flight in shared memory instead, so this plan spans
# the ring depth and the warps per CTA at M = 4 and 16 of the three projections (the buckets whose geomeans miss),
# a few M = 1 points beside the K-split winners, and XRING 0 (x loaded at the step) as the control.
# - ring_gemv_zp.json: the ring GEMV alone (70 runs);
# - zp_all.json: that, then session ZO's fenced neighbours (zo_fenced.json, 36 runs, never run), for an H200 call.
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

items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
          "configs": [dict(WROWS=w, RT=rt, KWARPS=kw, STAGES=st, XRING=xr) for w, rt, kw, st, xr in table]}
         for (shape, m), table in CONFIGS.items()]
plans = Path("bench/plans")
json.dump({"deployment": DEPLOYMENT, "variants": items}, open(plans / "ring_gemv_zp.json", "w"), indent=1)
print("ring_gemv_zp", sum(len(i["configs"]) for i in items), "runs")
zo = json.load(open(plans / "zo_fenced.json"))
json.dump({"deployment": DEPLOYMENT, "variants": items + zo["variants"]}, open(plans / "zp_all.json", "w"), indent=1)
print("zp_all", sum(len(i["configs"]) for i in items + zo["variants"]), "runs")

# Session ZQ: the ring GEMV with KSPLIT. Session ZP's H100 call (2026-12-06-h100-decode-tuning-h100-zp) ran the
# 70 configs above, all correct: 16-row tiles beat 8-row ones at every M (fused_qkv_a M = 16: 14.66 against 17.64
# us at the same warps) and XRING 0 lost everywhere, i.e. x's bytes matter: each CTA reads all of x, so 16-row
# tiles at M = 16 move as many bytes of x from L2 as of W. KSPLIT gives a CTA more rows (RT 2-4: a half to a
# quarter of x's traffic) on a slice of K, and keeps the CTA count; each bucket repeats its best KSPLIT 1 config
# of the H100 call as the in-run reference.
# - ring_ksplit_zq.json: those (44 runs); zq_all.json: those, then ring_gemv_zp.json's 70, for an H200 call.
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
ks_items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
             "configs": [dict(WROWS=w, RT=rt, KWARPS=kw, STAGES=st, XRING=xr, KSPLIT=ks)
                         for w, rt, kw, st, xr, ks in table]}
            for (shape, m), table in KSPLIT_CONFIGS.items()]
json.dump({"deployment": DEPLOYMENT, "variants": ks_items}, open(plans / "ring_ksplit_zq.json", "w"), indent=1)
print("ring_ksplit_zq", sum(len(i["configs"]) for i in ks_items), "runs")
json.dump({"deployment": DEPLOYMENT, "variants": ks_items + items}, open(plans / "zq_all.json", "w"), indent=1)
print("zq_all", sum(len(i["configs"]) for i in ks_items + items), "runs")
