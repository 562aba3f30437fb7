# Session ZM ran the first version of the kernel (commit f62345e, with PREFETCH); make_mma_gemv_zn.py follows it.
# Writes session ZM's plans for the CuTe tensor-core GEMV (kernels/variants/cute/dense_gemm_mma_gemv.py); run
# from the repo root. The CUDA-core GEMVs spend M * 8 FMAs per 16-byte W vector, so at M = 9-16 fused_qkv_a's
# FMAs alone take about its HBM floor and every family in table ZJ sat at ~2.7 TB/s (11.1-11.5 us at M = 4-16);
# this kernel feeds each load's registers to mma.sync as they are, so its instruction count per W byte does not
# grow with M. Configs per shape: (RT, KWARPS, UNROLL) with UNROLL covering a warp's K steps (one round trip) or
# half of them, RT setting the grid (N / (16 * RT) CTAs: 132 for fused_qkv_a at RT 1, the SM count), each with
# and without the L2 prefetch of the warp's whole K range (ptxas keeps only ~4 loads in flight per thread).
# - mma_gemv_zm.json: M = 1, 4 and 16 of fused_qkv_a, q_b_proj and o_proj;
# - zm_all.json: that plus session ZL's K-split runs at M = 1 and 4 (ksplit_gemv_zl.json and the fused_qkv_a M = 4
#   part of ksplit_gemv_zl2.json; never run on the H200; its M = 16 runs are left to this kernel), for an H200 call;
# - zm_h100.json: that plus ksplit_gemv_zl2.json (the 30 ZL runs the H100 has not run), for an H100 call.
import json
from pathlib import Path

F = "kernels/variants/cute/dense_gemm_mma_gemv.py"
SPLITS = {  # shape: (RT, KWARPS, UNROLL); K // 32 = 224 (fused_qkv_a), 48 (q_b_proj), 32 (o_proj) warp steps
    "fused_qkv_a": ((1, 14, 16), (1, 7, 16), (1, 8, 8), (2, 14, 8)),
    "q_b_proj": ((1, 16, 3), (1, 8, 6), (1, 4, 12), (2, 8, 6)),
    "o_proj": ((1, 8, 4), (1, 4, 8), (2, 4, 8), (4, 4, 4)),
}
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}


def item(shape: str, m: int, configs: list[dict]) -> dict:
    return {"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
            "configs": configs}


zm = [item(shape, m, [dict(RT=rt, KWARPS=kw, UNROLL=u, PREFETCH=p) for rt, kw, u in SPLITS[shape] for p in (0, 1)])
      for shape in SPLITS for m in (1, 4, 16)]
plans = Path("bench/plans")
zl = json.loads((plans / "ksplit_gemv_zl.json").read_text())["variants"]
zl2 = json.loads((plans / "ksplit_gemv_zl2.json").read_text())["variants"]
zl_all = zl + [i for i in zl2 if i["batch_sizes"] != [16]]
for name, items in (("mma_gemv_zm", zm), ("zm_all", zm + zl_all), ("zm_h100", zm + zl2)):
    json.dump({"deployment": DEPLOYMENT, "variants": items}, open(plans / f"{name}.json", "w"), indent=1)
    print(name, sum(len(i["configs"]) for i in items), "runs")
