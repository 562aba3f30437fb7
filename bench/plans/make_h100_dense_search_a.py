# Writes bench/plans/h100_dense_search_a.json (run from the repo root): the H100's own tuning of the slots whose
# H200 configs lost most on it (bench/results/2026-12-05-h100-decode-port-zj.md: q_b_proj 1.74x -> 1.31x at M = 1,
# fused_qkv_a 1.32x -> 1.21x geomean, shared_expert 33-64 lost to stock). Transfer searches, resumed from the port's
# DB: each starts from the configs that ran on the H100 (the ported H200 winners) and goes on with TPE.
import json
T = "kernels/variants/triton/"
def search(file, slot, shape, ms, evals, seed, lang="triton"):
    return {"file": file, "slot": slot, "language": lang, "shapes": [shape], "batch_sizes": ms,
            "search": {"strategy": "transfer", "budget": {"max_evals": evals}, "batch_size": 4, "seed": seed}}
items = [search(T + "dense_gemm_gemv.py", "dense_gemm", "q_b_proj", [4], 16, 1),
         search(T + "dense_gemm_gemv.py", "dense_gemm", "fused_qkv_a", [1], 16, 2),
         search(T + "dense_gemm_gemv.py", "dense_gemm", "fused_qkv_a", [4], 16, 3),
         search(T + "dense_gemm_splitk.py", "dense_gemm", "q_b_proj", [16], 16, 4),
         search(T + "dense_gemm_splitk.py", "dense_gemm", "fused_qkv_a", [16], 16, 5),
         search(T + "shared_expert_fused.py", "shared_expert", "shared_expert", [64], 12, 6),
         search("kernels/variants/cute/dense_gemm_warp_gemv.py", "dense_gemm", "q_b_proj", [1], 8, 7, "cute")]
plan = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4, 16, 64]}, "variants": items}
json.dump(plan, open("bench/plans/h100_dense_search_a.json", "w"), indent=1)
print(sum(i["search"]["budget"]["max_evals"] for i in items), "evaluations at most")
