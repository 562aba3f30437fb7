"""Writes session 26's plans.

bench/plans/s26_h200.json, resumed from the H200's table of record (s25): what the H100 has run since table ZN and no
H200 has, each file's best configs from the H100's latest table (h100-s25, which holds every H100 run since ZN),
most valuable first (a call that runs out of time cancels the tail):
- shared_expert_fused.py as it is now (split-order partials, PDL; session 24): the H100's best 3 configs at M = 2, 4,
  16, 64, where it holds the H100's M = 2-16 buckets at 1.81-1.84x and the H200's stand at 1.23-1.52x (the GEMV at
  M = 2, the old fused file at M = 3-64);
- the ring GEMV (dense_gemm_ring_gemv.py) at M = 1, 4, 16 of the three projections: the H100's best 3 per bucket;
- o_proj's GEMV with the residual and the norm: session 25's call B (bench/plans/s25b_h200.json), not yet run;
- the mla_norms_gemm slot: the H100's best 3 Triton configs per M, and the torch variant;
- moe_experts_grouped.py on the moe_experts_shared slot at M = 16 and 64, around the one config session 25 ran there
  (the incumbent of moe_experts), which loses to the separate pair by 5-11%: the w13 tile width, split-K, K tile,
  stages and warps one at a time, the w2 tile, and at M = 64 M tiles of 32 and 64 rows.
bench/plans/s26_h100.json, resumed from h100-s25: those grouped configs, and the six moe_experts_gemv configs at M = 4
that h100-s25 cancelled at its deadline.
Every config gets its space's first value for parameters it predates and is checked here as the service checks it
(search/space.py), so the service refuses none. Run from the repo root.
"""

import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import results_files  # noqa: E402
from plans.plan_lib import DEPLOYMENT, GROUPED, GROUPED_INCUMBENT, check, complete  # noqa: E402

H100 = Path("bench/results/2026-12-06-h100-decode-tuning-h100-s25")
SHARED = "kernels/variants/triton/shared_expert_fused.py"
RING = "kernels/variants/cute/dense_gemm_ring_gemv.py"
MLA = "kernels/variants/triton/rmsnorm_gemm_fused.py"
GEMV = "kernels/variants/triton/moe_experts_gemv.py"
TOP = 3


def best_configs(file: str, where: str, args: tuple) -> dict[tuple[str, int], list[dict]]:
    """(shape, M) -> the TOP fastest distinct configs of file's passed full-fidelity runs in the H100 table."""
    ids = [v for v, f in results_files.variant_files(json.loads(H100.with_suffix(".json").read_text())).items()
           if f == file]
    db = sqlite3.connect(f"file:{H100.with_suffix('.sqlite')}?mode=ro&immutable=1", uri=True)
    rows = db.execute(
        f"SELECT shape_name, m, config_key FROM runs WHERE variant_id IN ({','.join('?' * len(ids))})"
        f" AND status = 'done' AND verdict = 'passed' AND fidelity = 'full' AND {where}"
        " GROUP BY shape_name, m, config_key ORDER BY shape_name, m, min(ranked_us)", (*ids, *args))
    best: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for shape, m, key in rows:
        cfg = complete(file, json.loads(key), shape, m)
        if cfg is not None and len(best[shape, m]) < TOP and cfg not in best[shape, m]:
            best[shape, m].append(cfg)
    return best


def items(file: str, slot: str, language: str, best: dict, shaped: bool) -> list[dict]:
    return [{"file": file, "slot": slot, "language": language, **({"shapes": [shape]} if shaped else {}),
             "batch_sizes": [m], "configs": configs} for (shape, m), configs in sorted(best.items())]


def grouped_shared() -> list[dict]:
    """The moe_experts incumbent at M = 16 and 64 (session 25's one config there) and one change of it at a time."""
    changes = ({}, {"SPLIT_K": 1}, {"SPLIT_K": 4}, {"BLOCK_N": 32}, {"BLOCK_N": 32, "SPLIT_K": 4},
               {"BLOCK_K": 256}, {"num_stages": 4}, {"num_warps": 8}, {"BLOCK_N2": 64, "BLOCK_K2": 256})
    out = []
    for m in (16, 64):
        # at M = 64 the shared expert's 64 rows fill wider tiles: its weights read once, not once per 16 rows
        wider = ({"BLOCK_M": 32}, {"BLOCK_M": 64}) if m == 64 else ()
        configs = [complete(GROUPED, {**GROUPED_INCUMBENT, **c}, "moe_experts_shared", m) for c in changes + wider]
        assert all(configs), "a grouped config outside the file's space or constraints"
        out.append({"file": GROUPED, "slot": "moe_experts_shared", "language": "triton", "batch_sizes": [m],
                    "configs": configs})
    return out


h200 = items(SHARED, "shared_expert", "triton", best_configs(SHARED, "m IN (2, 4, 16, 64)", ()), False)
h200 += items(RING, "dense_gemm", "cute", best_configs(RING, "m IN (1, 4, 16)", ()), True)
h200 += json.loads(Path("bench/plans/s25b_h200.json").read_text())["variants"]
h200 += [{"file": "kernels/variants/torch/mla_norms_gemm_torch.py", "slot": "mla_norms_gemm", "language": "torch"}]
h200 += items(MLA, "mla_norms_gemm", "triton", best_configs(MLA, "slot = ? AND m IN (1, 2, 4, 16, 64)", ("mla_norms_gemm",)), False)
h200 += grouped_shared()

# h100-s25's cancelled moe_experts_gemv runs at M = 4 (its deadline came first)
db = sqlite3.connect(f"file:{H100.with_suffix('.sqlite')}?mode=ro&immutable=1", uri=True)
cancelled = [json.loads(k) for (k,) in db.execute(
    "SELECT DISTINCT config_key FROM runs WHERE slot = 'moe_experts_shared' AND m = 4 AND status = 'cancelled'")]
cancelled = [complete(GEMV, c, "moe_experts_shared", 4) for c in cancelled]
assert all(cancelled), "a cancelled config the file no longer takes"
h100 = grouped_shared() + [{"file": GEMV, "slot": "moe_experts_shared", "language": "triton", "batch_sizes": [4],
                            "configs": cancelled}]

for card, variants in (("h200", h200), ("h100", h100)):
    plan = {"deployment": DEPLOYMENT, "variants": variants}
    runs = check(plan)
    out = Path(f"bench/plans/s26_{card}.json")
    out.write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{out}: {runs} runs in {len(variants)} items")
