# Writes session ZO's plan (zo_fenced.json) for the CuTe tensor-core GEMV (kernels/variants/cute/dense_gemm_mma_gemv.py);
# run from the repo root. Session ZN (H200 table 2026-12-06-h200-decode-tuning-zn) ran its second form: the fenced
# configs (FENCE 1: a chunk's loads all issued before its MMAs) won q_b_proj M = 4 and 16 and o_proj M = 4, and
# came within 1% of cuBLAS at o_proj M = 16, but each of them was one of only four fenced points per shape. This
# plan tries their neighbours: the same bytes in flight a thread split over more or fewer warps, one chunk per warp
# where the registers allow it (a chunk costs a DRAM round trip: the fence drains it), with ZN's winners repeated as
# the in-run reference. 36 runs.
import json
from pathlib import Path

F = "kernels/variants/cute/dense_gemm_mma_gemv.py"
# (shape, M): (WROWS, RT, KWARPS, UNROLL, FENCE); K // 32 = 224 (fused_qkv_a), 48 (q_b_proj), 32 (o_proj) steps
NEIGHBOURS = {
    ("q_b_proj", 16): ((16, 1, 8, 6, 1), (16, 1, 6, 8, 1), (16, 1, 12, 4, 1), (16, 1, 16, 3, 1), (16, 1, 24, 2, 1),
                       (16, 1, 4, 6, 1)),
    ("q_b_proj", 4): ((8, 1, 4, 12, 1), (8, 1, 6, 8, 1), (8, 1, 3, 16, 1), (16, 1, 6, 8, 1), (16, 1, 4, 12, 1),
                      (8, 1, 12, 4, 1)),
    ("o_proj", 16): ((16, 1, 4, 8, 1), (16, 1, 4, 4, 1), (16, 1, 2, 8, 1), (16, 1, 2, 4, 1), (16, 1, 1, 8, 1),
                     (8, 1, 2, 8, 1)),
    ("o_proj", 4): ((8, 1, 8, 4, 1), (8, 1, 2, 16, 1), (8, 1, 16, 2, 1), (8, 1, 32, 1, 1), (8, 1, 2, 8, 1),
                    (8, 1, 1, 16, 1)),
    ("fused_qkv_a", 16): ((16, 1, 8, 7, 1), (16, 1, 7, 8, 1), (16, 1, 4, 8, 1), (16, 1, 8, 4, 1), (16, 1, 16, 7, 0),
                          (16, 1, 28, 4, 0)),
    ("fused_qkv_a", 4): ((16, 1, 28, 8, 0), (8, 1, 7, 16, 1), (8, 1, 8, 14, 1), (8, 1, 14, 8, 1), (16, 1, 7, 8, 1),
                         (16, 1, 14, 8, 0)),
}
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}

items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
          "configs": [dict(WROWS=w, RT=rt, KWARPS=kw, UNROLL=u, FENCE=f) for w, rt, kw, u, f in table]}
         for (shape, m), table in NEIGHBOURS.items()]
json.dump({"deployment": DEPLOYMENT, "variants": items}, open(Path("bench/plans") / "zo_fenced.json", "w"), indent=1)
print("zo_fenced", sum(len(i["configs"]) for i in items), "runs")

# The H100's share: its session ZN call (table 2026-12-06-h100-decode-tuning-h100-zn) reached only fused_qkv_a's
# 30 runs and q_b_proj M = 1's 10 (and 3 of M = 4's) before its deadline; zn_h100_rest.json is the rest of
# mma_gemv_zn.json, q_b_proj M = 4 whole.
zn = json.load(open(Path("bench/plans") / "mma_gemv_zn.json"))
rest = [i for i in zn["variants"] if i["shapes"] != ["fused_qkv_a"] and (i["shapes"], i["batch_sizes"]) != (["q_b_proj"], [1])]
json.dump({"deployment": zn["deployment"], "variants": rest}, open(Path("bench/plans") / "zn_h100_rest.json", "w"),
          indent=1)
print("zn_h100_rest", sum(len(i["configs"]) for i in rest), "runs")
