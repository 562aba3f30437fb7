# Writes bench/plans/ksplit_gemv_zl.json (run from the repo root): session ZL's configs for the CuTe GEMV that
# splits K across the warps of one CTA (kernels/variants/cute/dense_gemm_ksplit_gemv.py). Every kernel family in
# table ZJ streamed fused_qkv_a's 30 MB at ~2.7 TB/s at M = 4-16 (11.1-11.5 us) against 8.59 us for a plain read
# of the same bytes; this kernel issues a CTA's whole W range before its first FMA and reduces in shared memory.
# (KWARPS, UNROLL) pairs are chosen so UNROLL covers a thread's K steps (one DRAM round trip per CTA) or half of
# them; ROWS sets the grid (N / ROWS CTAs). No M = 16: its CUDA-core FMAs (16 per W element) take about
# fused_qkv_a's whole HBM floor, and the warp GEMV, the same math, lost there on the H100 (21.40 vs 8.95 us at
# o_proj). The preflight (bench/compiler_report.py --plan) showed no spills: 90 registers at most.
import json
F = "kernels/variants/cute/dense_gemm_ksplit_gemv.py"
SPLITS = {  # shape: (KWARPS, UNROLL) pairs; K // 256 = 28 (fused_qkv_a), 6 (q_b_proj), 4 (o_proj) steps in all
    "fused_qkv_a": ((7, 4), (14, 2), (4, 4)),
    "q_b_proj": ((6, 1), (3, 2), (2, 2)),
    "o_proj": ((4, 1), (2, 2), (1, 4)),
}
items = [{"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
          "configs": [dict(ROWS=r, KWARPS=kw, UNROLL=u) for kw, u in SPLITS[shape] for r in (1, 2, 4, 8)]}
         for shape in SPLITS for m in (1, 4)]
plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}, "variants": items}
json.dump(plan, open("bench/plans/ksplit_gemv_zl.json", "w"), indent=1)
print(sum(len(i["configs"]) for i in items), "runs")
