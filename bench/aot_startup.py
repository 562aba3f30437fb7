"""What an exported package's CuTe DSL kernels cost to get ready on the GPU host, JIT against ahead of time.

vLLM builds every kernel of every batch size it captures before it serves; a CuTe entry's kernel is one build per M
(shapes are compile-time constants). This script installs an exported wheel into a private folder and, each in a
fresh process, builds and runs every CuTe entry of the package at every M its bucket serves:

- ``jit_cold``: KT_LS_AOT=0 and an empty CuTe DSL cache (a fresh container: every build compiles);
- ``jit_warm``: KT_LS_AOT=0 and the cache ``jit_cold`` filled (a restart that kept CUTE_DSL_CACHE_DIR);
- ``aot``: the package's shared objects (export/aot.py), an empty cache.

Per mode: the process's import time, each (entry, M, chain level)'s build seconds and how it was built
(dispatch.build_tuned; chain levels 1 and 2 where the variant chains, as vLLM builds them with KT_LS_PDL=1 or 2), the
first call, and the eager host time per call at M = 1 (plain launches). The outputs of one seeded call per (entry, M,
chain level) are compared across modes bit for bit: an ahead-of-time kernel must compute exactly what the JIT one
does; and a chained build's with the plain build's. On a GPU only.

    python bench/aot_startup.py --wheel WHEEL --out bench/results/<date>-<card>-cute-aot-startup.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODES = ("jit_cold", "jit_warm", "aot")
HOST_CALLS = 200


def child(package: str, outputs_dir: str, buckets: list[str] | None = None) -> dict[str, Any]:
    """One mode, in its own process: build and run every CuTe entry at every M of its bucket."""
    import importlib

    t0 = time.perf_counter()
    import torch

    dsp = importlib.import_module(f"{package}.dispatch")
    reference = importlib.import_module(f"{package}.reference")
    selftest = importlib.import_module(f"{package}.selftest")
    imported_s = time.perf_counter() - t0
    device = torch.device("cuda")
    rows, hosts = [], []
    t_all = time.perf_counter()
    for entry in dsp.tuned_entries():
        if entry["language"] != "cute" or buckets and entry["bucket"] not in buckets:
            continue
        sem = reference.semantics(entry["slot"])
        shape = dsp.dispatch_table()["slots"][entry["slot"]][entry["shape_key"]]["shape"]
        dims, dtype = shape["dims"], reference.DTYPES[shape["dtype"]]
        levels = (0, 1, 2) if dsp.can_chain(importlib.import_module(f"{package}.kernels.{entry['module']}")) else (0,)
        stock_ms = set(entry.get("stock_ms", ()))  # dispatch serves stock there: the export built nothing
        for m, pdl in [(m, pdl) for pdl in levels for m in selftest.bucket_ms(entry["bucket"]) if m not in stock_ms]:
            t = time.perf_counter()
            fn, how = dsp.build_tuned(entry["slot"], entry["shape_key"], m, pdl)
            built_s = time.perf_counter() - t
            inputs = sem.make_inputs(dims, dtype, m, 1000 + m, device)
            outputs = sem.alloc_outputs(dims, dtype, m, device)
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn(**inputs, **outputs)
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t
            name = hashlib.sha256(f"{entry['slot']}|{entry['shape_key']}|{m}|{pdl}".encode()).hexdigest()[:16] + ".pt"
            torch.save({k: v.cpu() for k, v in outputs.items()}, Path(outputs_dir) / name)
            rows.append({"slot": entry["slot"], "shape_key": entry["shape_key"], "bucket": entry["bucket"], "m": m,
                         "pdl": pdl, "module": entry["module"], "how": how, "build_s": round(built_s, 4),
                         "first_call_s": round(first_s, 5), "outputs": name})
            if m == 1 and pdl == 0:  # eager host cost per call: the launch path in Python, not the kernel
                for _ in range(10):
                    fn(**inputs, **outputs)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(HOST_CALLS):
                    fn(**inputs, **outputs)
                torch.cuda.synchronize()
                hosts.append({"shape_key": entry["shape_key"], "module": entry["module"],
                              "us_per_call": round((time.perf_counter() - t) / HOST_CALLS * 1e6, 2)})
    return {"import_s": round(imported_s, 3), "builds_s": round(time.perf_counter() - t_all, 3), "rows": rows,
            "eager_m1": hosts}


def run_mode(mode: str, site: Path, package: str, cache: Path, outputs: Path,
             buckets: list[str] | None = None) -> dict[str, Any]:
    env = {**os.environ, "KT_LS_AOT": "0" if mode.startswith("jit") else "1", "CUTE_DSL_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "KT_LS_ASSUME_HARDWARE": "1"}  # build_tuned ignores the hardware check; this only keeps dispatch quiet
    outputs.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from bench.aot_startup import child; "
            f"print('RESULT ' + json.dumps(child({package!r}, {str(outputs)!r}, {buckets!r})))")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return {"mode": mode, "process_wall_s": round(wall, 3), **json.loads(line[len("RESULT "):])}


def equal(a: Path, b: Path) -> bool:
    """Two saved outputs, bit for bit."""
    import torch

    x, y = torch.load(a), torch.load(b)
    return all(torch.equal(x[k], y[k]) for k in x)


def same_outputs(a: Path, b: Path, rows: list[dict[str, Any]]) -> list[str]:
    return [f"{r['shape_key']} M={r['m']} pdl={r['pdl']}" for r in rows
            if not equal(a / r["outputs"], b / r["outputs"])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", default=",".join(MODES), help=f"a comma list of {MODES}; aot is always run")
    ap.add_argument("--buckets", default=None, help="only the CuTe entries of these buckets (comma list)")
    args = ap.parse_args()
    modes = [m for m in MODES if m in args.modes.split(",") or m == "aot"]
    buckets = args.buckets.split(",") if args.buckets else None
    import torch

    from search.landscape import git_commit

    if not torch.cuda.is_available():
        print("aot_startup: needs a GPU", file=sys.stderr)
        return 2
    wheel = Path(args.wheel)
    with zipfile.ZipFile(wheel) as z:
        package = next(n.split("/")[0] for n in z.namelist() if n.endswith("/dispatch.json"))
        manifest = json.loads(z.read(f"{package}/manifest.json"))
    with tempfile.TemporaryDirectory(prefix="kt-aot-bench-") as tmp_s:
        tmp = Path(tmp_s)
        site = tmp / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                        str(wheel)], check=True)
        results = {}
        for mode in modes:
            cache = tmp / ("cache-jit" if mode.startswith("jit") else "cache-aot")
            results[mode] = run_mode(mode, site, package, cache, tmp / f"out-{mode}", buckets)
            print(f"{mode}: {results[mode]['builds_s']} s for {len(results[mode]['rows'])} builds", flush=True)
        rows = results["aot"]["rows"]
        mismatched = {m: same_outputs(tmp / "out-aot", tmp / f"out-{m}", rows) for m in modes if m != "aot"}
        # a chained build computes what the plain one does (the same seeded inputs): compared bit for bit too
        plain = {(r["shape_key"], r["bucket"], r["m"]): r["outputs"] for r in rows if r["pdl"] == 0}
        chained_vs_plain = [f"{r['shape_key']} M={r['m']} pdl={r['pdl']}" for r in rows if r["pdl"] and not equal(
            tmp / "out-aot" / r["outputs"], tmp / "out-aot" / plain[r["shape_key"], r["bucket"], r["m"]])]
    p = torch.cuda.get_device_properties(0)
    doc = {
        "what": "cute-aot-startup", "date": dt.date.today().isoformat(), "commit": git_commit(ROOT),
        "command": "python bench/aot_startup.py " + " ".join(sys.argv[1:]),
        "device": {"name": p.name, "sm": f"{p.major}.{p.minor}", "torch": torch.__version__},
        "wheel": wheel.name, "package": package, "aot": manifest.get("aot"),
        "summary": {m: {"builds": len(r["rows"]), "builds_s": r["builds_s"], "import_s": r["import_s"],
                        "process_wall_s": r["process_wall_s"],
                        "built_aot": sum(x["how"] == "aot" for x in r["rows"]),
                        "chained": sum(x["pdl"] > 0 for x in r["rows"]),
                        "chained_built_aot": sum(x["how"] == "aot" and x["pdl"] > 0 for x in r["rows"]),
                        "eager_m1_us_per_call": [h["us_per_call"] for h in r["eager_m1"]]}
                    for m, r in results.items()},
        "outputs_differ_from_aot": mismatched,
        "chained_differ_from_plain": chained_vs_plain,
        "modes": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    print("outputs differ from aot:", mismatched, "chained differ from plain:", chained_vs_plain)
    none_aot = results["aot"]["rows"] and not doc["summary"]["aot"]["built_aot"]
    return 1 if any(mismatched.values()) or chained_vs_plain or none_aot else 0


if __name__ == "__main__":
    sys.exit(main())
