"""Writes session 23's plans for the new oproj_residual_norm_gemv (o_proj GEMV + residual epilogue, the norm a
PDL-chained second launch):
- bench/plans/oproj_norm_s23.json: its configs at M = 1, 2, 4 (it has none past M = 8), each with and without
  PDL, from the shapes of the o_proj GEMVs that won on both cards (one 8-16 KB round trip a CTA, 448-3584 CTAs),
  checked against the variant's own constraints here;
- bench/plans/s23_h200.json: the same plus the mla_norms_gemm slot (bench/plans/mla_norms_s21.json), which no
  H200 has run yet, for a call that lands on an H200 (resumed from table ZN);
- bench/plans/s23b_fused_pdl.json: the tensor-core kernels that hold these slots' buckets from M = 3 up, with their
  new options: oproj_residual_norm_fused's PDL-chained norm, and shared_expert_fused's split-order partials
  (REDUCE "partials") and PDL-prefetched w2, each beside the incumbent's own config, at M = 4, 16, 64.
Run from the repo root.
"""

import importlib.util
import json
from pathlib import Path

FILE = "kernels/variants/triton/oproj_residual_norm_gemv.py"
spec = importlib.util.spec_from_file_location("orn_gemv", FILE)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
SHAPE = {"N": 7168, "K": 1024}  # K2 at TP8: hidden, 8 heads x v_head_dim 128

# (BLOCK_N, BLOCK_K, SPLIT_K, num_warps) per BLOCK_M: every K step unrolled, <= 256 bytes in flight a thread
GEMV = {
    1: [(8, 1024, 1, 4), (4, 1024, 1, 2), (8, 512, 2, 2), (16, 512, 2, 4), (16, 1024, 1, 8), (4, 256, 4, 1)],
    2: [(8, 512, 2, 4), (4, 1024, 1, 4), (4, 512, 2, 2), (8, 256, 4, 2), (16, 512, 2, 8)],
    4: [(4, 512, 2, 4), (8, 256, 4, 4), (4, 256, 4, 2), (8, 512, 2, 8), (4, 1024, 1, 8)],
}
NORM = (1024, 4)  # 7 programs a row: N = 7168 in 1024-column slices, 8 columns a thread


def configs() -> list[dict]:
    out = []
    for bm, shapes in GEMV.items():
        for bn, bk, split, warps in shapes:
            for pdl in (0, 1):
                c = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps, "PDL": pdl,
                     "NORM_BLOCK": NORM[0], "norm_warps": NORM[1]}
                mod.check_constraints(c, {**SHAPE, "M": bm})  # raises on a config the variant would refuse
                out.append(c)
    # the norm's slice width on the first M = 1 shape, chained
    for block, warps in ((512, 4), (2048, 8)):
        out.append({**out[1], "NORM_BLOCK": block, "norm_warps": warps})
    return out


deployment = {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [1, 2, 4]}
item = {"file": FILE, "slot": "oproj_residual_norm", "language": "triton", "configs": configs()}
Path("bench/plans/oproj_norm_s23.json").write_text(json.dumps({"deployment": deployment, "variants": [item]},
                                                              indent=1) + "\n")
mla = json.loads(Path("bench/plans/mla_norms_s21.json").read_text())
h200 = {"deployment": mla["deployment"],
        "variants": list(mla["variants"]) + [{**item, "batch_sizes": deployment["batch_sizes"]}]}
Path("bench/plans/s23_h200.json").write_text(json.dumps(h200, indent=1) + "\n")

# the incumbents' configs (H100 table s23 and H200 table ZN agree: shared expert 3-4 and 9-16, oproj_residual_norm
# 3-4 to 33-64), then the new options on them
SE = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "num_stages": 3, "BLOCK_N2": 64,
      "BLOCK_K2": 256, "num_warps2": 4, "num_stages2": 2, "REDUCE": "atomic", "PDL": 0}
se = [{**SE, "REDUCE": r, "PDL": p} for r, p in (("partials", 0), ("partials", 1), ("atomic", 1))]
se += [{**SE, "REDUCE": "partials", "PDL": 1, **o} for o in (
    {"SPLIT_K": 16}, {"SPLIT_K": 4}, {"BLOCK_N": 32, "BLOCK_K": 128}, {"BLOCK_N": 32}, {"BLOCK_N2": 32})]
ORN = [{"BLOCK_N": 32, "BLOCK_K": 256, "BLOCK_M": 16, "num_warps": 4, "num_stages": 3, "NORM_BLOCK": 8192,
        "norm_warps": 16},
       {"BLOCK_N": 64, "BLOCK_K": 128, "BLOCK_M": 16, "num_warps": 4, "num_stages": 3, "NORM_BLOCK": 8192,
        "norm_warps": 8}]
orn = [{**c, "PDL": 1} for c in ORN] + [{**ORN[0], "BLOCK_K": 128, "num_stages": 4, "PDL": 1},
                                        {**ORN[0], "BLOCK_N": 16, "PDL": 1}]
fused = {"deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [4, 16, 64]}, "variants": [
    {"file": "kernels/variants/triton/shared_expert_fused.py", "slot": "shared_expert", "language": "triton",
     "configs": se},
    {"file": "kernels/variants/triton/oproj_residual_norm_fused.py", "slot": "oproj_residual_norm",
     "language": "triton", "configs": orn}]}
Path("bench/plans/s23b_fused_pdl.json").write_text(json.dumps(fused, indent=1) + "\n")
print(f"bench/plans/s23b_fused_pdl.json: {len(se)} + {len(orn)} configs at M = 4, 16, 64")
print(f"bench/plans/oproj_norm_s23.json: {len(item['configs'])} configs; bench/plans/s23_h200.json: "
      f"{len(h200['variants'])} items")
