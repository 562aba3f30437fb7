# Writes session ZN's plans for the CuTe tensor-core GEMV (kernels/variants/cute/dense_gemm_mma_gemv.py); run from
# the repo root. Session ZM (bench/session_zm.sh and plans/make_mma_gemv_zm.py at commit f62345e, with the kernel's
# first form; removed since, as the kernel no longer takes their PREFETCH) ran it on an H100:
# correct in all 72 runs, but at fused_qkv_a one 448-thread CTA per SM (16-row tiles: 132 CTAs) reached 22%
# achieved occupancy and 57% DRAM throughput (bench/results/2026-12-06-h100-ncu-dense.md), because ptxas keeps
# only ~4 of a thread's loads ahead of its MMAs; the L2 prefetch it tried made 31 of 36 configs slower and is gone.
# So this plan puts more warps on each SM: 8-row tiles (WROWS 8: W is the MMA's B operand, twice the CTAs) and
# up to 32 warps per CTA, with the best ZM configs (WROWS 16) repeated as the in-run reference.
# And it tries the other cure: FENCE 1, a fence after each chunk's loads, after which ptxas issues the whole chunk
# before its MMAs (fewer warps, each with a chunk in flight).
# - mma_gemv_zn.json: M = 1, 4 and 16 of fused_qkv_a, q_b_proj and o_proj (90 runs);
# - zn_all.json: that plus the K-split GEMV's three best configs per bucket on the H100 (never run on the H200),
#   for an H200 call.
import json
from pathlib import Path

F = "kernels/variants/cute/dense_gemm_mma_gemv.py"
CONFIGS = {  # shape: (WROWS, RT, KWARPS, UNROLL); K // 32 = 224 (fused_qkv_a), 48 (q_b_proj), 32 (o_proj) steps
    "fused_qkv_a": ((16, 1, 28, 8), (16, 1, 32, 7), (8, 1, 16, 14), (8, 1, 28, 8), (8, 1, 32, 7), (8, 1, 14, 16)),
    "q_b_proj": ((16, 1, 16, 3), (16, 1, 24, 2), (8, 1, 16, 3), (8, 1, 24, 2), (8, 1, 12, 4), (8, 2, 16, 3)),
    "o_proj": ((16, 1, 8, 4), (16, 1, 16, 2), (8, 1, 8, 4), (8, 1, 4, 8), (8, 1, 16, 2), (8, 2, 8, 4)),
}
# FENCE 1 (a fence after each chunk's loads, so ptxas issues them all before the chunk's MMAs): fewer warps, each
# with a whole chunk of loads in flight; configs whose registers leave one or more CTAs per SM
FENCED = {
    "fused_qkv_a": ((8, 1, 8, 7), (8, 1, 14, 8), (16, 1, 8, 7), (8, 1, 4, 12)),
    "q_b_proj": ((8, 1, 16, 3), (8, 1, 8, 6), (8, 1, 4, 12), (16, 1, 8, 6)),
    "o_proj": ((8, 1, 8, 4), (8, 1, 4, 8), (16, 1, 8, 4), (16, 1, 4, 8)),
}
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}


def item(shape: str, m: int, configs: list[dict]) -> dict:
    return {"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
            "configs": configs}


zn = [item(shape, m, [dict(WROWS=w, RT=rt, KWARPS=kw, UNROLL=u, FENCE=f)
                      for f, table in ((0, CONFIGS), (1, FENCED)) for w, rt, kw, u in table[shape]])
      for shape in CONFIGS for m in (1, 4, 16)]
# The K-split GEMV on the H200 for the first time: the three fastest configs per bucket on the H100 (table
# 2026-12-06-h100-decode-tuning-h100-zm), (ROWS, KWARPS, UNROLL), rather than all of ZL's 108 runs
KSPLIT = "kernels/variants/cute/dense_gemm_ksplit_gemv.py"
KSPLIT_TOP3 = {
    ("fused_qkv_a", 1): ((1, 14, 2), (4, 14, 2), (4, 7, 4)), ("fused_qkv_a", 4): ((4, 4, 2), (2, 4, 2), (4, 4, 4)),
    ("q_b_proj", 1): ((2, 6, 1), (4, 6, 1), (1, 6, 1)), ("q_b_proj", 4): ((2, 2, 2), (2, 3, 2), (2, 6, 1)),
    ("o_proj", 1): ((2, 4, 1), (4, 2, 2), (4, 4, 1)), ("o_proj", 4): ((8, 2, 2), (4, 4, 1), (4, 1, 4)),
}
ksplit = [{**item(shape, m, [dict(ROWS=r, KWARPS=kw, UNROLL=u) for r, kw, u in top]), "file": KSPLIT}
          for (shape, m), top in KSPLIT_TOP3.items()]
plans = Path("bench/plans")
for name, items in (("mma_gemv_zn", zn), ("zn_all", zn + ksplit)):
    json.dump({"deployment": DEPLOYMENT, "variants": items}, open(plans / f"{name}.json", "w"), indent=1)
    print(name, sum(len(i["configs"]) for i in items), "runs")
