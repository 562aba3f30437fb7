"""Per-evaluation overhead of the sandbox: wall time of ``workers.sandbox.evaluate`` for a trivial
honest torch dense_gemm variant on a tiny shape, in each sandbox mode (spawn: fresh interpreter per
run; zygote: fork of a template process that imported torch once).

    python bench/sandbox_overhead.py [--runs 10] [--device cpu]

Prints a table and writes bench/results/<date>-<device>-sandbox-overhead.json (date, commit,
command, machine, per-run seconds). The zygote's start (its one-time imports) happens in an untimed
warm-up evaluation and is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels.backends.base import source_hash  # noqa: E402
from kernels.slots.base import Shape  # noqa: E402
from workers import sandbox  # noqa: E402
from workers.protocol import BenchSettings, RunSpec, Verdict  # noqa: E402

VARIANT = """
import torch
def build(config, shape):
    def run(x, w, out):
        torch.matmul(x, w.t(), out=out)
    return run
"""
TINY = Shape("dense_gemm", "tiny", {"N": 64, "K": 64})
BENCH = BenchSettings(warmup=0, min_rounds=3, max_rounds=3, min_time_s=0.0, input_sets=2, bootstrap=100)


def _spec(i: int, device: str) -> RunSpec:
    return RunSpec(run_id=f"overhead-{i}", slot="dense_gemm", language="torch", source=VARIANT,
                   source_hash=source_hash(VARIANT), shape=TINY.to_json(), m=1, device=device, seed=i,
                   bench=BENCH, timeout_s=300)


def _measure(mode: str, runs: int, device: str, data_dir: Path) -> dict:
    os.environ["KT_SANDBOX_MODE"] = mode
    sandbox.stop_zygote()
    t0 = time.monotonic()
    warm = sandbox.evaluate(_spec(1000, device), data_dir=data_dir)  # bandwidth cache; the zygote's start
    warmup_s = time.monotonic() - t0
    assert warm.verdict == Verdict.passed, warm.reason
    walls, forked = [], []
    for i in range(runs):
        t0 = time.monotonic()
        r = sandbox.evaluate(_spec(i, device), data_dir=data_dir)
        walls.append(time.monotonic() - t0)
        assert r.verdict == Verdict.passed, r.reason
        forked.append(r.sandbox.limits.get(sandbox.MODE_KEY))
    sandbox.stop_zygote()
    return {"mode": mode, "warmup_s": round(warmup_s, 3), "runs_s": [round(w, 3) for w in walls],
            "median_s": round(statistics.median(walls), 3), "min_s": round(min(walls), 3),
            "max_s": round(max(walls), 3), "zygote_forked": forked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kt-overhead-") as tmp:
        results = [_measure(mode, args.runs, args.device, Path(tmp)) for mode in ("spawn", "zygote")]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "workers"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip())
    now = datetime.now(timezone.utc)
    report = {
        "date": now.isoformat(timespec="seconds"), "commit": commit, "workers_dirty": dirty,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0]},
        "what": "wall time of workers.sandbox.evaluate(), trivial torch dense_gemm variant, N=K=64, M=1, "
                "3 bench rounds; warm-up run (zygote start, bandwidth measurement) excluded",
        "device": args.device, "results": results,
        "speedup_median": round(results[0]["median_s"] / results[1]["median_s"], 2),
    }
    for r in results:
        print(f"{r['mode']:>7}: median {r['median_s']:.3f} s  min {r['min_s']:.3f}  max {r['max_s']:.3f}  "
              f"(warm-up {r['warmup_s']:.1f} s)")
    print(f"speedup (median): {report['speedup_median']}x")
    out = REPO / "bench" / "results" / f"{now:%Y-%m-%d}-{args.device}-sandbox-overhead.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
