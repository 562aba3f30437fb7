"""Run the worker's real evaluation (workers.sandbox.evaluate: compile -> check -> bench in a
sandboxed child) over shipped variants, shapes and batch sizes, and write a results file.

This is the script for the lent H200 (no Redis there: it calls the evaluation entry point the
Celery task calls). Every row is one RunResult; timings are ratios against the stock baseline
measured in the same child, and fractions of the HBM floor from the bandwidth measured on the device.

    python bench/pipeline_runs.py --what dense-gemm --device cuda \
        --variants kernels/variants/triton/dense_gemm_splitk.py --configs default --out $OUT
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import multiprocessing as mp
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels.backends.base import source_hash  # noqa: E402
from kernels.catalogue import get_slot  # noqa: E402
from kernels.deployment import Deployment, batch_bucket  # noqa: E402
from kernels.slots.base import Shape  # noqa: E402
from kernels.variant_meta import declared_literals, declared_space  # noqa: E402
from search.landscape import git_commit  # noqa: E402
from search.space import ConfigSpace  # noqa: E402
from workers.protocol import BenchSettings, RunSpec  # noqa: E402
from workers.sandbox import evaluate  # noqa: E402

LANG_BY_DIR = {"torch": "torch", "triton": "triton", "cute": "cute"}


def slot_of(path: Path) -> str:
    name = path.stem
    for slot in ("dense_gemm", "router", "moe_experts", "shared_expert", "oproj_residual_norm", "add_rmsnorm",
                 "rmsnorm_gemm", "mla_norms_gemm"):
        if name.startswith(slot):
            return slot
    raise SystemExit(f"cannot tell the slot of {path}: name it <slot>_<what>.py")


def configs_for(source: str, shape_arg: dict[str, Any], mode: str, rng: random.Random,
                space_json: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    space_json = space_json or declared_space(source)
    if not space_json:
        return [{}]
    space = ConfigSpace.parse(space_json)
    if mode.startswith("["):  # an explicit list: each config where it is valid for this (shape, M)
        return [c for c in json.loads(mode) if space.is_valid(c, shape_arg)]
    if mode == "default":
        default = declared_literals(source).get("DEFAULT_CONFIG")
        if default is not None and space.is_valid(default, shape_arg):
            return [dict(default)]
        return [next(iter(space.points(shape_arg)))]
    points = list(space.points(shape_arg))
    if mode == "all":
        return points
    n = int(mode)
    return points if len(points) <= n else rng.sample(points, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", required=True, help="name for the results file")
    ap.add_argument("--variants", required=True, help="comma-separated variant files")
    ap.add_argument("--configs", default="default", help="default | all | N (random sample of valid points) | a JSON list of configs")
    ap.add_argument("--model", default="kimi-k2-like")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--slot", default="", help="the variants' slot, where it is not their file name's prefix "
                    "(rmsnorm_gemm_fused.py also serves mla_norms_gemm)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--hardware", default="h200", help="hardware class for the file name")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--min-time", type=float, default=0.3, help="bench seconds per run")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--parallel", type=int, default=1, help="evaluations at once (their timed phases never overlap)")
    ap.add_argument("--space", default="", help="JSON config space overriding the module's (e.g. a subspace)")
    ap.add_argument("--landscape", action="store_true",
                    help="also write a search landscape (one variant, one shape): every point measured once")
    ap.add_argument("--out", default=os.environ.get("OUT", str(REPO / "bench" / "results")))
    ap.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR", str(Path.home() / ".kerneltune")))
    args = ap.parse_args()

    rng = random.Random(args.seed)
    dep = Deployment(spec=args.model, tp=args.tp, batch_sizes=[int(b) for b in args.batches.split(",")])
    wanted = {s for s in args.shapes.split(",") if s}
    space_override = json.loads(args.space) if args.space else None
    out_dir = Path(args.out)
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    jobs: list[tuple[Path, str, RunSpec]] = []
    for vpath in [Path(p) for p in args.variants.split(",")]:
        source = vpath.read_text()
        slot = get_slot(args.slot or slot_of(vpath))
        language = LANG_BY_DIR[vpath.parent.name]
        uses_library = bool(declared_literals(source).get("USES_LIBRARY", False))
        for shape in slot.shapes(dep):
            if wanted and shape.name not in wanted:
                continue
            for m in dep.token_counts():
                for config in configs_for(source, shape.as_build_arg(m), args.configs, rng, space_override):
                    jobs.append((vpath, shape.name, RunSpec(
                        run_id=str(uuid.uuid4()), slot=slot.name, language=language, source=source,
                        source_hash=source_hash(source), config=config, shape=shape.to_json(), m=m,
                        device=args.device, seed=rng.randrange(2**31), timeout_s=args.timeout,
                        declares_library=uses_library, bench=BenchSettings(min_time_s=args.min_time))))
    if args.landscape:
        # A step cut by its time limit then leaves a uniform sample of the space, not its first corner.
        rng.shuffle(jobs)
    fingerprint: dict[str, Any] = {}
    data_dir = Path(args.data_dir)
    # Several evaluations at once compile and check side by side; workers/gpu_lock.py gives each
    # one's timed phase the device to itself, so --parallel changes throughput, not the timings.
    with ProcessPoolExecutor(max_workers=args.parallel, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(evaluate_one, spec, data_dir): (vpath, shape_name, spec)
                   for vpath, shape_name, spec in jobs}
        for fut in as_completed(futures):
            vpath, shape_name, spec = futures[fut]
            res = fut.result()
            fingerprint = fingerprint or res.fingerprint
            rows.append(row_of(vpath, shape_name, spec, res))
            rows.sort(key=lambda r: (r["variant"], r["shape"], r["M"], json.dumps(r["config"], sort_keys=True)))
            write_results(out_dir, header_for(args, dep, fingerprint, t_start), rows, args.what, args.hardware)
            if args.landscape:  # also rewritten per run: a step cut by its time limit keeps what it measured
                write_landscape(out_dir, header_for(args, dep, fingerprint, t_start), rows, args, space_override,
                                complete=False)
            b = res.bench
            sp = f"{b.speedup:.2f}x [{b.speedup_ci_lo:.2f},{b.speedup_ci_hi:.2f}] {100*b.frac_of_floor:.0f}%floor" if b else ""
            print(f"{vpath.name:34s} {shape_name:12s} M={spec.m:3d} {json.dumps(spec.config, separators=(',', ':'))[:60]:60s} "
                  f"{res.verdict:14s} {res.reason_code:18s} {sp} wall={res.child_wall_s or 0:.1f}s", flush=True)

    if args.landscape:
        write_landscape(out_dir, header_for(args, dep, fingerprint, t_start), rows, args, space_override,
                        complete=True)


def evaluate_one(spec: RunSpec, data_dir: Path) -> Any:
    return evaluate(spec, data_dir=data_dir)


def row_of(vpath: Path, shape_name: str, spec: RunSpec, res: Any) -> dict[str, Any]:
    shape_key = Shape.from_json(spec.shape).key
    row: dict[str, Any] = {
        "variant": vpath.name, "language": spec.language, "slot": spec.slot, "shape": shape_name,
        "shape_key": shape_key, "M": spec.m, "bucket": batch_bucket(spec.m), "config": spec.config,
        "verdict": res.verdict, "reason_code": res.reason_code, "reason": res.reason[:300],
        "compile_s": res.compile.seconds if res.compile else None,
        "compile_cache_hit": res.compile.cache_hit if res.compile else None,
        "check_s": res.check.seconds if res.check else None,
        "bench_s": res.bench.seconds if res.bench else None,
        "check_trials": [t.model_dump() for t in res.check.trials] if res.check else [],
        "child_wall_s": res.child_wall_s, "uses_library": res.uses_library,
        "lock_wait_s": res.sandbox.lock_wait_s if res.sandbox else None,
    }
    b = res.bench
    if b is not None:
        row.update(median_us=b.median_us, p10_us=b.p10_us, p90_us=b.p90_us, cv=b.cv,
                   baseline_median_us=b.baseline_median_us, baseline_cv=b.baseline_cv,
                   speedup=b.speedup, speedup_ci=[b.speedup_ci_lo, b.speedup_ci_hi],
                   floor_us=b.floor_us, frac_of_floor=b.frac_of_floor,
                   bandwidth_gbs=b.bandwidth_gbs, timer=b.timer, n=b.n)
    return row


def header_for(args: argparse.Namespace, dep: Deployment, fingerprint: dict[str, Any], t_start: float) -> dict[str, Any]:
    return {
        "what": f"kerneltune pipeline runs: {args.what}", "date": dt.date.today().isoformat(),
        "device": fingerprint.get("name") or args.device, "hardware": args.hardware,
        "fingerprint": fingerprint, "commit": git_commit(REPO), "command": " ".join(sys.argv),
        "deployment": dep.model_dump(), "wall_s": round(time.monotonic() - t_start, 1),
    }


def write_results(out: Path, header: dict[str, Any], rows: list[dict[str, Any]], what: str, hardware: str) -> None:
    """Rewritten after every run, so a run cut short by a time limit still leaves its evidence."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{header['date']}-{hardware}-{what}"
    (out / f"{stem}.json").write_text(json.dumps({**header, "rows": rows}, indent=1, default=str))
    (out / f"{stem}.md").write_text(markdown(header, rows))


def write_landscape(out: Path, header: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace,
                    space_override: dict[str, Any] | None, complete: bool) -> None:
    """The rows as a search landscape (search/landscape.py): what the replay device answers from."""
    from search.landscape import Landscape, LandscapeMeta, LandscapeRecord

    variants = {r["variant"] for r in rows}
    shapes = {r["shape_key"] for r in rows}
    if len(variants) != 1 or len(shapes) != 1:
        raise SystemExit("--landscape needs exactly one variant and one shape")
    first = rows[0]
    vpath = next(Path(p) for p in args.variants.split(","))
    records = [LandscapeRecord(config=r["config"], m=r["M"], verdict="ok" if r["verdict"] == "passed" else r["verdict"],
                               median_us=r.get("median_us"), baseline_median_us=r.get("baseline_median_us"),
                               p10_us=r.get("p10_us"), p90_us=r.get("p90_us"), cost_s=r.get("child_wall_s") or 0.0)
               for r in rows]
    dims = next(sh for sh in get_slot(first["slot"]).shapes(Deployment(spec=args.model, tp=args.tp))
                if sh.key == first["shape_key"]).dims
    meta = LandscapeMeta(slot=first["slot"], variant=first["variant"], language=first["language"], shape=dict(dims),
                         ms=sorted({r["M"] for r in rows}), hardware=header["fingerprint"], date=header["date"],
                         commit=header["commit"], command=header["command"], source="measured",
                         space=space_override or declared_space(vpath.read_text()) or {},
                         notes=(f"every valid point measured once by workers.sandbox.evaluate on {header['device']}"
                                if complete else f"PARTIAL: {len(records)} points measured before the step ended "
                                "(not every valid point: a strategy benchmark must treat it as the whole space)"))
    # M in the name once it is not the first landscapes' M=1, so a second batch size never overwrites them.
    ms = "-".join(str(m) for m in meta.ms)
    path = out / f"{header['date']}-{args.hardware}-landscape-{vpath.stem}-{first['shape']}{'' if ms == '1' else f'-m{ms}'}.json"
    Landscape(meta, records).save(path)
    if complete:
        print(f"wrote landscape {path} ({len(records)} points)")


def markdown(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"# {header['what']}", "",
             f"- date: {header['date']}; device: {header['device']}; commit: `{header['commit']}`",
             f"- command: `{header['command']}`", "",
             "| variant | shape | M | config | verdict | us | stock us | speedup [95% CI] | of HBM floor |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r.get("median_us") is not None:
            nums = (f"{r['median_us']:.2f} | {r['baseline_median_us']:.2f} | {r['speedup']:.2f} "
                    f"[{r['speedup_ci'][0]:.2f}, {r['speedup_ci'][1]:.2f}] | {100 * r['frac_of_floor']:.0f}%")
        else:
            nums = "- | - | - | -"
        verdict = r["verdict"] + (f" ({r['reason_code']})" if r["reason_code"] else "")
        lines.append(f"| {r['variant']} | {r['shape']} | {r['M']} | `{json.dumps(r['config'], separators=(',', ':'))}` "
                     f"| {verdict} | {nums} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
