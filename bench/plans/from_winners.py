"""Writes a device plan that re-measures one table's winners on another card (run from the repo root):

    python bench/plans/from_winners.py --results bench/results/<date>-h200-decode-tuning-zj.json \
        --out bench/plans/h100_port_zj.json [--add bench/plans/h200_warp_gemv_zk.json --add-shape o_proj] \
        [--file kernels/variants/cute/dense_gemm_ring_gemv.py ...]

One item per (file, slot, shape, M) with the configs that won there, at the M that won. A table's variant ids
name file versions: a winner of an older version runs as the file is now, its config completed the way the
service completes an ancestor's (service.search_runner.inherit: a parameter the file added takes its first
value, one it dropped is left out). Buckets the table gives to the stock kernel have no item: --add merges
another plan's items (--add-shape keeps those of the named shapes) so that those buckets get candidates too.
The service on the new card times each against that card's stock kernel in the same process."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kernels.variant_meta import declared_space  # noqa: E402
from search.space import ConfigSpace  # noqa: E402
from service.search_runner import inherit  # noqa: E402


def port_items(results: dict[str, Any]) -> list[dict[str, Any]]:
    files = {int(k): v for k, v in results["variant_files"].items()}
    spaces: dict[str, ConfigSpace] = {}  # each file's space as it is now, parsed once
    grouped: dict[tuple[str, str, str, str, int], list[dict[str, Any]]] = {}
    for w in results["winners"]:
        ev = w.get("evidence") or {}
        if w["is_stock"] or not ev.get("config"):
            continue
        file = files[ev["variant_id"]]
        if file not in spaces:
            spaces[file] = ConfigSpace.parse(declared_space((REPO / file).read_text()) or {})
        space = spaces[file]
        config = inherit(dict(ev["config"]), space) if space.params else dict(ev["config"])
        key = (file, w["slot"], ev["language"], w["shape_name"], int(ev["m"]))
        if config not in grouped.setdefault(key, []):
            grouped[key].append(config)
    return [{"file": f, "slot": slot, "language": lang, "shapes": [shape], "batch_sizes": [m], "configs": cfgs}
            for (f, slot, lang, shape, m), cfgs in sorted(grouped.items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, type=Path, help="a service_tuning results JSON (its winners table)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--add", type=Path, action="append", default=[], help="another plan whose items join this one")
    ap.add_argument("--add-shape", action="append", default=[], help="keep only --add items of these shapes")
    ap.add_argument("--file", action="append", default=[],
                    help="keep only the winners of these variant files (repeatable; e.g. to re-measure the winners "
                         "of the files as they are now, on the same card)")
    args = ap.parse_args(argv)
    results = json.loads(args.results.read_text())
    items = [i for i in port_items(results) if not args.file or i["file"] in args.file]
    for extra in args.add:
        items += [i for i in json.loads(extra.read_text())["variants"]
                  if not args.add_shape or set(i.get("shapes") or ()) & set(args.add_shape)]
    plan = {"deployment": results["plan"]["deployment"], "variants": items}
    args.out.write_text(json.dumps(plan, indent=1) + "\n")
    runs = sum(len(i["configs"]) for i in items)
    print(f"{args.out}: {len(items)} items, {runs} runs (from {args.results.name}: "
          f"{sum(not w['is_stock'] for w in results['winners'])} non-stock winners)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
