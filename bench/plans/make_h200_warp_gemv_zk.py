# Writes bench/plans/h200_warp_gemv_zk.json (run from the repo root): session ZK's configs. The CuTe warp-per-rows
# GEMV holds o_proj's and q_b_proj's M = 1 buckets but had never run at M > 1, where cuBLAS holds o_proj (3-4,
# 9-16, 33-64) and the tensor-core kernels lose to it (table ZJ): each warp reads its W rows once and multiplies
# every x row into them, so M = 4 and 16 cost the same bytes. Configs that spill registers in the preflight
# report (bench/compiler_report.py --plan) are left out: ROWS_PER_WARP 4 with 16 or 8 warps at M = 16, and
# ROWS_PER_WARP 2 at M = 64. On a lent H100 (bench/results/2026-12-05-h100-decode-port-zj.json) its best o_proj
# configs tied cuBLAS at M = 4 (8.53 vs 8.50 us) and lost at 16 (21.40 vs 8.95) and 64 (85.57 vs 9.73): past M = 4
# the x reloads and CUDA-core FMAs bound it, not the W bytes. The plan keeps M = 4 (27 runs).
import json
F = "kernels/variants/cute/dense_gemm_warp_gemv.py"
SHAPES = ("o_proj", "q_b_proj", "fused_qkv_a")
shape_of_cta = ((4, 2), (16, 2), (8, 4))  # (WARPS_PER_CTA, UNROLL): many small CTAs, few big ones, deeper unroll
configs = [dict(ROWS_PER_WARP=r, WARPS_PER_CTA=w, UNROLL=u) for r in (1, 2, 4) for w, u in shape_of_cta]
items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [4],
          "configs": configs} for shape in SHAPES]
plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}, "variants": items}
json.dump(plan, open("bench/plans/h200_warp_gemv_zk.json", "w"), indent=1)
print(sum(len(i["configs"]) for i in items), "runs")
