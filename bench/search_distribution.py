"""Wall time of one search spread over 1, 2 and 4 worker processes, against the replay device.

The whole service runs for real: API, the driver on kt.control, Redis, PostgreSQL (a fresh database on
KT_TEST_PG_URL's server), and N Celery workers started with KT_DEVICE=replay:<synthetic landscape> and
KT_REPLAY_DELAY_S (each run "takes" that long on the device). The search is random (asks cost
nothing) with max_evals points and batch_size = F x N proposals in flight (--batch-factors, F = 1: one
per worker, as before 2026-12-03), so the ideal wall time is points x delay / N and the rest is
distribution overhead (DB round trips, broker, driver polling). Writes
bench/results/<stem>.json and .md (--stem, default <date>-cpu-search-distribution).

Where a worker's time between two runs goes is read from the runs' timestamps (started_at: claim_run,
finished_at: record_result) and the driver's trace (KT_SEARCH_TRACE: when it saw each result land, and
when it started a submit, committed the runs and enqueued them).

    python bench/search_distribution.py                      # 200 points, 0.5 s per run, 1/2/4 workers
    python bench/search_distribution.py --points 60 --delay 0.2 --workers 1 2
    python bench/search_distribution.py --batch-factors 1 2 --wait-quiet 0.5 --stem 2026-12-03-cpu-search-distribution
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
from service.search_runner import poll_seconds  # noqa: E402
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


def wait_quiet(max_load: float | None, timeout_s: float) -> None:
    """Until the 1-minute load average is below max_load (the machine is shared), or timeout_s passed."""
    if max_load is None:
        return
    deadline = time.monotonic() + timeout_s
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(5.0)
    if os.getloadavg()[0] > max_load:
        print(f"load {os.getloadavg()[0]:.2f} still above {max_load} after {timeout_s:.0f} s; measuring anyway",
              flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def control_pid(stack: EmbeddedStack) -> int:
    return next(p.pid for p in stack.procs if "kt.control" in p.args)


def run_once(stack: EmbeddedStack, client: Client, variant_id: int, workers: int, points: int,
             batch_size: int) -> dict[str, Any]:
    procs = [stack.start_worker(100 * workers + i) for i in range(workers)]
    wait_for_workers(workers)  # booting workers (imports) must not be timed as distribution overhead
    driver_cpu = cpu_seconds(control_pid(stack))
    created = client.post("/v1/searches", {
        "variant_id": variant_id, "deployment": {"spec": "kimi-k2-like", "tp": 8, "batch_sizes": [M]},
        "hardware": "replay", "shapes": ["fused_qkv_a"], "strategy": "random", "budget": {"max_evals": points},
        "batch_size": batch_size, "seed": workers})
    # The stopwatch covers the whole search: POST, driver pickup, every round, the driver's finish.
    while True:
        out = client.get(f"/v1/searches/{created['id']}")
        if out["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(1.0)  # a slow poll: the bench's own GETs must not eat the CPU the stack is measured on
    # The wall time is the database's: search created -> search finished (written by the driver).
    wall = (datetime.fromisoformat(out["finished_at"]) - datetime.fromisoformat(out["created_at"])).total_seconds()
    driver_cpu = cpu_seconds(control_pid(stack)) - driver_cpu  # the driver's process (a thread pool) over the search
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
        stack.procs.remove(p)
    assert out["state"] == "done", out.get("error")
    return {"workers": workers, "batch_size": batch_size, "search_id": created["id"],
            "evaluations": out["evaluations"], "wall_s": round(wall, 2), "driver_cpu_s": round(driver_cpu, 2),
            **latencies(stack, created["id"])}


def _ts(x: datetime) -> float:
    return x.timestamp()


def trace_events(stack: EmbeddedStack, search_id: int) -> list[dict[str, Any]]:
    path = Path(stack.env_extra.get("KT_SEARCH_TRACE", ""))
    if not path.is_file():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("search") == search_id]


def breakdown(rows: list[Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """Means (seconds) of each step between a worker finishing a run and starting its next one.

    A gap on one worker (finished_at of a run -> started_at of its next run) is split at the driver's
    trace points: the result lands (record_result commits, the driver's next poll sees it), the
    driver reacts (tell, ask, more landed results, its loop), inserts the next runs, enqueues them,
    and the broker hands one to a worker, which claims it. When a queued run is already waiting for
    the worker, the gap is only the last step (ack, fetch, claim): the 'queued ahead' share."""
    landed = {e["runs"][0]: e["t"] for e in events if e["ev"] == "landed"}
    submits = sorted((e for e in events if e["ev"] == "submit"), key=lambda e: e["t_submit"])
    submit_of = {rid: e for e in submits for rid in e["runs"]}
    mean = lambda xs: round(statistics.fmean(xs), 4) if xs else None  # noqa: E731
    by_worker: dict[str, list[Any]] = {}
    for r in rows:
        by_worker.setdefault(r.worker, []).append(r)
    gaps, waited, parts = [], [], {k: [] for k in ("result_to_driver", "driver_react", "insert", "enqueue",
                                                   "broker_to_claim")}
    ahead, ahead_gaps = 0, []
    for runs in by_worker.values():
        for a, b in zip(runs, runs[1:]):
            gap = _ts(b.started_at) - _ts(a.finished_at)
            gaps.append(gap)
            sub = submit_of.get(b.id)
            if sub is None or a.id not in landed:
                continue
            if sub["t_enqueued"] <= _ts(a.finished_at):  # b was on the queue before a finished
                ahead += 1
                ahead_gaps.append(gap)
                continue
            waited.append(gap)
            seen = landed[a.id]
            parts["result_to_driver"].append(seen - _ts(a.finished_at))
            parts["driver_react"].append(sub["t_submit"] - seen)
            parts["insert"].append(sub["t_committed"] - sub["t_submit"])
            parts["enqueue"].append(sub["t_enqueued"] - sub["t_committed"])
            parts["broker_to_claim"].append(_ts(b.started_at) - sub["t_enqueued"])
    out: dict[str, Any] = {"gaps": len(gaps), "mean_gap_s": mean(gaps), "gaps_waiting_on_driver": len(waited),
                           "mean_gap_waiting_on_driver_s": mean(waited), "gaps_with_run_queued_ahead": ahead,
                           "mean_gap_with_run_queued_ahead_s": mean(ahead_gaps)}
    if events:
        out["mean_waiting_gap_parts_s"] = {k: mean(v) for k, v in parts.items()}
        rtd = sorted(parts["result_to_driver"])
        if rtd:
            out["result_to_driver_p50_p90_s"] = [round(rtd[len(rtd) // 2], 4), round(rtd[int(0.9 * (len(rtd) - 1))], 4)]
        looks = sorted((e for e in events if e["ev"] == "look"), key=lambda e: e["t0"])
        if len(looks) > 1:  # the driver's looks at the database (LandedRuns): cadence and cost
            out["looks"] = len(looks)
            out["mean_look_interval_s"] = mean([b["t0"] - a["t0"] for a, b in zip(looks, looks[1:])])
            out["mean_look_s"] = mean([e["t1"] - e["t0"] for e in looks])
            # result -> driver, split at the looks: the run's row was committed after the last look that
            # missed it started (a lower bound on record_result's own time after its timestamp), then
            # waited for the look that found it, then for its row to be loaded and told.
            finished_at = {r.id: _ts(r.finished_at) for r in rows}
            split = {"commit_lower_bound": [], "wait_for_look": [], "look_to_told": []}
            for prev, look in zip(looks, looks[1:]):
                for rid in look["found"]:
                    if rid in landed and rid in finished_at:
                        committed = max(finished_at[rid], prev["t0"])
                        split["commit_lower_bound"].append(committed - finished_at[rid])
                        split["wait_for_look"].append(look["t1"] - committed)
                        split["look_to_told"].append(landed[rid] - look["t1"])
            out["mean_result_to_driver_split_s"] = {k: mean(v) for k, v in split.items()}
        out["mean_insert_s"] = mean([e["t_committed"] - e["t_submit"] for e in submits])
        out["mean_enqueue_s"] = mean([e["t_enqueued"] - e["t_committed"] for e in submits])
        out["submits"] = len(submits)
    return out


def latencies(stack: EmbeddedStack, search_id: int) -> dict[str, Any]:
    """Where the time between runs goes, from the runs' own timestamps (medians, seconds)."""
    from sqlalchemy import select

    from db.models import Run, Search
    from db.session import make_engine

    engine = make_engine(stack.env["KT_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(Run.id, Run.worker, Run.created_at, Run.started_at, Run.finished_at)
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
    # Every worker-second of the wall (workers x wall) is in a run, between two runs, before a worker's
    # first run (driver pickup, first proposals) or after its last (the others finishing): per point.
    created, finished = _ts(search.created_at), _ts(search.finished_at)
    runs_per_worker = list(by_worker.values())
    in_runs = sum(busy)
    between = sum(idle)
    head = sum(_ts(runs[0].started_at) - created for runs in runs_per_worker)
    tail = sum(finished - _ts(runs[-1].finished_at) for runs in runs_per_worker)
    n = len(rows)
    worker_time = {"in_runs_s": round(in_runs / n, 4), "between_runs_s": round(between / n, 4),
                   "before_first_run_s": round(head / n, 4), "after_last_run_s": round(tail / n, 4)}
    first_created = min(r.created_at for r in rows)
    last_finished = max(r.finished_at for r in rows)
    return {"driver_pickup_s": round((search.started_at - search.created_at).total_seconds(), 3),
            "claim_to_first_run_s": round((first_created - search.started_at).total_seconds(), 3),
            "first_to_last_run_s": round((last_finished - first_created).total_seconds(), 3),
            "last_run_to_done_s": round((search.finished_at - last_finished).total_seconds(), 3),
            "workers_seen": len(by_worker), "median_created_to_started_s": med(queue_wait),
            "median_started_to_finished_s": med(busy), "median_worker_idle_between_runs_s": med(idle),
            "mean_started_to_finished_s": round(statistics.fmean(busy), 4),
            "worker_time_per_point": worker_time,
            "breakdown": breakdown(rows, trace_events(stack, search_id))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.5, help="KT_REPLAY_DELAY_S: seconds per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batch-factors", type=int, nargs="+", default=[1],
                        help="batch_size = factor x workers (proposals in flight); one search per factor")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stem", default=None, help="result file name without suffix "
                        "(default <date>-cpu-search-distribution)")
    parser.add_argument("--wait-quiet", type=float, default=None, metavar="LOAD",
                        help="before each search, wait (up to --quiet-timeout s) for a 1-minute load average below LOAD")
    parser.add_argument("--quiet-timeout", type=float, default=600.0)
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed 4-point search that loads the driver's imports (optuna) first")
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
        "KT_REPLAY_DELAY_S": str(args.delay), "KT_REPLAY_NOISE": "1", "KT_LOG_FORMAT": "plain",
        "KT_SEARCH_TRACE": str(root / "search-trace.jsonl")})
    rows = []
    try:
        stack.start()
        client = stack.client()
        source = (ROOT / "kernels" / "variants" / "torch" / "dense_gemm_matmul.py").read_text()
        variant_id = client.post("/v1/variants", {"slot": "dense_gemm", "language": "torch", "source": source,
                                                  "config_space": SPACE, "provenance": {"author": "bench"}})["id"]
        if not args.no_warmup:  # the control worker imports the strategies on its first drive task
            run_once(stack, client, variant_id, 1, 4, 1)
        for factor in args.batch_factors:
            for n in args.workers:
                wait_quiet(args.wait_quiet, args.quiet_timeout)
                load_before = os.getloadavg()  # the machine is shared: say how busy it was
                row = run_once(stack, client, variant_id, n, args.points, factor * n)
                row["batch_factor"] = factor
                row["loadavg_before"] = [round(x, 2) for x in load_before]
                row["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
                row["ideal_s"] = round(args.points * args.delay / n, 2)
                row["efficiency"] = round(row["ideal_s"] / row["wall_s"], 3)
                row["overhead_per_run_s"] = round(row["wall_s"] * n / args.points - args.delay, 4)
                rows.append(row)
                b = row["breakdown"]
                print(f"{n} worker(s), batch {factor * n}: {row['wall_s']} s for {row['evaluations']} points "
                      f"(ideal {row['ideal_s']} s; mean gap {b['mean_gap_s']} s, parts "
                      f"{b.get('mean_waiting_gap_parts_s')}, {b['gaps_with_run_queued_ahead']} gaps queued ahead)",
                      flush=True)
    finally:
        for step in (stack.stop, redis.stop, drop):  # a teardown failure (the shared PostgreSQL restarted)
            try:                                    # must not lose the measurements
                step()
            except Exception as exc:
                print(f"teardown: {getattr(step, '__name__', step)} failed: {exc}", file=sys.stderr, flush=True)
    for r in rows:
        base = next((x["wall_s"] for x in rows if x["workers"] == 1 and x["batch_factor"] == r["batch_factor"]), None)
        r["speedup_vs_1"] = round(base / r["wall_s"], 2) if base else None

    date = dt.date.today().isoformat()
    header = {"date": date, "commit": git_commit(ROOT), "command": command, "machine": machine(),
              "points": args.points, "delay_s": args.delay, "strategy": "random",
              "batch_size": " | ".join(f"{f} x workers" if f > 1 else "= workers" for f in args.batch_factors),
              "poll_s": os.environ.get("KT_SEARCH_POLL_S") or f"{poll_seconds()} (default)",
              "warmup": not args.no_warmup,
              "stack": "API + driver (kt.control, threads) + Redis + PostgreSQL + N replay workers (solo pool)",
              "landscape": "synthetic_gemm_landscape(seed=1), fused_qkv_a 2112x7168, M=16 (roofline model)"}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / (args.stem or f"{date}-cpu-search-distribution")
    stem.with_suffix(".json").write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")
    lines = [f"# Search distribution: {args.points}-point search on 1..{max(args.workers)} replay workers", "",
             f"- date: {date}", f"- commit: {header['commit']}", f"- command: `{command}`",
             f"- machine: {header['machine']['cpu']}, {header['machine']['cpus']} CPUs, {header['machine']['system']}",
             f"- stack: {header['stack']}", f"- landscape: {header['landscape']}; each run sleeps {args.delay} s",
             f"- driver poll: KT_SEARCH_POLL_S={header['poll_s']}; warm-up search first: {header['warmup']}",
             "", "| workers | batch size | wall s | ideal s (points x delay / workers) | efficiency | speedup vs 1 "
             "| overhead per run s | driver CPU s | load avg before / after (1 min) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['workers']} | {r['batch_size']} | {r['wall_s']} | {r['ideal_s']} | {r['efficiency']:.0%} "
              f"| {r['speedup_vs_1']} | {r['overhead_per_run_s']} | {r['driver_cpu_s']} "
              f"| {r['loadavg_before'][0]} / {r['loadavg_after'][0]} |" for r in rows]
    lines += ["", "Where the workers' time goes, per point (ms; workers x wall / points = delay + the rest): "
              "in a run beyond the delay (claim, replay, result fields), between two runs of a worker, before a "
              "worker's first run (driver pickup, first proposals) and after its last (waiting for the others).", "",
              "| workers | batch size | overhead per run | in run beyond delay | between runs | before first run "
              "| after last run |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        w = r["worker_time_per_point"]
        lines.append(f"| {r['workers']} | {r['batch_size']} | {1000 * r['overhead_per_run_s']:.0f} "
                     f"| {1000 * (w['in_runs_s'] - args.delay):.0f} | {1000 * w['between_runs_s']:.0f} "
                     f"| {1000 * w['before_first_run_s']:.0f} | {1000 * w['after_last_run_s']:.0f} |")
    lines += ["", "Between two runs of one worker (means, ms): gaps where the worker waited on the driver, split "
              "at the driver's trace points, and gaps where its next run was already queued.", "",
              "| workers | batch size | gaps | mean gap | waiting on driver: n / mean | result -> driver sees it "
              "| driver reacts (tell, ask) | insert | enqueue | broker -> claim | queued ahead: n / mean |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ms = lambda x: "-" if x is None else f"{1000 * x:.0f}"  # noqa: E731
    for r in rows:
        b = r["breakdown"]
        p = b.get("mean_waiting_gap_parts_s") or {}
        lines.append(f"| {r['workers']} | {r['batch_size']} | {b['gaps']} | {ms(b['mean_gap_s'])} "
                     f"| {b['gaps_waiting_on_driver']} / {ms(b['mean_gap_waiting_on_driver_s'])} "
                     f"| {ms(p.get('result_to_driver'))} | {ms(p.get('driver_react'))} | {ms(p.get('insert'))} "
                     f"| {ms(p.get('enqueue'))} | {ms(p.get('broker_to_claim'))} "
                     f"| {b['gaps_with_run_queued_ahead']} / {ms(b['mean_gap_with_run_queued_ahead_s'])} |")
    lines += ["", "Result -> driver sees it, split at the driver's looks (ms): the run's row was committed after the "
              "last look that missed it started (a lower bound on record_result's time after its timestamp), "
              "waited for the look that found it, then for its row to be loaded and told; and the looks themselves.",
              "", "| workers | batch size | result -> driver p50 / p90 | committed (lower bound) | wait for the look "
              "| look -> told | looks | mean look interval | mean look |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        b = r["breakdown"]
        sp = b.get("mean_result_to_driver_split_s") or {}
        p50, p90 = b.get("result_to_driver_p50_p90_s") or (None, None)
        lines.append(f"| {r['workers']} | {r['batch_size']} | {ms(p50)} / {ms(p90)} | {ms(sp.get('commit_lower_bound'))} "
                     f"| {ms(sp.get('wait_for_look'))} | {ms(sp.get('look_to_told'))} | {b.get('looks', '-')} "
                     f"| {ms(b.get('mean_look_interval_s'))} | {ms(b.get('mean_look_s'))} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
