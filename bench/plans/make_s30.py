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
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from plans.make_s28 import TOP, at_m, plan_of, ranked_runs  # noqa: E402
from plans.make_s29 import gaps, nearest  # noqa: E402
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


def fitted(files: dict[int, str], ranked: dict, slot: str, shape: str, m: int,
           sides: tuple[int, ...]) -> list[tuple[str, dict]]:
    """make_s28's picks with fits: each side's TOP fastest distinct leaderboard entries that fit M, with every config
    fits gives for them."""
    out: list[tuple[str, dict]] = []
    seen: set[tuple[str, str]] = set()
    for side in sides:
        taken = 0
        for vid, key in ranked.get((slot, shape, side), []):
            if taken == TOP:
                break
            file = files.get(vid)
            fresh = [(file, c) for c in (fits(file, json.loads(key), shape, m) if file else [])
                     if (file, json.dumps(c, sort_keys=True)) not in seen]
            if not fresh:
                continue
            taken += 1
            for file_cfg in fresh:
                seen.add((file_cfg[0], json.dumps(file_cfg[1], sort_keys=True)))
                out.append(file_cfg)
    return out


def plan_for(table: Path, hardware: str) -> dict:
    files, ranked = ranked_runs(table)
    picked: dict[tuple[str, str, int, str], list[dict]] = defaultdict(list)
    for (slot, shape), ms in gaps(table, hardware).items():
        timed = {m for s, n, m in ranked if (s, n) == (slot, shape)}
        for m in ms:
            for file, cfg in fitted(files, ranked, slot, shape, m, nearest(timed - {m}, m)):
                picked[slot, shape, m, file].append(cfg)
    plan = plan_of(picked)
    # as make_s29 orders them: 5-8 and 17-32 first, then the rest by M (a stable sort)
    plan["variants"].sort(key=lambda item: (0, 0) if item["batch_sizes"][0] in (8, 32) else (1, item["batch_sizes"][0]))
    return plan


if __name__ == "__main__":
    for card, table in TABLES.items():
        plan = plan_for(table, card)
        out = Path(f"bench/plans/s30_{card}.json")
        out.write_text(json.dumps(plan, indent=1) + "\n")
        print(f"{out}: {check(plan)} runs in {len(plan['variants'])} items")
