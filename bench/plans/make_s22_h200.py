"""Writes bench/plans/s22_h200.json, session 22's H200 plan, resumed from table ZN (the table of record):
- the mla_norms_gemm slot: bench/plans/mla_norms_s21.json at M = 1-64 and the 64-row tiles of
  mla_norms_m64_s21c.json at M = 64 (the H100 ran both: tables s21b, s21c);
- the ring GEMV at M = 1, 4, 16 of the three projections: the H100's best 4 ring configs of each bucket (table
  s22a, which holds all of the H100's ring runs, sessions ZP-ZT, ranked by ranked_us), not all of session ZU's
  97-run plan (zs_all.json): with each run now also timed beside its bucket's incumbent (a second CuTe build),
  the whole of ZU's plan and the slot do not fit one 600 s device call.
Configs from the ring's older versions gain KSPLIT 1 and ROTATE 0, the kernel they ran before either existed.
Run from the repo root.
"""

import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import results_files  # noqa: E402

H100 = Path("bench/results/2026-12-06-h100-decode-tuning-h100-rerank-s22a")
RING = "kernels/variants/cute/dense_gemm_ring_gemv.py"
TOP = 4

mla = json.loads(Path("bench/plans/mla_norms_s21.json").read_text())
m64 = json.loads(Path("bench/plans/mla_norms_m64_s21c.json").read_text())
variants = list(mla["variants"]) + [{**v, "batch_sizes": [64]} for v in m64["variants"] if v["language"] != "torch"]

ids = [v for v, f in results_files.variant_files(json.loads(H100.with_suffix(".json").read_text())).items() if f == RING]
db = sqlite3.connect(f"file:{H100.with_suffix('.sqlite')}?mode=ro&immutable=1", uri=True)
best: dict[tuple[str, int], list[dict]] = defaultdict(list)
for shape, m, key in db.execute(
        f"SELECT shape_name, m, config_key FROM runs WHERE variant_id IN ({','.join('?' * len(ids))}) AND status = 'done'"
        " AND verdict = 'passed' AND fidelity = 'full' AND m IN (1, 4, 16) GROUP BY shape_name, m, config_key"
        " ORDER BY shape_name, m, min(ranked_us)", ids):
    config = {"KSPLIT": 1, "ROTATE": 0, **json.loads(key)}
    if len(best[shape, m]) < TOP and config not in best[shape, m]:
        best[shape, m].append(config)
variants += [{"file": RING, "slot": "dense_gemm", "language": "cute", "shapes": [shape], "batch_sizes": [m],
              "configs": configs} for (shape, m), configs in sorted(best.items())]
plan = {"deployment": mla["deployment"], "variants": variants}
Path("bench/plans/s22_h200.json").write_text(json.dumps(plan, indent=1) + "\n")
n = sum(len(v.get("configs", [None])) * len(v.get("batch_sizes", plan["deployment"]["batch_sizes"])) for v in variants)
print(f"bench/plans/s22_h200.json: {n} runs in {len(variants)} items")
