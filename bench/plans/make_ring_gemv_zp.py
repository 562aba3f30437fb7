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

items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
          "configs": [dict(WROWS=w, RT=rt, KWARPS=kw, STAGES=st, XRING=xr, KSPLIT=1, ROTATE=0)
                      for w, rt, kw, st, xr in table]}
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
ks_items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
             "configs": [dict(WROWS=w, RT=rt, KWARPS=kw, STAGES=st, XRING=xr, KSPLIT=ks, ROTATE=0)
                         for w, rt, kw, st, xr, ks in table]}
            for (shape, m), table in KSPLIT_CONFIGS.items()]
json.dump({"deployment": DEPLOYMENT, "variants": ks_items}, open(plans / "ring_ksplit_zq.json", "w"), indent=1)
print("ring_ksplit_zq", sum(len(i["configs"]) for i in ks_items), "runs")
# ZP's runs that ZQ already holds as references are not repeated
held = {(i["shapes"][0], i["batch_sizes"][0], json.dumps(c, sort_keys=True)) for i in ks_items for c in i["configs"]}
rest = [{**i, "configs": [c for c in i["configs"]
                          if (i["shapes"][0], i["batch_sizes"][0], json.dumps(c, sort_keys=True)) not in held]}
        for i in items]
json.dump({"deployment": DEPLOYMENT, "variants": ks_items + rest}, open(plans / "zq_all.json", "w"), indent=1)
print("zq_all", sum(len(i["configs"]) for i in ks_items + rest), "runs")

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


def rotate_items(rotations: tuple[int, ...]) -> list[dict]:
    return [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
             "configs": [dict(WROWS=w, RT=rt, KWARPS=kw, STAGES=st, XRING=xr, KSPLIT=1, ROTATE=r)
                         for w, rt, kw, st, xr in table for r in rotations]}
            for (shape, m), table in TOP3.items()]


json.dump({"deployment": DEPLOYMENT, "variants": rotate_items((0, 1))}, open(plans / "ring_rotate_zs.json", "w"),
          indent=1)
print("ring_rotate_zs", sum(len(i["configs"]) for i in rotate_items((0, 1))), "runs")
zs = rotate_items((1,)) + items
json.dump({"deployment": DEPLOYMENT, "variants": zs}, open(plans / "zs_all.json", "w"), indent=1)
print("zs_all", sum(len(i["configs"]) for i in zs), "runs")

# Session ZT: on an H200, zs_all.json; on an H100, whose session ZS call found ROTATE 1 faster in 18 of 27 pairs
# (q_b_proj M = 16: 4.69 against 5.31 us; fused_qkv_a M = 16: 13.85 against 14.34), ring_rotate_zt.json: the rest
# of ZP's 70 configs with ROTATE 1 (43 runs).
top3 = {(shape, m, cfg) for (shape, m), table in TOP3.items() for cfg in table}
zt = [{**i, "configs": [dict(c, ROTATE=1) for c in i["configs"]
                        if (i["shapes"][0], i["batch_sizes"][0],
                            tuple(c[k] for k in ("WROWS", "RT", "KWARPS", "STAGES", "XRING"))) not in top3]}
      for i in items]
json.dump({"deployment": DEPLOYMENT, "variants": zt}, open(plans / "ring_rotate_zt.json", "w"), indent=1)
print("ring_rotate_zt", sum(len(i["configs"]) for i in zt), "runs")
