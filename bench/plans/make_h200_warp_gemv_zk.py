# Writes bench/plans/h200_warp_gemv_zk.json (run from the repo root): session ZK's configs. The CuTe warp-per-rows
# GEMV holds o_proj's and q_b_proj's M = 1 buckets but had never run at M > 1, where cuBLAS holds o_proj (3-4,
# 9-16) and the tensor-core kernels lose to it (table ZJ): each warp reads its W rows once and multiplies every
# x row into them, so M = 4 and 16 cost the same bytes.
import json
F = "kernels/variants/cute/dense_gemm_warp_gemv.py"
# o_proj (the target cuBLAS holds) gets 9 configs; the rest 4 each (little device time was left)
wide = [dict(ROWS_PER_WARP=r, WARPS_PER_CTA=w, UNROLL=u) for r in (1, 2, 4) for w, u in ((4, 2), (16, 2), (8, 4))]
narrow = [dict(ROWS_PER_WARP=r, WARPS_PER_CTA=w, UNROLL=2) for r in (1, 2) for w in (4, 16)]
items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
          "configs": wide if shape == "o_proj" else narrow}
         for shape in ("o_proj", "q_b_proj", "fused_qkv_a") for m in (4, 16)]
plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}, "variants": items}
json.dump(plan, open("bench/plans/h200_warp_gemv_zk.json", "w"), indent=1)
print(sum(len(i["configs"]) for i in items), "runs")
