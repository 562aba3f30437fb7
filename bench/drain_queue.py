"""10,000 queued runs drained, none lost: API -> Redis -> celery workers -> PostgreSQL, all real.

The workers run on the replay device (workers/replay_device.py, KT_DEVICE=replay:<landscape>): each run
is answered from a recorded landscape instead of a sandboxed evaluation, so what is measured is the
service's own path per run (claim, lease heartbeat, result write, winner recompute, ack) and the
broker, not kernel time. The landscape here is synthetic (search.landscape.synthetic_gemm_landscape,
labelled so in the results) for tiny-moe's o_proj (N=256, K=128): 2,500 configs x 4 batch sizes.

Checked: every run has exactly one result write (a PostgreSQL audit trigger on runs), none is left
queued or running, Redis holds no message and no unacked delivery at the end.

    python bench/drain_queue.py                       # merges into bench/results/<date>-cpu-load.{json,md}
    python bench/drain_queue.py --workers 3 --timeout 1800
    python bench/drain_queue.py --max-drain-seconds 3000 --timeout 3600 \
        --results bench/results/2026-12-03-cpu-drain      # appends to that file's .json, rewrites its .md

Recorded with the figures: the rate over time (per minute: runs done, runs/s, the 1-minute load
average, how many PostgreSQL backends of the benchmark's database waited on a lock), the commit, the
machine and its load average at start and end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load_api import GEMM_SOURCE, Server, machine, merge_results, wait_quiet  # noqa: E402
from search.landscape import git_commit  # noqa: E402
from service.embedded import worker_command  # noqa: E402
from tests.support.live import AUDIT_DDL_PG  # noqa: E402
from tests.support.servers import RedisServer  # noqa: E402

TOTAL = 10_000
CONFIGS = 2500  # 1,250 per job x 4 batch sizes = 5,000 runs per job (the per-job limit): 2 jobs
MS = [1, 2, 4, 8]
O_PROJ = {"N": 256, "K": 128}  # tiny-moe o_proj at TP1 (kernels/slots/dense_gemm.py)


def queue_depth(redis_url: str) -> tuple[int, int]:
    """(messages waiting on kt.replay, messages delivered but unacked) as kombu's Redis transport keeps them."""
    import redis

    r = redis.Redis.from_url(redis_url)
    waiting = sum(int(r.llen(k)) for k in r.scan_iter(match="kt.replay*") if r.type(k) == b"list")
    unacked = int(r.hlen("unacked")) if r.exists("unacked") else 0
    return waiting, unacked


def lock_waiters(db_url: str) -> int:
    """Backends of the benchmark's database waiting on a lock now (the winner row lock shows up here)."""
    try:
        eng = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
        with eng.connect() as conn:
            n = conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND wait_event_type = 'Lock'")).scalar_one()
        eng.dispose()
        return int(n)
    except sa.exc.OperationalError:
        return -1


def explain_update_winner(db_url: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE, now, of what recording a result asks about the winner (db/queries/winners.py
    update_winner, replayed for the latest done run of the bucket with the most done runs, rolled back)
    and of a full recompute (recompute_winner, also rolled back): ms per statement, against the bucket's
    done runs so far."""
    from sqlalchemy import event, select
    from sqlalchemy.orm import Session

    from db.models import Run
    from db.queries.winners import recompute_winner, update_winner

    eng = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        captured.append((statement, parameters))

    def statements_of(fn: Any) -> list[tuple[str, Any]]:
        with Session(eng) as s:
            run = s.scalars(select(Run).where(Run.batch_bucket == bucket, Run.status == "done")
                            .order_by(Run.finished_at.desc()).limit(1)).one()
            captured.clear()
            event.listen(eng, "before_cursor_execute", capture)
            try:
                fn(s, run)
            finally:
                event.remove(eng, "before_cursor_execute", capture)
                s.rollback()
        return list(captured)

    def explain(stmts: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        out = []
        with eng.connect() as conn:
            for stmt, params in stmts:
                plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + stmt,
                                            params).scalar_one()[0]
                out.append({"statement": " ".join(stmt.split())[:60] + " ...", "ms": round(plan["Execution Time"], 3),
                            "plan": plan["Plan"]["Node Type"], "shared_hits": plan["Plan"].get("Shared Hit Blocks")})
            conn.rollback()
        return out

    try:
        with eng.connect() as conn:
            bucket, n = conn.execute(sa.text("SELECT batch_bucket, count(*) FROM runs WHERE status = 'done' "
                                             "GROUP BY batch_bucket ORDER BY count(*) DESC LIMIT 1")).one()
        per_result = explain(statements_of(lambda s, run: update_winner(s, run)))
        full = explain([st for st in statements_of(lambda s, run: recompute_winner(
            s, slot=run.slot, shape_key=run.shape_key, shape_name=run.shape_name, batch_bucket=run.batch_bucket,
            hardware=run.hardware)) if "ORDER BY" in st[0]])
        return {"bucket": bucket, "bucket_done_runs": n,
                "update_winner_ms": round(sum(x["ms"] for x in per_result), 3), "update_winner": per_result,
                "full_recompute_ms": round(sum(x["ms"] for x in full), 3), "full_recompute": full}
    finally:
        eng.dispose()


def timeline(samples: list[tuple[float, int, float, int]], step: float = 60.0) -> list[dict[str, Any]]:
    """Per ``step`` seconds from the first result: runs done by its end, runs/s within it, the highest
    1-minute load average and lock waiters sampled in it."""
    out: list[dict[str, Any]] = []
    start = 0.0
    while start < samples[-1][0]:
        pts = [x for x in samples if start <= x[0] <= start + step]
        if len(pts) > 1:
            (t0, n0, _, _), (t1, n1, _, _) = pts[0], pts[-1]
            out.append({"from_s": round(start), "to_s": round(t1), "done": n1,
                        "runs_per_s": round((n1 - n0) / max(1e-9, t1 - t0), 1),
                        "loadavg_1min_max": round(max(x[2] for x in pts), 2),
                        "lock_waiters_max": max(x[3] for x in pts)})
        start += step
    return out


def write_results(stem: Path, data: dict[str, Any]) -> Path:
    """Append this run to <stem>.json (a list of runs, kept in order) and render <stem>.md from it."""
    path = stem.with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(path.read_text()) if path.exists() else {"title": f"CPU queue drain, {data['started'][:10]}"}
    doc.setdefault("drain_queue", []).append(data)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    stem.with_suffix(".md").write_text(render_md(doc))
    return path


def render_md(doc: dict[str, Any]) -> str:
    """The .md of a --results file: each drain run, then the doc's "notes" (markdown kept in the .json, for
    measurements made outside this script), so that re-rendering keeps them."""
    lines = [f"# {doc['title']}", ""]
    for dq in doc["drain_queue"]:
        lines += ["## Queue drain (bench/drain_queue.py)", "", f"- command: `{dq['command']}`",
                  f"- started: {dq['started']}", f"- commit: `{dq['commit']}`",
                  *([f"- uncommitted in the checkout at start: {dq['uncommitted']}"] if dq.get("uncommitted") else []),
                  f"- machine: {dq['machine']}", f"- load average at end: {dq.get('loadavg_at_end')}", ""]
        lines += [f"- {k}: {v}" for k, v in dq["summary"].items()]
        if dq.get("timeline"):
            lines += ["", "Rate over time (from the first result):", "",
                      "| minute | s | runs done | runs/s in the minute | 1-min load avg (max) | lock waiters (max) |",
                      "| --- | --- | --- | --- | --- | --- |"]
            lines += [f"| {i + 1} | {r['from_s']}-{r['to_s']} | {r['done']} | {r['runs_per_s']} | "
                      f"{r['loadavg_1min_max']} | {r['lock_waiters_max']} |" for i, r in enumerate(dq["timeline"])]
        if dq.get("explain"):
            lines += ["", "Winner update per result, EXPLAIN ANALYZE at checkpoints of the drain (update_winner "
                      "replayed for the latest done run of the fullest bucket, and a full recompute, both rolled "
                      "back; statements: insert-if-missing, lock, rank the two runs, write):", "",
                      "| runs done | bucket | its done runs | update_winner: ms per statement (plan) | total ms "
                      "| full recompute ms |", "| --- | --- | --- | --- | --- | --- |"]
            for e in dq["explain"]:
                if "error" in e:
                    lines.append(f"| {e['runs_done']} | - | - | {e['error']} | - | - |")
                    continue
                per = ", ".join(f"{x['ms']} ({x['plan']})" for x in e["update_winner"])
                lines.append(f"| {e['runs_done']} | {e['bucket']} | {e['bucket_done_runs']} | {per} | {e['update_winner_ms']} "
                             f"| {e['full_recompute_ms']} |")
        lines.append("")
    for note in doc.get("notes", []):
        lines += [note.rstrip(), ""]
    return "\n".join(lines)


def counts(db_url: str, retry_s: float = 120.0) -> dict[str, int]:
    """Run counts; waits out a PostgreSQL restart (another job on a shared machine) for up to retry_s."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return _counts(db_url)
        except sa.exc.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def _counts(db_url: str) -> dict[str, int]:
    eng = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with eng.connect() as conn:
        out = {s: n for s, n in conn.execute(sa.text("SELECT status, count(*) FROM runs GROUP BY status"))}
        writes = conn.execute(sa.text("SELECT count(*), count(DISTINCT run_id) FROM kt_audit WHERE new_status = 'done'")).one()
        passed = conn.execute(sa.text("SELECT count(*) FROM runs WHERE verdict = 'passed'")).scalar_one()
    eng.dispose()
    return {**out, "result_writes": writes[0], "runs_with_result": writes[1], "passed": passed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up (and fail) after this many seconds")
    ap.add_argument("--max-drain-seconds", type=float, default=300.0,
                    help="stop draining after this long (from the first result) and account for what is left")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="first wait (at most this long) for the 1-minute load average to drop below 1.0")
    ap.add_argument("--results", type=Path, default=None, metavar="STEM",
                    help="append to STEM.json and rewrite STEM.md (e.g. bench/results/2026-12-03-cpu-drain) "
                         "instead of merging into bench/results/<date>-cpu-load.{json,md}")
    ap.add_argument("--note", default="", help="a line to keep with this run's figures")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    from search.landscape import synthetic_gemm_landscape

    if args.wait_quiet:
        print(f"1-minute load average before starting: {wait_quiet(args.wait_quiet):.2f}", flush=True)

    mach = machine()
    commit = git_commit(ROOT)  # at the start: the code that ran, whatever changes in the checkout meanwhile
    dirty = [line.strip() for line in subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                                                      text=True).stdout.splitlines() if line.strip()]
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")  # not when the figures are written
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"kt-drain-{os.getpid()}"
    space = {"n_chunks": [1], "tag": list(range(CONFIGS))}  # tag: distinct configs, ignored by the kernel
    landscape = synthetic_gemm_landscape(space, O_PROJ, MS, seed=7, command="bench/drain_queue.py").save(
        tmp / "landscape-o_proj.json")
    redis_srv = RedisServer(tmp / "redis").start()
    server = Server(env_extra={"KT_BROKER_URL": redis_srv.url, "KT_QUEUED_LEASE_SECONDS": "7200"}).start()
    workers: list[subprocess.Popen] = []
    summary: dict[str, Any] = {}
    failure: BaseException | None = None
    try:
        eng = sa.create_engine(server.db_url)
        with eng.begin() as conn:
            for ddl in AUDIT_DDL_PG:
                conn.execute(sa.text(ddl))
        eng.dispose()
        token = server.token()
        http = httpx.Client(base_url=server.url, timeout=300, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = http.post("/v1/variants", json={"slot": "dense_gemm", "language": "torch", "source": GEMM_SOURCE,
                                            "config_space": space, "provenance": {"author": "bench", "notes": "drain"}})
        r.raise_for_status()
        variant_id = r.json()["id"]

        # 1. 10,000 runs through the API onto Redis, before any worker exists.
        t0 = time.monotonic()
        jobs: list[int] = []
        for half in (list(range(0, CONFIGS // 2)), list(range(CONFIGS // 2, CONFIGS))):
            configs = [{"n_chunks": 1, "tag": t} for t in half]
            r = http.post("/v1/jobs", json={"variant_id": variant_id, "hardware": "replay", "shapes": ["o_proj"],
                                            "configs": configs,
                                            "deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": MS}})
            r.raise_for_status()
            assert r.json()["enqueued"], r.json()
            jobs.append(r.json()["job"]["id"])
        enqueue_s = time.monotonic() - t0
        # Statistics for the 10,000 new runs. Before the incremental winner update (migration 0006,
        # db/queries/winners.py update_winner) recompute_winner's failure check depended on them (a
        # nested loop over the whole bucket without them: 325 ms a result at 765 done runs); the
        # per-result statements now reach runs by primary key and the partial index only, whatever
        # the statistics. Kept so that runs are comparable. Autovacuum would analyze the table within
        # a minute; where it is off (this machine's PostgreSQL: conf.d/90-ci.conf) nothing ever does.
        eng = sa.create_engine(server.db_url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
        with eng.connect() as conn:
            autovacuum = conn.execute(sa.text("SHOW autovacuum")).scalar_one()
            conn.execute(sa.text("ANALYZE runs"))
        eng.dispose()
        summary["statistics"] = f"ANALYZE runs after queueing (autovacuum is {autovacuum} on this server)"
        waiting, _ = queue_depth(redis_srv.url)
        total = sum(http.get(f"/v1/jobs/{j}").json()["progress"]["total"] for j in jobs)
        summary["runs queued via the API"] = f"{total} runs in {len(jobs)} jobs, created and enqueued in " \
            f"{enqueue_s:.1f} s ({total / enqueue_s:.0f} runs/s); messages on Redis: {waiting}"
        assert total == TOTAL and waiting == TOTAL, (total, waiting)

        # 2. Drain with replay workers; the clock starts at the first result (no worker start-up).
        env = {**os.environ, "KT_DATABASE_URL": server.db_url, "KT_BROKER_URL": redis_srv.url,
               "KT_DATA_DIR": str(server.data_dir), "KT_DEVICE": f"replay:{landscape}", "KT_LOG_FORMAT": "plain"}
        for i in range(args.workers):
            workers.append(subprocess.Popen(worker_command("replay", name=f"drain{i}"), cwd=ROOT, env=env,
                                            stdout=open(server.data_dir / f"worker{i}.log", "ab"),
                                            stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + args.timeout
        while counts(server.db_url).get("done", 0) == 0:
            assert time.monotonic() < deadline, "no run finished"
            time.sleep(0.2)
        t0 = time.monotonic()
        samples: list[tuple[float, int]] = []
        detail: list[tuple[float, int, float, int]] = []  # (s, done, 1-min load average, lock waiters)
        checkpoints = [1000, 2500, 5000, 7500, TOTAL]  # runs done: EXPLAIN ANALYZE the winner update there
        explains: list[dict[str, Any]] = []
        summary["winner update, EXPLAIN ANALYZE"] = explains
        while True:
            c = counts(server.db_url)
            samples.append((time.monotonic() - t0, c.get("done", 0)))
            detail.append((*samples[-1], os.getloadavg()[0], lock_waiters(server.db_url)))
            if checkpoints and c.get("done", 0) >= checkpoints[0]:
                while checkpoints and c.get("done", 0) >= checkpoints[0]:
                    checkpoints.pop(0)
                try:
                    explains.append({"runs_done": c.get("done", 0), **explain_update_winner(server.db_url)})
                except Exception as exc:  # a figure missing is no reason to lose the drain
                    explains.append({"runs_done": c.get("done", 0), "error": f"{type(exc).__name__}: {exc}"[:300]})
            if c.get("done", 0) == TOTAL or time.monotonic() - t0 > args.max_drain_seconds:
                break
            assert time.monotonic() < deadline, f"drain stalled: {c}"
            time.sleep(1.0)
        drain_s = time.monotonic() - t0
        complete = samples[-1][1] == TOTAL
        if not complete:  # warm shutdown: each worker finishes (and acks) the run it holds, then exits
            for w in workers:
                os.killpg(w.pid, signal.SIGTERM)
            for w in workers:
                w.wait(timeout=120)
        else:  # every message consumed and acked (a redelivery would show as unacked or waiting)
            while time.monotonic() < deadline and queue_depth(redis_srv.url) != (0, 0):
                time.sleep(0.5)
        waiting, unacked = queue_depth(redis_srv.url)
        final = counts(server.db_url)
        done, queued = final.get("done", 0), final.get("queued", 0)
        duplicates = final["result_writes"] - final["runs_with_result"]
        # Lost = a run neither done nor still backed by a message the broker will deliver.
        lost = TOTAL - done - min(queued, waiting + unacked)
        def rate(a: float, b: float) -> float:
            pts = [(t, n) for t, n in samples if a <= t <= b]
            return (pts[-1][1] - pts[0][1]) / max(1e-9, pts[-1][0] - pts[0][0]) if len(pts) > 1 else float("nan")
        first, last = rate(0, 60), rate(drain_s - 60, drain_s)
        summary["timeline"] = timeline(detail)
        per_minute = [r["runs_per_s"] for r in summary["timeline"]]
        summary["drained (measured)"] = (f"{done} of {TOTAL} runs by {args.workers} replay workers in {drain_s:.0f} s "
                                         f"= {done / drain_s:.1f} runs/s overall; {first:.1f} runs/s in the first "
                                         f"minute, {last:.1f} runs/s in the last")
        summary["accounting"] = (f"done={done} passed={final['passed']} queued={queued} running={final.get('running', 0)} "
                                 f"result_writes={final['result_writes']} lost={lost} duplicates={duplicates}; "
                                 f"Redis waiting={waiting} unacked={unacked}")
        if per_minute:
            waits = [r["lock_waiters_max"] for r in summary["timeline"]]
            summary["rate over time"] = (f"per minute: min {min(per_minute)}, median "
                                         f"{sorted(per_minute)[len(per_minute) // 2]}, max {max(per_minute)} runs/s "
                                         f"over {len(per_minute)} minutes (table below); lock waiters sampled "
                                         f"each second: max {max(waits)} in any minute")
        if not complete:
            summary["extrapolated (not measured)"] = (
                f"the remaining {TOTAL - done} runs at the last minute's {last:.1f} runs/s: "
                f"{(TOTAL - done) / last / 60:.0f} more minutes if that rate held (see finding)"
                if last > 0 else "no progress in the last minute")
            summary["finding"] = (f"rate {first:.1f} runs/s in the first minute, {last:.1f} in the last "
                                  f"({'falling' if last < 0.7 * first else 'steady'})")
        assert lost == 0 and duplicates == 0 and final.get("running", 0) == 0, summary
        assert not complete or (waiting, unacked) == (0, 0), summary
        summary["landscape"] = f"synthetic (roofline model, not a measurement): {landscape.name}, o_proj {O_PROJ}, Ms {MS}"
        summary["note"] = ("replay answers skip the sandbox: a real CPU evaluation costs ~1-3 s of a worker "
                           "(tests/test_e2e_service.py), so 10,000 real CPU runs would take hours on 2 cores")
        if args.note:
            summary["note (run)"] = args.note
        summary["result"] = ("ok: all 10,000 drained" if complete else f"stopped by --max-drain-seconds at {done}/{TOTAL}") \
            + ", none lost, no duplicates"
    except BaseException as exc:  # the partial figures are still worth keeping, marked as a failure
        failure = exc
        summary["result"] = f"FAILED: {type(exc).__name__}: {exc}"[:2000]
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
        server.stop()
        redis_srv.stop()
    tl = summary.pop("timeline", [])
    explains = summary.pop("winner update, EXPLAIN ANALYZE", [])
    if explains:
        summary["winner update, EXPLAIN ANALYZE (table below)"] = "; ".join(
            f"{e['bucket_done_runs']} done runs in bucket {e['bucket']}: {e['update_winner_ms']} ms per result "
            f"(full recompute {e['full_recompute_ms']} ms)" if "error" not in e else f"{e['runs_done']}: {e['error']}"
            for e in explains)
    for k, v in summary.items():
        print(f"{k}: {v}")
    for r in tl:
        print(f"  {r}")
    if not args.no_write:
        data = {"command": "python bench/drain_queue.py " + " ".join(sys.argv[1:]), "commit": commit,
                "uncommitted": dirty, "machine": mach, "started": started, "loadavg_at_end": os.getloadavg(),
                "summary": summary}
        if args.results is not None:
            path = write_results(args.results, {**data, "timeline": tl, "explain": explains})
        else:
            path = merge_results("drain_queue", data)
        print(f"wrote {path} and {path.with_suffix('.md')}")
    if failure is not None:
        raise failure
    return 0


if __name__ == "__main__":
    sys.exit(main())
