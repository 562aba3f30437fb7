"""Writes session 29's plans: every bucket of the default batch sizes that a card's latest table holds no verdict for.

Session 28 filled 5-8 and 17-32 (make_s28.py). The export's coverage list (export/coverage.py) of table h100-s28 still
names bucket 2 for dense_gemm's four shapes, add_rmsnorm and rmsnorm_gemm (their plans timed M = 1 and 4, not 2) and
33-64 for lm_head, q_b_proj and rmsnorm_gemm: a package serves batch 2 with the stock GEMMs. Here the gaps are read
from the table's winners (a bucket with neither a winner nor a stock verdict, for each (slot, shape) the table
holds), not listed by hand, and each is filled as make_s28 fills its buckets: the two fastest distinct configs of
the nearest timed M on each side, moved to fit the new M where a constraint ties a parameter to it.
- bench/plans/s29_h100.json from the H100's latest table (h100-s28);
- bench/plans/s29_h200.json from the H200's table of record (s25): its gaps (5-8 and 17-32 as s28_h200.json has
  them, then bucket 2 and the rest), then session 27's backlog as s28_h200.json has it: it replaces s28_h200.json,
  which no H200 has run; bench/plans/s29_h200_gaps.json is its first part alone, for bench/compiler_report.py --plan.
Run from the repo root.
"""

import json
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.deployment import DEFAULT_BATCHES, batch_bucket  # noqa: E402
from plans.make_s28 import picks, plan_of, ranked_runs  # noqa: E402
from plans.plan_lib import check  # noqa: E402

TABLES = {"h200": Path("bench/results/2026-12-06-h200-decode-tuning-s25.json"),
          "h100": Path("bench/results/2026-12-07-h100-decode-tuning-h100-s28.json")}
# the M a gap is timed at: the default batch size in its bucket (2, 8, 32, 64)
AT = {batch_bucket(m): m for m in DEFAULT_BATCHES}


def gaps(table: Path, hardware: str) -> dict[tuple[str, str], list[int]]:
    """(slot, shape) -> the M of each default bucket with no winner row (tuned or stock) for this card."""
    db = sqlite3.connect(f"file:{table.with_suffix('.sqlite')}?mode=ro&immutable=1", uri=True)
    have: dict[tuple[str, str], set[str]] = defaultdict(set)
    for slot, shape, bucket in db.execute("SELECT slot, shape_name, batch_bucket FROM winners WHERE hardware = ?",
                                          (hardware,)):
        have[slot, shape].add(bucket)
    return {key: [m for b, m in AT.items() if b not in buckets] for key, buckets in sorted(have.items())
            if any(b not in buckets for b in AT)}


def nearest(timed: set[int], m: int) -> tuple[int, ...]:
    """The timed M just below and just above m (one side where the other has none)."""
    below, above = [t for t in timed if t < m], [t for t in timed if t > m]
    return tuple(x for x in (max(below, default=None), min(above, default=None)) if x is not None)


def plan_for(table: Path, hardware: str, fit: Callable[[str, dict, str, int], list[dict]] | None = None) -> dict:
    """``fit``: how a neighbour's config is made to run at the gap's M (picks' default, one parameter moved)."""
    files, ranked = ranked_runs(table)
    picked: dict[tuple[str, str, int, str], list[dict]] = defaultdict(list)
    for (slot, shape), ms in gaps(table, hardware).items():
        timed = {m for s, n, m in ranked if (s, n) == (slot, shape)}
        for m in ms:
            for file, cfg in picks(files, ranked, slot, shape, m, nearest(timed - {m}, m), fit):
                picked[slot, shape, m, file].append(cfg)
    plan = plan_of(picked)
    # session 28's buckets first (5-8, 17-32), in its order, then the rest by M (a stable sort)
    plan["variants"].sort(key=lambda item: (0, 0) if item["batch_sizes"][0] in (8, 32) else (1, item["batch_sizes"][0]))
    return plan


if __name__ == "__main__":
    for card, table in TABLES.items():
        plan = plan_for(table, card)
        if card == "h200":
            alone = Path("bench/plans/s29_h200_gaps.json")
            alone.write_text(json.dumps(plan, indent=1) + "\n")
            print(f"{alone}: {check(plan)} runs in {len(plan['variants'])} items")
            s28 = json.loads(Path("bench/plans/s28_h200.json").read_text())
            s28_gaps = json.loads(Path("bench/plans/s28_h200_buckets.json").read_text())
            assert s28["deployment"] == plan["deployment"]
            plan["variants"] += s28["variants"][len(s28_gaps["variants"]):]  # session 27's backlog
        runs = check(plan)
        out = Path(f"bench/plans/s29_{card}.json")
        out.write_text(json.dumps(plan, indent=1) + "\n")
        print(f"{out}: {runs} runs in {len(plan['variants'])} items")
