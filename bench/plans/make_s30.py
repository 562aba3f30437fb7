"""Writes session 30's plans: the buckets that make_s29.py could not fill, because no config of their neighbours
runs at the new M with one parameter moved.

rmsnorm_gemm's fused kernel holds every row of the batch in one tile (BLOCK_M >= M), and its register budget ties
BLOCK_M to num_warps ((4 BLOCK_M + 2 BLOCK_N) BLOCK_K <= 384 * 32 num_warps): on the H100, whose two fastest configs
at M = 32 use 4 warps, their 32-row tiles become 64-row tiles only with more warps or a shorter K step, so
make_s29's one-parameter move (at_m) found none and bucket 33-64 stayed untimed. (On the H200 one move fills it:
s29_h200.json times it, from 8-warp configs of M = 16.) Here a config that one move cannot fit gets a second: the
parameter tied to M moved, then each other parameter that can complete it moved to its first value that passes, one
config each (fits). Everything else is make_s29's: the gaps read from a table's winners, the two fastest distinct
configs of the nearest timed M on each side (a config that one move fits gives the same runs as in make_s29).
- bench/plans/s30_h100.json from the H100's latest table (h100-s29-checks).
Run from the repo root.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from plans.make_s28 import at_m  # noqa: E402
from plans.make_s29 import plan_for  # noqa: E402
from plans.plan_lib import check, file_space, filled, runs_at  # noqa: E402

TABLES = {"h100": Path("bench/results/2026-12-07-h100-decode-tuning-h100-s29-checks.json")}


def fits(file: str, config: dict, shape: str, m: int) -> list[dict]:
    """[at_m] where one move fits the config to (shape, M); else, for the first value of a parameter tied to M that
    some second move completes, each other parameter moved to its first value that does (one config per parameter
    that can: the second move is a guess, so the service times each); [] if none."""
    got = at_m(file, config, shape, m)
    if got is not None:
        return [got]
    cfg = filled(file, config)
    space = file_space(file)
    tied = dict.fromkeys(n for c in space.constraints if "M" in c.names for n in sorted(c.names) if n in space.params)
    for name in tied:
        for value in space.params[name]:
            out = []
            for other, values in space.params.items():
                if other == name:
                    continue
                for v in values:
                    trial = {**cfg, name: value, other: v}
                    if runs_at(file, trial, shape, m):
                        out.append(trial)
                        break
            if out:
                return out
    return []


if __name__ == "__main__":
    for card, table in TABLES.items():
        plan = plan_for(table, card, fit=fits)
        out = Path(f"bench/plans/s30_{card}.json")
        out.write_text(json.dumps(plan, indent=1) + "\n")
        print(f"{out}: {check(plan)} runs in {len(plan['variants'])} items")
