"""Writes session 27's plans: moe_experts_grouped.py's ALIGN "tiles" (one CTA per BLOCK_M-row tile of an expert's
rows, where "sort" runs a group's tiles one after another in one CTA) beside "sort" at M = 64, where the shared
expert's 64 rows are 4 tiles and the fused MoE block lost the decode layer by 9.8% on the H100 (session 26):
- moe_experts_shared at M = 64: the H100 winner (w13 tile 32 x split-K 4), split-K 2 at that tile, and moe_experts'
  incumbent (64 x 2), each with "sort" and "tiles", in one job, so each pair is timed in one run; M tiles of 32 rows
  with "tiles"; and M tiles of 64 rows (one tile at M = 64), whose H100 run was refused for its claim (mended since);
- moe_experts at M = 64: its incumbent with "sort" and "tiles" (the slot's uniform routing gives few groups above 16
  rows, so little should move: a control for what "tiles" costs where it does not help).
bench/plans/s27_h100.json is that alone (resumed from h100-s26). bench/plans/s27_h200.json puts it before everything
of s26_h200.json (resumed from s25, the table of record), which no H200 has run: a call that runs out of time
cancels the tail, and this part is 14 runs. Run from the repo root.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plans.plan_lib import DEPLOYMENT, GROUPED, GROUPED_INCUMBENT, check, complete  # noqa: E402

def configs(shape: str, changes: list[dict]) -> list[dict]:
    out = [complete(GROUPED, {**GROUPED_INCUMBENT, **c}, shape, 64) for c in changes]
    assert all(out), "a grouped config outside the file's space or constraints"
    return out


def pairs(*changes: dict) -> list[dict]:
    return [dict(c, ALIGN=a) for c in changes for a in ("sort", "tiles")]


shared = pairs({"BLOCK_N": 32, "SPLIT_K": 4}, {"BLOCK_N": 32, "SPLIT_K": 2}, {}) + [
    {"BLOCK_M": 32, "ALIGN": "tiles"}, {"BLOCK_M": 32, "BLOCK_N": 32, "SPLIT_K": 4, "ALIGN": "tiles"},
    {"BLOCK_M": 64}, {"BLOCK_M": 64, "BLOCK_N": 32, "SPLIT_K": 4}]
tiles = [{"file": GROUPED, "slot": "moe_experts_shared", "language": "triton", "batch_sizes": [64],
          "configs": configs("moe_experts_shared", shared)},
         {"file": GROUPED, "slot": "moe_experts", "language": "triton", "batch_sizes": [64],
          "configs": configs("moe_experts", pairs({}, {"BLOCK_N": 32, "SPLIT_K": 4}))}]
s26 = json.loads(Path("bench/plans/s26_h200.json").read_text())
assert s26["deployment"] == DEPLOYMENT

for card, variants in (("h200", tiles + s26["variants"]), ("h100", tiles)):
    plan = {"deployment": DEPLOYMENT, "variants": variants}
    runs = check(plan)
    out = Path(f"bench/plans/s27_{card}.json")
    out.write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{out}: {runs} runs in {len(variants)} items")
