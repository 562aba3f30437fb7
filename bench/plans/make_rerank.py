"""Writes a plan that re-times a table's runners-up: for each chosen (shape, M) of a tuning results file's
leaderboard, the (variant, config) pairs ranked just behind the bucket's winner. Run through
bench/service_tuning.py resumed from that table's DB, each of them is timed beside the winner it trails (the
worker's incumbent control, workers/bench.py), so the table's near-ties are decided head to head in one session.

    python bench/plans/make_rerank.py bench/results/<table>.json --slot dense_gemm \
        --shapes q_b_proj,o_proj,fused_qkv_a --batches 1,4,16 --ranks 2,3 --out bench/plans/<name>.json

A variant is named by the file the table's run submitted (its variant_files); where that file has changed since,
the plan times the file as it is now.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import results_files  # noqa: E402  (bench/results_files.py: variant id -> shipped file, along the resume chain)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--slot", default="dense_gemm")
    ap.add_argument("--shapes", required=True, help="comma-separated shape names")
    ap.add_argument("--batches", required=True, help="comma-separated M")
    ap.add_argument("--ranks", default="2,3", help="leaderboard ranks to re-time (1 is the winner's own run)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table = json.loads(Path(args.results).read_text())
    files = results_files.variant_files(table)
    shapes, batches = args.shapes.split(","), {int(m) for m in args.batches.split(",")}
    ranks = {int(r) for r in args.ranks.split(",")}
    winners = {(w["shape_name"], w["batch_bucket"]): w["evidence"] for w in table["winners"]
               if w["slot"] == args.slot and w.get("evidence")}
    items: dict[tuple[str, str, int], list[dict]] = defaultdict(list)
    for group in table["leaderboard"]:
        if group["slot"] != args.slot or group["shape_name"] not in shapes or group["m"] not in batches:
            continue
        win = winners.get((group["shape_name"], group["batch_bucket"]))
        for e in group["entries"]:
            if e["rank"] not in ranks or e["variant_id"] not in files:
                continue
            if win and (e["variant_id"], e["config"]) == (win["variant_id"], win["config"]):
                continue  # the winner's own (variant, config): the worker times no control beside itself
            items[(files[e["variant_id"]], group["shape_name"], group["m"])].append(e["config"])
    language = {f: Path(f).parent.name for f, _, _ in items}
    plan = {"deployment": table["plan"]["deployment"],
            "variants": [{"file": f, "slot": args.slot, "language": language[f], "shapes": [shape], "batch_sizes": [m],
                          "configs": configs} for (f, shape, m), configs in sorted(items.items())]}
    Path(args.out).write_text(json.dumps(plan, indent=1) + "\n")
    print(f"{args.out}: {sum(len(v['configs']) for v in plan['variants'])} runs in {len(plan['variants'])} items")


if __name__ == "__main__":
    main()
