# Writes session ZL's plans for the CuTe GEMV that splits K across the warps of one CTA
# (kernels/variants/cute/dense_gemm_ksplit_gemv.py); run from the repo root. Every kernel family in table ZJ
# streamed fused_qkv_a's 30 MB at ~2.7 TB/s at M = 4-16 (11.1-11.5 us) against 8.59 us for a plain read of the
# same bytes; this kernel issues a CTA's whole W range before its first FMA and reduces in shared memory.
# - ksplit_gemv_zl.json (72 runs, M = 1 and 4): (KWARPS, UNROLL) pairs chosen so UNROLL covers a thread's K steps
#   (one DRAM round trip per CTA) or half of them; ROWS sets the grid (N / ROWS CTAs). Run first on an H100
#   (bench/results/2026-12-05-h100-decode-tuning-h100-zl.md): it won all six buckets it entered there.
# - ksplit_gemv_zl2.json (30 runs): what that run left open. M = 16, where each W element takes 16 CUDA-core
#   FMAs (q_b_proj's and o_proj's are a fraction of their floor; fused_qkv_a's about its whole floor on the H200,
#   less on the H100's slower HBM), ROWS <= 4 for the accumulators; and fused_qkv_a at M = 4, whose winner there
#   was the one two-chunk config (KWARPS 4, UNROLL 4), with more of that kind.
# - ksplit_gemv_zl_all.json: both, for a card that has run neither (the H200).
# The preflight (bench/compiler_report.py --plan) showed no spills.
import json
F = "kernels/variants/cute/dense_gemm_ksplit_gemv.py"
SPLITS = {  # shape: (KWARPS, UNROLL) pairs; K // 256 = 28 (fused_qkv_a), 6 (q_b_proj), 4 (o_proj) steps in all
    "fused_qkv_a": ((7, 4), (14, 2), (4, 4)),
    "q_b_proj": ((6, 1), (3, 2), (2, 2)),
    "o_proj": ((4, 1), (2, 2), (1, 4)),
}
DEPLOYMENT = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}


def item(shape: str, m: int, configs: list[dict]) -> dict:
    return {"file": F, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
            "configs": configs}


def grid(pairs, rows) -> list[dict]:
    return [dict(ROWS=r, KWARPS=kw, UNROLL=u) for kw, u in pairs for r in rows]


zl = [item(shape, m, grid(SPLITS[shape], (1, 2, 4, 8))) for shape in SPLITS for m in (1, 4)]
zl2 = ([item(shape, 16, grid(SPLITS[shape], (1, 2, 4))) for shape in ("q_b_proj", "o_proj")]
       + [item("fused_qkv_a", 16, grid(SPLITS["fused_qkv_a"], (1, 2))),
          item("fused_qkv_a", 4, grid(((2, 4), (2, 8), (4, 2)), (2, 4)))])
for name, items in (("zl", zl), ("zl2", zl2), ("zl_all", zl + zl2)):
    json.dump({"deployment": DEPLOYMENT, "variants": items}, open(f"bench/plans/ksplit_gemv_{name}.json", "w"),
              indent=1)
    print(name, sum(len(i["configs"]) for i in items), "runs")
