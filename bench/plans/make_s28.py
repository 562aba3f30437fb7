"""Writes session 28's plans: the batch buckets no table has tuned, 5-8 and 17-32.

Every plan so far timed M = 1, 2, 4, 16 and 64, so an exported package serves a batch of 8 or 32 (the
deployment's default batch sizes include both) with the stock kernel: its dispatch keeps stock outside the
tuned buckets. For each slot and shape of a card's latest table, the two fastest distinct (file, config) of each
neighbouring M's passed runs (the table's DB, ranked as the service ranks them) run at M = 8 (from M = 4 and 16) and at M = 32 (from M = 16 and 64), each
checked here as the service checks it at the new M: a parameter a constraint ties to M (a GEMM's row tile) moves to
the first value that passes, a config that still fails (a GEMV bound to M <= 4) drops out; the service then
checks every run at that M and keeps stock where nothing beats it.
- bench/plans/s28_h100.json from the H100's latest table (h100-s27);
- bench/plans/s28_h200.json from the H200's table of record (s25), then everything of s27_h200.json, which no H200
  has run (the tiles at M = 64 first, then session 26's backlog): a call that runs out of time cancels the tail;
  bench/plans/s28_h200_buckets.json is its first part alone, for bench/compiler_report.py --plan.
Run from the repo root.
"""

import json
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import results_files  # noqa: E402
from plans.plan_lib import DEPLOYMENT, check, file_space, filled, runs_at  # noqa: E402

TABLES = {"h200": Path("bench/results/2026-12-06-h200-decode-tuning-s25.json"),
          "h100": Path("bench/results/2026-12-07-h100-decode-tuning-h100-s27.json")}
NEIGHBOURS = {8: (4, 16), 32: (16, 64)}  # the new M -> the timed M either side of it
TOP = 2  # from each neighbour's leaderboard
MULTI_SHAPE = {"dense_gemm"}  # slots with several shapes: each item names its shape


def language(file: str) -> str:
    return Path(file).parts[-2]  # kernels/variants/<language>/<file>.py


def at_m(file: str, config: dict, shape: str, m: int) -> dict | None:
    """config as the service would run it at (shape, M), else with one of the parameters that a constraint ties to M
    moved to its space's first value that passes (a tile of M = 16 rows becomes one of 32 at M = 32); None if none."""
    cfg = filled(file, config)
    if runs_at(file, cfg, shape, m):
        return cfg
    space = file_space(file)
    tied = [n for c in space.constraints if "M" in c.names for n in sorted(c.names) if n in space.params]
    for name in dict.fromkeys(tied):
        for value in space.params[name]:
            trial = {**cfg, name: value}
            if runs_at(file, trial, shape, m):
                return trial
    return None


def ranked_runs(table: Path) -> tuple[dict[int, str], dict[tuple[str, str, int], list[tuple[int, str]]]]:
    """The table's variant files by id, and its DB's passed full-fidelity (variant, config) per (slot, shape, M),
    fastest first (the incumbent's time base), as the service ranks them."""
    files = results_files.variant_files(json.loads(table.read_text()))
    db = sqlite3.connect(f"file:{table.with_suffix('.sqlite')}?mode=ro&immutable=1", uri=True)
    ranked: dict[tuple[str, str, int], list[tuple[int, str]]] = defaultdict(list)
    for slot, shape, m, vid, key in db.execute(
            "SELECT slot, shape_name, m, variant_id, config_key FROM runs WHERE status = 'done' AND verdict = 'passed'"
            " AND fidelity = 'full' GROUP BY slot, shape_name, m, variant_id, config_key"
            " ORDER BY slot, shape_name, m, min(ranked_us)"):
        ranked[slot, shape, m].append((vid, key))
    return files, ranked


def picks(files: dict[int, str], ranked: dict[tuple[str, str, int], list[tuple[int, str]]], slot: str, shape: str,
          m: int, sides: tuple[int, ...], fit: Callable[[str, dict, str, int], list[dict]] | None = None,
          ) -> list[tuple[str, dict]]:
    """The TOP fastest distinct (file, config) of each side's leaderboard that the service would run at M, each with
    the configs ``fit`` makes of it at M (at_m's one by default; make_s30.py's fits may give several)."""
    fit = fit or (lambda file, config, shape, m: [c] if (c := at_m(file, config, shape, m)) is not None else [])
    out: list[tuple[str, dict]] = []
    seen: set[tuple[str, str]] = set()
    for side in sides:
        taken = 0
        for vid, key in ranked.get((slot, shape, side), []):
            if taken == TOP:
                break
            file = files.get(vid)
            fresh = [] if file is None else [c for c in fit(file, json.loads(key), shape, m)
                                             if (file, json.dumps(c, sort_keys=True)) not in seen]
            if not fresh:
                continue
            taken += 1
            for cfg in fresh:
                seen.add((file, json.dumps(cfg, sort_keys=True)))
                out.append((file, cfg))
    return out


def plan_of(picked: dict[tuple[str, str, int, str], list[dict]]) -> dict:
    """One plan item per (slot, shape, M, file), in sorted order."""
    variants = [{"file": file, "slot": slot, "language": language(file),
                 **({"shapes": [shape]} if slot in MULTI_SHAPE else {}), "batch_sizes": [m], "configs": configs}
                for (slot, shape, m, file), configs in sorted(picked.items())]
    return {"deployment": DEPLOYMENT, "variants": variants}


def plan_for(table: Path) -> dict:
    files, ranked = ranked_runs(table)
    # (slot, shape, M, file) -> configs, in the order the neighbours rank them
    picked: dict[tuple[str, str, int, str], list[dict]] = defaultdict(list)
    for slot, shape in sorted({(s, n) for s, n, _ in ranked}):
        for m, sides in NEIGHBOURS.items():
            for file, cfg in picks(files, ranked, slot, shape, m, sides):
                picked[slot, shape, m, file].append(cfg)
    return plan_of(picked)


if __name__ == "__main__":
    for card, table in TABLES.items():
        plan = plan_for(table)
        if card == "h200":
            # the buckets alone: what bench/compiler_report.py --plan pre-flights (the rest ran through it before)
            alone = Path("bench/plans/s28_h200_buckets.json")
            alone.write_text(json.dumps(plan, indent=1) + "\n")
            print(f"{alone}: {check(plan)} runs in {len(plan['variants'])} items")
            s27 = json.loads(Path("bench/plans/s27_h200.json").read_text())
            assert s27["deployment"] == plan["deployment"]
            plan["variants"] += s27["variants"]
        runs = check(plan)
        out = Path(f"bench/plans/s28_{card}.json")
        out.write_text(json.dumps(plan, indent=1) + "\n")
        print(f"{out}: {runs} runs in {len(plan['variants'])} items")
