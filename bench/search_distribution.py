"""Wall time of one search spread over 1, 2 and 4 worker processes, against the replay device.

The whole service runs for real: API, the driver on kt.control, Redis, PostgreSQL (a fresh database on
KT_TEST_PG_URL's server), and N Celery workers started with KT_DEVICE=replay:<synthetic landscape> and
KT_REPLAY_DELAY_S (each run "takes" that long on the device). The search is random (asks cost
nothing) with max_evals points and batch_size = N, so the ideal wall time is points x delay / N and
the rest is distribution overhead (DB round trips, broker, driver polling). Writes
bench/results/<date>-cpu-search-distribution.json and .md.

    python bench/search_distribution.py                      # 200 points, 0.5 s per run, 1/2/4 workers
    python bench/search_distribution.py --points 60 --delay 0.2 --workers 1 2
"""

from __future__ import annotations

import argparse
import datetime as dt
from datetime import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from search.landscape import git_commit, synthetic_gemm_landscape  # noqa: E402
from service.client import Client  # noqa: E402
from service.embedded import EmbeddedStack  # noqa: E402
from tests.support.servers import RedisServer, free_port, fresh_pg_database  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SPACE = {"BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [64, 128, 256], "SPLIT_K": {"pow2": [1, 8]},
         "num_warps": [4, 8], "num_stages": {"range": [2, 4]},
         "constraints": ["BLOCK_K * SPLIT_K <= K", "BLOCK_N <= N"]}  # 288 valid points at M=16
DIMS = {"N": 2112, "K": 7168}  # fused_qkv_a, Kimi-K2-like at TP8
M = 16


def machine() -> dict[str, Any]:
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "system": platform.platform()}


def wait_for_workers(n: int, timeout_s: float = 120.0) -> None:
    """Until n workers answer on kt.replay and the control worker on kt.control (a broadcast ping)."""
    from service.search_dispatch import queue_workers

    deadline = time.monotonic() + timeout_s
    while (queue_workers("kt.replay") or 0) != n or not queue_workers("kt.control"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} replay workers not ready after {timeout_s:.0f} s")
        time.sleep(0.5)
    time.sleep(1.0)


def run_once(stack: EmbeddedStack, client: Client, variant_id: int, workers: int, points: int) -> dict[str, Any]:
    procs = [stack.start_worker(100 * workers + i) for i in range(workers)]
    wait_for_workers(workers)  # booting workers (imports) must not be timed as distribution overhead
    created = client.post("/v1/searches", {
        "variant_id": variant_id, "deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [M]},
        "hardware": "replay", "shapes": ["fused_qkv_a"], "strategy": "random", "budget": {"max_evals": points},
        "batch_size": workers, "seed": workers})
    # The stopwatch covers the whole search: POST, driver pickup, every round, the driver's finish.
    while True:
        out = client.get(f"/v1/searches/{created['id']}")
        if out["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(1.0)  # a slow poll: the bench's own GETs must not eat the CPU the stack is measured on
    # The wall time is the database's: search created -> search finished (written by the driver).
    wall = (datetime.fromisoformat(out["finished_at"]) - datetime.fromisoformat(out["created_at"])).total_seconds()
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
        stack.procs.remove(p)
    assert out["state"] == "done", out.get("error")
    return {"workers": workers, "search_id": created["id"], "evaluations": out["evaluations"], "wall_s": round(wall, 2),
            **latencies(stack, created["id"])}


def latencies(stack: EmbeddedStack, search_id: int) -> dict[str, Any]:
    """Where the time between runs goes, from the runs' own timestamps (medians, seconds)."""
    from sqlalchemy import select

    from db.models import Run, Search
    from db.session import make_engine

    engine = make_engine(stack.env["KT_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(Run.worker, Run.created_at, Run.started_at, Run.finished_at)
                                .where(Run.search_id == search_id).order_by(Run.started_at)).all()
            search = conn.execute(select(Search.created_at, Search.started_at, Search.finished_at)
                                  .where(Search.id == search_id)).one()
    finally:
        engine.dispose()
    med = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    queue_wait = [(r.started_at - r.created_at).total_seconds() for r in rows]
    busy = [(r.finished_at - r.started_at).total_seconds() for r in rows]
    idle: list[float] = []
    by_worker: dict[str, list[Any]] = {}
    for r in rows:
        by_worker.setdefault(r.worker, []).append(r)
    for runs in by_worker.values():
        idle += [(b.started_at - a.finished_at).total_seconds() for a, b in zip(runs, runs[1:])]
    first_created = min(r.created_at for r in rows)
    last_finished = max(r.finished_at for r in rows)
    return {"driver_pickup_s": round((search.started_at - search.created_at).total_seconds(), 3),
            "claim_to_first_run_s": round((first_created - search.started_at).total_seconds(), 3),
            "first_to_last_run_s": round((last_finished - first_created).total_seconds(), 3),
            "last_run_to_done_s": round((search.finished_at - last_finished).total_seconds(), 3),
            "workers_seen": len(by_worker), "median_created_to_started_s": med(queue_wait),
            "median_started_to_finished_s": med(busy), "median_worker_idle_between_runs_s": med(idle)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.5, help="KT_REPLAY_DELAY_S: seconds per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/search_distribution.py", *(sys.argv[1:] if argv is None else argv)])

    root = Path(tempfile.mkdtemp(prefix="kt-search-dist-"))
    landscape = synthetic_gemm_landscape(SPACE, DIMS, [M], seed=1, command=command)
    land_path = landscape.save(root / "synthetic-fused_qkv_a.json")
    redis = RedisServer(root / "redis").start()
    os.environ["KT_BROKER_URL"] = redis.url  # this process pings the workers through the same broker
    pg_url, drop = fresh_pg_database()
    stack = EmbeddedStack(root / "data", port=free_port(), hardware="replay", workers=0, env_extra={
        "KT_DATABASE_URL": pg_url, "KT_BROKER_URL": redis.url, "KT_DEVICE": f"replay:{land_path}",
        "KT_REPLAY_DELAY_S": str(args.delay), "KT_REPLAY_NOISE": "1", "KT_LOG_FORMAT": "plain"})
    rows = []
    try:
        stack.start()
        client = stack.client()
        source = (ROOT / "kernels" / "variants" / "torch" / "dense_gemm_matmul.py").read_text()
        variant_id = client.post("/v1/variants", {"slot": "dense_gemm", "language": "torch", "source": source,
                                                  "config_space": SPACE, "provenance": {"author": "bench"}})["id"]
        for n in args.workers:
            load_before = os.getloadavg()  # the machine is shared: say how busy it was
            row = run_once(stack, client, variant_id, n, args.points)
            row["loadavg_before"], row["loadavg_after"] = [round(x, 2) for x in load_before], [round(x, 2) for x in os.getloadavg()]
            row["ideal_s"] = round(args.points * args.delay / n, 2)
            row["efficiency"] = round(row["ideal_s"] / row["wall_s"], 3)
            rows.append(row)
            print(f"{n} worker(s): {row['wall_s']} s for {row['evaluations']} points (ideal {row['ideal_s']} s)",
                  flush=True)
    finally:
        stack.stop()
        redis.stop()
        drop()
    base = next((r["wall_s"] for r in rows if r["workers"] == 1), None)
    for r in rows:
        r["speedup_vs_1"] = round(base / r["wall_s"], 2) if base else None

    date = dt.date.today().isoformat()
    header = {"date": date, "commit": git_commit(ROOT), "command": command, "machine": machine(),
              "points": args.points, "delay_s": args.delay, "strategy": "random", "batch_size": "= workers",
              "stack": "API + driver (kt.control, threads) + Redis + PostgreSQL + N replay workers (solo pool)",
              "landscape": "synthetic_gemm_landscape(seed=1), fused_qkv_a 2112x7168, M=16 (roofline model)"}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{date}-cpu-search-distribution"
    stem.with_suffix(".json").write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")
    lines = [f"# Search distribution: {args.points}-point search on 1..{max(args.workers)} replay workers", "",
             f"- date: {date}", f"- commit: {header['commit']}", f"- command: `{command}`",
             f"- machine: {header['machine']['cpu']}, {header['machine']['cpus']} CPUs, {header['machine']['system']}",
             f"- stack: {header['stack']}", f"- landscape: {header['landscape']}; each run sleeps {args.delay} s",
             "", "| workers | wall s | ideal s (points x delay / workers) | efficiency | speedup vs 1 | load avg before / after (1 min) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['workers']} | {r['wall_s']} | {r['ideal_s']} | {r['efficiency']:.0%} | {r['speedup_vs_1']} "
              f"| {r['loadavg_before'][0]} / {r['loadavg_after'][0]} |" for r in rows]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
