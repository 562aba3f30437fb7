"""How many evaluations each search strategy needs to get within 3% of the exhaustive best.

For each landscape (default: every bench/landscapes/*.json recorded on a device, source "measured"),
each target (every M, or every batch bucket with --per bucket) and each strategy, over --seeds seeds
with noisy replay: the evaluations (and GPU-seconds) until the strategy's current best config is truly
(noise-free) within --within of the exhaustive best; median and p90, also as a fraction of the valid
space; and whether TPE / successive halving get there in <= 15% of the space with >= 2x fewer
evaluations than random. Writes bench/results/<date>-search-<landscape>.json and .md.

    python bench/search_benchmark.py                                    # measured landscapes
    python bench/search_benchmark.py --make-synthetic --allow-synthetic # a synthetic one, labelled so
    python bench/search_benchmark.py --merge A.json B.json              # one landscape per M, benchmarked as one
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.deployment import batch_bucket  # noqa: E402
from search.driver import ReplayEvaluator, SearchDriver  # noqa: E402
from search.landscape import Landscape, git_commit, synthetic_gemm_landscape  # noqa: E402
from search.strategies import Budget, make_strategy, nearest_seeds  # noqa: E402

LANDSCAPES = ROOT / "bench" / "landscapes"
RESULTS = ROOT / "bench" / "results"
SMART = ("tpe", "tpe_plain", "successive_halving")
# Rows that are a strategy with options: name -> (strategy, options). tpe_plain: TPE without local steps.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {"tpe_plain": ("tpe", {"local_per_round": 0})}
MAX_FRACTION = 0.15
MIN_SPEEDUP_OVER_RANDOM = 2.0

# The synthetic landscape --make-synthetic writes: fused_qkv_a of a Kimi-K2-like spec (2112 x 7168).
SYNTHETIC_SPACE = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128, 256],
                   "SPLIT_K": {"pow2": [1, 16]}, "num_warps": [2, 4, 8], "num_stages": {"range": [2, 5]},
                   "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N", "BLOCK_M <= max(16, M)"]}
SYNTHETIC_DIMS = {"N": 2112, "K": 7168}
SYNTHETIC_MS = [1, 8, 16, 64]


def targets(landscape: Landscape, per: str) -> list[tuple[str, list[int]]]:
    if per == "m":
        return [(f"M={m}", [m]) for m in landscape.meta.ms]
    buckets: dict[str, list[int]] = {}
    for m in landscape.meta.ms:
        buckets.setdefault(batch_bucket(m), []).append(m)
    return [(f"bucket {b}", ms) for b, ms in buckets.items()]


def evaluations_to_reach(landscape: Landscape, name: str, ms: list[int], seed: int, target_us: float,
                         batch_size: int, options: dict[str, Any], max_fraction: float) -> tuple[int | None, float | None]:
    """(evaluations, GPU-seconds) until the strategy's best is within target, or (None, None)."""
    shape = landscape.shape_for(ms)
    count = landscape.space().count(shape, landscape.meta.limits)
    # A run that has not reached the target after max_fraction of the space counts as not reached:
    # Optuna's ask slows with thousands of trials, and past that fraction the answer is "no" anyway.
    budget = Budget(max_evals=max(1, math.ceil(max_fraction * count)))
    strategy_name, fixed = VARIANTS.get(name, (name, {}))
    strategy = make_strategy(strategy_name, landscape.space(), shape, budget=budget, seed=seed,
                             limits=landscape.meta.limits, **fixed, **options)
    driver = SearchDriver(strategy, ReplayEvaluator(landscape, ms, noise_seed=seed), batch_size=batch_size)
    seen = 0
    truth: dict[str, float | None] = {}
    while driver.step() or len(driver.history) > seen:
        for point in driver.history[seen:]:
            if point.config is not None:
                key = json.dumps(point.config, sort_keys=True)
                if key not in truth:
                    truth[key] = landscape.objective(point.config, ms)
                value = truth[key]
                if value is not None and value <= target_us:
                    return point.evaluations, point.cost_s
        seen = len(driver.history)
    return None, None


def summarise(values: list[int | None], count: int) -> dict[str, Any]:
    reached = [v for v in values if v is not None]
    as_array = np.array([v if v is not None else math.inf for v in values], dtype=float)
    median = float(np.median(as_array))
    p90 = float(np.quantile(as_array, 0.9, method="higher"))
    return {"runs": len(values), "reached": len(reached), "median": median, "p90": p90,
            "median_fraction": median / count, "p90_fraction": p90 / count}


def benchmark(landscape: Landscape, strategies: list[str], seeds: int, per: str, within: float,
              batch_size: int, max_fraction: float) -> list[dict[str, Any]]:
    rows = []
    all_targets = targets(landscape, per)
    for label, ms in all_targets:
        shape = landscape.shape_for(ms)
        count = landscape.space().count(shape, landscape.meta.limits)
        best_config, best = landscape.exhaustive_best(ms)
        target_us = (1 + within) * best
        near = sum(1 for c in landscape.configs(ms) if (v := landscape.objective(c, ms)) is not None and v <= target_us)
        row: dict[str, Any] = {"target": label, "ms": ms, "valid_points": count, "points_within": near,
                               "exhaustive_best_us": best, "exhaustive_best_config": best_config,
                               "baseline_us": landscape.baseline(ms), "strategies": {}}
        for name in strategies:
            options: dict[str, Any] = {}
            if name == "transfer":
                # Seeds: the exhaustive winners of the other targets of this landscape (nearest first).
                known = [({**landscape.meta.shape, "M": max(other)}, landscape.exhaustive_best(other)[0])
                         for other_label, other in all_targets if other_label != label]
                if not known:
                    continue
                options["seeds"] = nearest_seeds(known, shape, k=3)
            started = time.monotonic()
            evals, costs = [], []
            for seed in range(seeds):
                n, cost = evaluations_to_reach(landscape, name, ms, seed, target_us, batch_size, options,
                                               max_fraction)
                evals.append(n)
                costs.append(cost)
            stats = summarise(evals, count)
            reached_costs = [c if c is not None else math.inf for c in costs]
            stats["median_gpu_s"] = float(np.median(reached_costs))
            stats["wall_s"] = round(time.monotonic() - started, 1)
            row["strategies"][name] = stats
            print(f"  {label:>12} {name:>18}: median {stats['median']:.0f} evals "
                  f"({stats['median_fraction']:.1%} of {count}), p90 {stats['p90']:.0f}, "
                  f"reached {stats['reached']}/{seeds}, {stats['wall_s']} s", flush=True)
        random_median = row["strategies"].get("random", {}).get("median")
        row["criteria"] = {}
        for name in SMART:
            stats = row["strategies"].get(name)
            if stats is None or random_median is None:
                continue
            row["criteria"][name] = {
                "within_15pct_of_space": stats["median_fraction"] <= MAX_FRACTION,
                # Not reached (inf) never counts as fewer, even against a random search that failed too.
                "2x_fewer_than_random": math.isfinite(stats["median"])
                and stats["median"] * MIN_SPEEDUP_OVER_RANDOM <= random_median,
            }
        rows.append(row)
    return rows


def markdown(landscape: Landscape, rows: list[dict[str, Any]], header: dict[str, Any]) -> str:
    meta = landscape.meta
    synthetic = meta.source == "synthetic"
    lines = [f"# Search benchmark: {meta.slot} / {meta.variant} {meta.shape}"
             + (" — SYNTHETIC landscape (roofline model, not measurements)" if synthetic else ""), ""]
    hw = meta.hardware.get("name", json.dumps(meta.hardware))
    lines += [f"- date: {header['date']}", f"- commit: {header['commit']}", f"- command: `{header['command']}`",
              f"- landscape: {header['landscape']} (source: **{meta.source}**, recorded {meta.date}, "
              f"commit {meta.commit})", f"- device: {hw}",
              f"- seeds: {header['seeds']}, batch size {header['batch_size']}, target: within "
              f"{header['within']:.0%} of the exhaustive best (noise-free value of the strategy's current best)",
              ""]
    lines += ["| target | valid points | within target | strategy | median evals | % of space | p90 evals | "
              "reached | median GPU-s | criteria |",
              "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        for name, s in row["strategies"].items():
            crit = row["criteria"].get(name)
            verdict = "" if crit is None else ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in crit.items())
            lines.append(f"| {row['target']} | {row['valid_points']} | {row['points_within']} | {name} | "
                         f"{s['median']:.0f} | {s['median_fraction']:.1%} | {s['p90']:.0f} | "
                         f"{s['reached']}/{s['runs']} | {s['median_gpu_s']:.0f} | {verdict} |")
    lines.append("")
    lines.append("An evaluation is one run (a short timing of successive halving counts as one); GPU-seconds "
                 "come from the landscape's recorded costs. inf = not reached within "
                 f"{header['max_fraction']:.0%} of the space.")
    return "\n".join(lines) + "\n"


def finite_or_none(obj: Any) -> Any:
    """Strict JSON: 'not reached' (inf) becomes null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite_or_none(v) for v in obj]
    return obj


def make_synthetic(command: str) -> Path:
    landscape = synthetic_gemm_landscape(SYNTHETIC_SPACE, SYNTHETIC_DIMS, SYNTHETIC_MS, seed=0,
                                         variant="synthetic_splitk_gemm", command=command)
    path = LANDSCAPES / "synthetic-dense_gemm-fused_qkv_a.json"
    landscape.save(path)
    print(f"wrote {path} ({len(landscape.records)} records, source=synthetic)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("landscapes", nargs="*", type=Path, help="landscape JSON files (default: bench/landscapes/*)")
    parser.add_argument("--strategies", nargs="+",
                        default=["random", "tpe", "tpe_plain", "successive_halving", "transfer"],
                        help="strategy names, or tpe_plain: TPE without local steps (local_per_round=0)")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--per", choices=["m", "bucket"], default="m")
    parser.add_argument("--within", type=float, default=0.03)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-fraction", type=float, default=0.5,
                        help="give up on a run after this fraction of the valid space (counts as not reached)")
    parser.add_argument("--allow-synthetic", action="store_true", help="also benchmark synthetic landscapes")
    parser.add_argument("--make-synthetic", action="store_true", help="write the synthetic landscape first")
    parser.add_argument("--merge", action="store_true",
                        help="the given landscapes are one variant and shape at different Ms: benchmark them as one "
                             "(transfer then seeds each M from the others)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    command = shlex.join([Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)])

    paths = list(args.landscapes)
    if args.make_synthetic:
        made = make_synthetic(command)
        paths = paths or [made]
    if not paths:
        paths = sorted(LANDSCAPES.glob("*.json"))
    chosen = []
    loaded = [(path, Landscape.load(path)) for path in paths]
    if args.merge:
        merged = Landscape.merge([landscape for _, landscape in loaded])
        loaded = [(paths[0].with_name("merged-" + paths[0].name), merged)]
    for path, landscape in loaded:
        if landscape.meta.source != "measured" and not args.allow_synthetic:
            print(f"skip {path}: source={landscape.meta.source} (pass --allow-synthetic)")
            continue
        if not landscape.is_complete():  # cut short on the device: only what it measured
            landscape = landscape.measured_subspace()
            print(f"{path.name}: partial, {landscape.meta.notes.rsplit('|', 1)[-1].strip()}")
        chosen.append((path, landscape))
    if not chosen:
        print("no landscape to benchmark: record one on a device, or use --make-synthetic --allow-synthetic")
        return 2

    date, commit = dt.date.today().isoformat(), git_commit(ROOT)
    args.out.mkdir(parents=True, exist_ok=True)
    for path, landscape in chosen:
        print(f"{path.name}: source={landscape.meta.source}, Ms={landscape.meta.ms}")
        header = {"date": date, "commit": commit, "command": command, "landscape": path.name,
                  "source": landscape.meta.source, "landscape_notes": landscape.meta.notes,
                  "valid_points": {m: len(landscape.configs(m)) for m in landscape.meta.ms},
                  "device": landscape.meta.hardware, "seeds": args.seeds,
                  "batch_size": args.batch_size, "within": args.within, "per": args.per,
                  "max_fraction": args.max_fraction}
        rows = benchmark(landscape, args.strategies, args.seeds, args.per, args.within, args.batch_size,
                         args.max_fraction)
        stem = f"{date}-search-{path.stem}"
        (args.out / f"{stem}.json").write_text(json.dumps(finite_or_none({**header, "rows": rows}), indent=1,
                                                           allow_nan=False, default=str) + "\n")
        (args.out / f"{stem}.md").write_text(markdown(landscape, rows, header))
        print(f"wrote {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
