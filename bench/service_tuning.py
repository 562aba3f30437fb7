"""Tune decode-path slots through the service itself on a GPU host, then write the results file
from the service's own winners table.

Starts the embedded stack (API + one Celery worker on the local GPU, SQLite + filesystem broker:
the lent H200 has no Redis), submits every variant of a plan over REST, runs one evaluation job
per variant, waits, and writes bench/results/<date>-<hw>-<what>.json/.md from GET /v1/winners and
GET /v1/leaderboard. The SQLite file is copied next to the results as the evidence behind them.
Stopped by SIGTERM (a session script's `timeout`), it stops the stack and still copies the DB, with every
run finished so far: `--resume-db` on that copy and a plan of no runs writes the table and wheel later.

    python bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 --out $OUT
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels.variant_meta import declared_literals, declared_space  # noqa: E402
from search.landscape import git_commit  # noqa: E402
from service.client import ApiError, Client  # noqa: E402
from service.embedded import EmbeddedStack, exit_on_sigterm  # noqa: E402

SMALL_M = (1, 2, 4, 8, 16)
SHIPPED_AUTHOR = "kerneltune-shipped"
SHIPPED_NOTE = "shipped variant "  # + the file: how a variant this script submits names its source


def token_for(data_dir: Path) -> str | None:
    path = data_dir / "admin-token"
    return path.read_text().strip() if path.exists() else os.environ.get("KT_TOKEN")


def item_deployment(plan: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """The deployment a plan item's job runs with: the plan's, or its batch sizes narrowed by the item (a
    kernel known to lose beyond M <= 2 need not spend device time there)."""
    return {**plan["deployment"], **({"batch_sizes": item["batch_sizes"]} if item.get("batch_sizes") else {})}


def settle(client: Client, jobs: list[dict[str, Any]], grace_s: float) -> int:
    """A cancel skips queued runs; the ones already running finish (db.queries.jobs.cancel_job). Wait up to
    grace_s for them, so the results file and DB copy hold their verdicts, not `running` (seen on an H100: 4 runs
    in flight when the stack stopped). Returns how many were still running."""
    end = time.monotonic() + grace_s
    while True:
        running = sum(client.get(f"/v1/jobs/{j['job_id']}")["progress"]["running"] for j in jobs)
        if not running or time.monotonic() >= end:
            break
        time.sleep(1)
    if running:
        print(f"{running} runs still running {grace_s:g} s after the deadline: left as they are", flush=True)
    return running


def run_plan(client: Client, plan: dict[str, Any], hardware: str, deadline: float,
             grace_s: float = 30.0) -> list[dict[str, Any]]:
    jobs = []
    # A shipped file edited since an earlier session (of a resumed DB) is a new variant whose parent is the
    # file's latest earlier version: a transfer search then starts from what that version measured.
    earlier = shipped_variant_files(client.get("/v1/variants", author=SHIPPED_AUTHOR, limit=1000))
    latest = {f: int(v) for v, f in sorted(earlier.items(), key=lambda vf: int(vf[0]))}  # the highest id wins
    for item in plan["variants"]:
        path = REPO / item["file"]
        source = path.read_text()
        lit = declared_literals(source)
        variant = client.post("/v1/variants", {
            "slot": item["slot"], "language": item["language"], "source": source,
            "config_space": declared_space(source) or {},
            "provenance": {"author": SHIPPED_AUTHOR, "agent": None, "parent_id": latest.get(item["file"]),
                           "notes": f"{SHIPPED_NOTE}{item['file']}"},
            **({"declares_library": True} if lit.get("USES_LIBRARY") else {}),
        })
        try:
            jobs.append(submit_item(client, plan, item, variant["id"], hardware))
        except ApiError as exc:
            if exc.status != 422:
                raise
            # the service refused this item's request (configs outside the file's space, say): the rest of the plan
            # still runs, and the results file keeps the refusal
            jobs.append({"file": item["file"], "variant_id": variant["id"], "refused": str(exc)})
            print(f"refused {item['file']}: {exc}", flush=True)
    return watch(client, jobs, deadline, grace_s)


def submit_item(client: Client, plan: dict[str, Any], item: dict[str, Any], variant_id: int,
                hardware: str) -> dict[str, Any]:
    """One plan item as a job of its configs or as the service's own search (POST /v1/searches): what run_plan
    watches of it."""
    if item.get("search"):
        search = client.post("/v1/searches", search_request(plan, item, variant_id, hardware))
        print(f"submitted {item['file']}: variant {variant_id} search {search['id']} ({search['strategy']}, "
              f"{search['budget']}) job {search['job_id']}", flush=True)
        return {"file": item["file"], "variant_id": variant_id, "job_id": search["job_id"], "search_id": search["id"],
                "strategy": search["strategy"], "budget": search["budget"]}
    created = client.post("/v1/jobs", {
        "variant_id": variant_id, "deployment": item_deployment(plan, item), "hardware": hardware,
        "configs": item.get("configs", "all"), **({"shapes": item["shapes"]} if item.get("shapes") else {}),
    })
    print(f"submitted {item['file']}: variant {variant_id} job {created['job']['id']} ({created['runs']} runs)",
          flush=True)
    return {"file": item["file"], "variant_id": variant_id, "job_id": created["job"]["id"], "runs": created["runs"]}


def watch(client: Client, jobs: list[dict[str, Any]], deadline: float, grace_s: float) -> list[dict[str, Any]]:
    """Waits for the submitted jobs and searches until the deadline, cancels what is left, and records each one's
    end state."""
    # A job is watched at /v1/jobs/N, a search (whose runs form a job of their own) at /v1/searches/N.
    submitted = [j for j in jobs if "job_id" in j]
    pending = {f"/v1/searches/{j['search_id']}" if "search_id" in j else f"/v1/jobs/{j['job_id']}" for j in submitted}
    while pending and time.monotonic() < deadline:
        for path in sorted(pending):
            doc = client.get(path)
            if doc["state"] in ("done", "cancelled", "failed"):  # "failed": a search's driver gave up
                pending.discard(path)
                print(finished_line(path, doc), flush=True)
        time.sleep(2)
    for path in pending:  # out of time: what ran is kept, the rest is cancelled and reported
        client.post(f"{path}/cancel")
        print(f"{path} cancelled at the deadline", flush=True)
    if pending:
        settle(client, submitted, grace_s)
    for j in submitted:
        j["state"] = client.get(f"/v1/jobs/{j['job_id']}")["state"]
        if "search_id" in j:
            search = client.get(f"/v1/searches/{j['search_id']}")
            j["search"] = {"state": search["state"], "evaluations": search["evaluations"],
                           "targets": [{k: t[k] for k in ("label", "evaluations", "full_evaluations", "failed",
                                                          "gpu_seconds", "best", "stop_reason", "history")}
                                       for t in search["targets"]]}
    return jobs


def search_request(plan: dict[str, Any], item: dict[str, Any], variant_id: int, hardware: str) -> dict[str, Any]:
    """POST /v1/searches body of a plan item {"search": {"strategy", "budget", "batch_size", "seed", "options"}}."""
    return {"variant_id": variant_id, "deployment": item_deployment(plan, item), "hardware": hardware,
            **({"shapes": item["shapes"]} if item.get("shapes") else {}), **item["search"]}


def finished_line(path: str, doc: dict[str, Any]) -> str:
    if path.startswith("/v1/searches/"):
        return f"search {doc['id']} {doc['state']}: {doc['evaluations']} evaluations; {search_best_line(doc)}"
    return f"job {doc['id']} {doc['state']}: {doc['progress']['by_verdict']}"


def search_best_line(search: dict[str, Any]) -> str:
    parts = []
    for t in search["targets"]:
        b = t.get("best") or {}
        sp = b.get("speedup")
        parts.append(f"{t['label']}: best {b.get('median_us', float('nan')):.2f} us"
                     f"{'' if sp is None else f' ({sp:.2f}x)'} after {t['evaluations']}" if b else f"{t['label']}: none")
    return "; ".join(parts)


def shipped_variant_files(variants: list[dict[str, Any]]) -> dict[str, str]:
    """variant id -> shipped file for every variant this script ever submitted to the DB (run_plan's notes
    name the file): a resumed DB's winners table holds earlier sessions' variants too, and the results
    file must say what each of them is (bench/results_files.py reads this map)."""
    return {str(v["id"]): v["notes"][len(SHIPPED_NOTE):] for v in variants if v["notes"].startswith(SHIPPED_NOTE)}


def resume_db(src: Path, dst: Path) -> None:
    """Copy an earlier service DB in through SQLite's backup API (the API migrates it on start)."""
    if dst.exists():
        raise SystemExit(f"--resume-db: {dst} exists; give a fresh --data-dir")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(src) as s, sqlite3.connect(dst) as d:
        s.backup(d)


def export_winners(client: Client, hardware: str, model: str, out: Path) -> dict[str, Any]:
    """POST /v1/exports over what qualifies (--allow-partial), and the wheel next to the results:
    the session script installs it on the same device and runs its self-test."""
    try:
        res = client.post("/v1/exports", {"hardware": hardware, "model": model, "allow_partial": True,
                                          "version": "0.1.0"})
    except ApiError as exc:
        print(f"export refused: {exc}", flush=True)
        return {"refused": str(exc)}
    out.mkdir(parents=True, exist_ok=True)
    client.download(f"/v1/exports/{res['export_id']}/wheel", out / res["wheel_filename"])
    print(f"exported {res['wheel_filename']}: {res['entries']} entries, {res['stock_entries']} stock, "
          f"{len(res['skipped'])} skipped, {len(res['untuned'])} buckets never timed, "
          f"{len(res['unchecked'])} entries serving batch sizes no run checked", flush=True)
    return {k: res.get(k) for k in ("export_id", "wheel_filename", "sha256", "entries", "stock_entries", "skipped",
                                    "untuned", "unchecked", "slower", "aot")}


def bucket_checks(client: Client, hardware: str, model: str, budget_s: float) -> dict[str, Any]:
    """Each winner checked at the M of its bucket no run measured (POST /v1/winners/bucket-checks: short runs through
    the workers), waited for up to budget_s; a winner that fails one loses its bucket before the table is read."""
    made = client.post("/v1/winners/bucket-checks", {"hardware": hardware, "model": model})
    jobs = [{"job_id": j["job"]["id"], "variant_id": j["job"]["variant_id"], "runs": j["runs"]} for j in made["jobs"]]
    print(f"bucket checks: {made['entries']} winners, {made['runs']} runs in {len(jobs)} jobs", flush=True)
    watch(client, jobs, deadline=time.monotonic() + budget_s, grace_s=20)
    verdicts: dict[str, int] = {}
    for j in jobs:
        for verdict, n in client.get(f"/v1/jobs/{j['job_id']}")["progress"]["by_verdict"].items():
            if n:
                verdicts[verdict] = verdicts.get(verdict, 0) + n
    print(f"bucket checks: {verdicts}", flush=True)
    return {"entries": made["entries"], "runs": made["runs"], "jobs": jobs, "by_verdict": verdicts}


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarise(winners: list[dict[str, Any]], board: list[dict[str, Any]]) -> dict[str, Any]:
    """Per slot and shape: the winner per bucket (or stock), and the geometric-mean speedup at M<=16."""
    best_by_m: dict[tuple[str, str, int], dict[str, Any]] = {}
    for g in board:
        if g["entries"]:
            best_by_m[(g["slot"], g["shape_name"], g["m"])] = g["entries"][0]
    per_shape: dict[str, dict[str, Any]] = {}
    for w in winners:
        key = f"{w['slot']}/{w['shape_name']}"
        ev = w.get("evidence") or {}
        entry = per_shape.setdefault(key, {"buckets": {}, "small_m_speedups": []})
        entry["buckets"][w["batch_bucket"]] = {
            "winner": "stock" if w["is_stock"] else f"variant {ev.get('variant_id')} ({ev.get('language')})",
            "config": None if w["is_stock"] else ev.get("config"),
            "median_us": ev.get("median_us"), "stock_us": ev.get("baseline_median_us"),
            "speedup": 1.0 if w["is_stock"] else ev.get("speedup"),
            "ci": None if w["is_stock"] else [ev.get("speedup_ci_lo"), ev.get("speedup_ci_hi")],
            "frac_of_floor": ev.get("frac_of_floor"), "m": ev.get("m"),
            # the incumbent it displaced, timed in the same rounds (the worker's control): its time / the winner's
            "vs_incumbent": None if w["is_stock"] or ev.get("vs_control") is None else
            [ev.get("vs_control"), ev.get("vs_control_ci_lo"), ev.get("vs_control_ci_hi")],
        }
    for (slot, shape, m), e in best_by_m.items():
        if m in SMALL_M:
            entry = per_shape.setdefault(f"{slot}/{shape}", {"buckets": {}, "small_m_speedups": []})
            # A bucket whose best run does not beat stock falls back to stock: count it as 1.0x.
            entry["small_m_speedups"].append(max(1.0, e["speedup"]) if e["beats_stock"] else 1.0)
    for entry in per_shape.values():
        entry["geomean_speedup_m1_16"] = geomean(entry.pop("small_m_speedups"))
    return per_shape


def markdown(header: dict[str, Any], summary: dict[str, Any]) -> str:
    lines = [f"# {header['what']}", "", f"- date: {header['date']}; device: {header['device']}; "
             f"commit: `{header['commit']}`", f"- command: `{header['command']}`",
             "- source: the service's winners table (GET /v1/winners) after the plan's jobs ran on the "
             "worker; speedups are against the stock kernel timed in the same child process; a winner timed beside the "
             "incumbent it displaced gives that incumbent's time / its own, same rounds (its us then comes from another "
             "session than the incumbent's, and the table ranks it by the head-to-head ratio)", "",
             "| slot/shape | bucket | winner | us | stock us | speedup [95% CI] | of HBM floor | vs incumbent [95% CI] |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, entry in sorted(summary.items()):
        for bucket, b in sorted(entry["buckets"].items(), key=lambda kv: int(kv[0].split("-")[0])):
            ci = "-" if not b["ci"] else f"[{b['ci'][0]:.2f}, {b['ci'][1]:.2f}]"
            us = "-" if b["median_us"] is None else f"{b['median_us']:.2f}"
            stock = "-" if b["stock_us"] is None else f"{b['stock_us']:.2f}"
            floor = "-" if b["frac_of_floor"] is None else f"{100 * b['frac_of_floor']:.0f}%"
            sp = "-" if b["speedup"] is None else f"{b['speedup']:.2f}"
            inc = b.get("vs_incumbent")
            vs = "-" if not inc else (f"{inc[0]:.3f}" + ("" if inc[1] is None else f" [{inc[1]:.3f}, {inc[2]:.3f}]"))
            lines.append(f"| {key} | {bucket} | {b['winner']} | {us} | {stock} | {sp} {ci} | {floor} | {vs} |")
        gm = entry.get("geomean_speedup_m1_16")
        lines.append(f"| {key} | geomean M=1-16 | | | | {'-' if gm is None else f'{gm:.2f}x'} | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--what", default="decode-tuning")
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=420, help="stop waiting for jobs after this long")
    ap.add_argument("--out", default=os.environ.get("OUT", str(REPO / "bench" / "results")))
    ap.add_argument("--data-dir", default="/tmp/kt-service")
    ap.add_argument("--port", type=int, default=8791, help="the embedded API's port")
    ap.add_argument("--export", action="store_true", help="also export the winners as a wheel into --out")
    ap.add_argument("--resume-db", help="start from a copy of this service DB (an earlier session's SQLite file), so "
                                        "its runs and winners stay in the one table; --data-dir must hold no DB yet")
    ap.add_argument("--workers", type=int, default=1,
                    help="worker processes on the device: they compile and check side by side, and "
                         "workers/gpu_lock.py keeps their timed phases apart")
    ap.add_argument("--bucket-checks-s", type=float, default=0,
                    help="after the plan, check each winner at the M of its bucket no run measured, waiting up to this "
                         "long (0: no bucket checks)")
    args = ap.parse_args()

    plan = json.loads(Path(args.plan).read_text())
    data_dir = Path(args.data_dir)
    # A later run on the same port would otherwise talk to this one's stack (seen on the H200)
    exit_on_sigterm()
    if args.resume_db:
        resume_db(Path(args.resume_db), data_dir / "kerneltune.db")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    stem = f"{date}-{args.hardware}-{args.what}"
    t0 = time.monotonic()
    stack = EmbeddedStack(data_dir, port=args.port, hardware=args.hardware, workers=args.workers,
                          env_extra={"KT_DEVICE": args.device, "KT_RUN_TIMEOUT_S": os.environ.get("KT_RUN_TIMEOUT_S", "150")})
    try:
        stack.start()
        client = Client(stack.url, token=token_for(data_dir))
        jobs = run_plan(client, plan, args.hardware, deadline=t0 + args.budget_s)
        checks = (bucket_checks(client, args.hardware, plan["deployment"]["spec"], args.bucket_checks_s)
                  if args.bucket_checks_s > 0 else None)
        winners = client.get("/v1/winners", hardware=args.hardware)
        variant_files = shipped_variant_files(client.get("/v1/variants", author=SHIPPED_AUTHOR, limit=1000))
        board = client.get("/v1/leaderboard", hardware=args.hardware, per_group=3)
        export = export_winners(client, args.hardware, plan["deployment"]["spec"], Path(args.out)) if args.export else None
        fingerprints = {
            (w.get("evidence") or {}).get("fingerprint", {}).get("id"): (w.get("evidence") or {}).get("fingerprint")
            for w in winners if w.get("evidence")}
    except ApiError as exc:
        raise SystemExit(f"service error: {exc}")
    finally:
        stack.stop()
        copy_db(data_dir, out / f"{stem}.sqlite")
    fp = next((f for f in fingerprints.values() if f), {}) or {}
    header = {"what": f"kerneltune service tuning: {args.what}", "date": date,
              "device": (fp.get("fields") or {}).get("name", args.device), "fingerprint": fp,
              "commit": git_commit(REPO), "command": " ".join(sys.argv), "plan": plan, "jobs": jobs,
              "variant_files": variant_files, "export": export, "bucket_checks": checks,
              "wall_s": round(time.monotonic() - t0, 1)}
    summary = summarise(winners, board)
    (out / f"{stem}.json").write_text(json.dumps({**header, "summary": summary, "winners": winners,
                                                  "leaderboard": board}, indent=1, default=str))
    (out / f"{stem}.md").write_text(markdown(header, summary))
    print(markdown(header, summary))


def copy_db(data_dir: Path, dst: Path) -> None:
    """The service DB next to the results, through SQLite's backup API: a plain file copy misses what is still in
    the WAL (seen on the H200: the copied file showed finished jobs as queued)."""
    src_path = data_dir / "kerneltune.db"
    if not src_path.exists():
        return
    dst.unlink(missing_ok=True)
    with sqlite3.connect(src_path) as src, sqlite3.connect(dst) as d:
        src.backup(d)


if __name__ == "__main__":
    main()
