"""Load on the API over loopback: job-status reads and variant submissions against a real uvicorn
API backed by PostgreSQL. Bounded: each phase stops after --requests requests or --seconds seconds.

    python bench/load_api.py                       # writes bench/results/<date>-cpu-load.{json,md}
    python bench/load_api.py --concurrency 16 --api-workers 2

The load generator is one asyncio process (httpx) on the same machine as the server: its own CPU
use is measured and reported, since on 2 cores it competes with the API it measures.
Targets (this 2-core machine): status reads >= 300 req/s at p99 <= 100 ms; submissions >= 100/s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
PG_ADMIN_URL = os.environ.get("KT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
GEMM_SOURCE = (ROOT / "kernels/variants/torch/dense_gemm_matmul.py").read_text()
TARGETS = {"status_reads": {"rps": 300, "p99_ms": 100}, "variant_submissions": {"rps": 100}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
        return sha + ("+dirty" if dirty.strip() else "")
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"hostname": platform.node(), "cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "kernel": platform.release(), "loadavg_at_start": os.getloadavg()}


# --- a live API on PostgreSQL ---------------------------------------------------------------------

@dataclass
class Server:
    """A fresh PostgreSQL database and a uvicorn API on it (filesystem broker under a temp dir)."""

    api_workers: int = 1
    env_extra: dict[str, str] = field(default_factory=dict)
    port: int = 0
    db_url: str = ""
    data_dir: Path = Path()
    proc: subprocess.Popen | None = None
    _db_name: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        self._db_name = f"kt_bench_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{self._db_name}"'))
        self.db_url = admin.url.set(database=self._db_name).render_as_string(hide_password=False)
        admin.dispose()
        self.data_dir = Path(tempfile.mkdtemp(prefix="kt-bench-"))
        self.port = free_port()
        env = {**os.environ, "KT_DATABASE_URL": self.db_url, "KT_DATA_DIR": str(self.data_dir),
               "KT_BROKER_URL": os.environ.get("KT_BENCH_BROKER_URL", "filesystem://"), **self.env_extra}
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", "127.0.0.1",
               "--port", str(self.port), "--log-level", "warning", "--no-access-log", "--workers", str(self.api_workers)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(self.data_dir / "api.log", "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/v1/ready", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"API exited: {(self.data_dir / 'api.log').read_text()[-2000:]}")
            time.sleep(0.3)
        raise RuntimeError("API not ready after 120 s")

    def token(self) -> str | None:
        """<data_dir>/admin-token once auth writes one; else an admin token made in the DB; else none."""
        path = self.data_dir / "admin-token"
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        try:
            from db.queries import tokens as tq
        except ImportError:
            return None
        eng = sa.create_engine(self.db_url)
        try:
            if not sa.inspect(eng).has_table("api_tokens"):
                return None
            with sa.orm.Session(eng) as session:
                secret = tq.create_token(session, name=f"bench-{uuid.uuid4().hex[:6]}", scopes=["admin"])[1]
                session.commit()
            return secret
        finally:
            eng.dispose()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self._db_name:
            admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self._db_name}" WITH (FORCE)'))
            admin.dispose()
        shutil.rmtree(self.data_dir, ignore_errors=True)


# --- the load ---------------------------------------------------------------------------------------

def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    i = min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))
    return sorted_ms[i]


async def closed_loop(name: str, request: Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]],
                      client: httpx.AsyncClient, concurrency: int, max_requests: int, max_seconds: float,
                      ok: tuple[int, ...]) -> dict[str, Any]:
    """``concurrency`` clients each send their next request when the last one answered, until the
    request budget or the time budget is spent. Latency is per request, send to full body read."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    issued = 0
    stop_at = time.monotonic() + max_seconds
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)

    async def one_client() -> None:
        nonlocal issued
        while issued < max_requests and time.monotonic() < stop_at:
            i = issued
            issued += 1
            t0 = time.perf_counter()
            try:
                resp = await request(client, i)
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            statuses[str(resp.status_code)] = statuses.get(str(resp.status_code), 0) + 1

    t0 = time.monotonic()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    lat = sorted(latencies)
    good = sum(n for s, n in statuses.items() if int(s) in ok)
    return {
        "phase": name, "concurrency": concurrency, "requests": len(latencies) + sum(errors.values()),
        "ok": good, "statuses": statuses, "transport_errors": errors, "wall_s": round(wall, 2),
        "rps": round(good / wall, 1) if wall else 0.0,
        "p50_ms": round(percentile(lat, 50), 2), "p90_ms": round(percentile(lat, 90), 2),
        "p99_ms": round(percentile(lat, 99), 2), "max_ms": round(lat[-1], 2) if lat else None,
        "loadgen_cpu_s": round((cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime), 2),
    }


async def run_load(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    token = server.token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30, limits=limits) as client:
        r = await client.post("/v1/variants", json={
            "slot": "dense_gemm", "language": "torch", "source": GEMM_SOURCE, "config_space": {"n_chunks": [1, 2, 4]},
            "provenance": {"author": "bench"}})
        r.raise_for_status()
        variant_id = r.json()["id"]
        # A job with runs to count (a queue no worker reads: nothing is evaluated, the reads stay stable).
        r = await client.post("/v1/jobs", json={"variant_id": variant_id, "hardware": "h200", "configs": "all",
                                                "deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1, 2, 4, 8]}})
        r.raise_for_status()
        job_id = r.json()["job"]["id"]
        for _ in range(50):  # warm the connection pool and the server's caches
            await client.get(f"/v1/jobs/{job_id}")
        run_tag = uuid.uuid4().hex[:8]
        out = [
            await closed_loop("status_reads", lambda c, i: c.get(f"/v1/jobs/{job_id}"), client, args.concurrency,
                              args.requests, args.seconds, ok=(200,)),
            await closed_loop("variant_submissions", lambda c, i: c.post("/v1/variants", json={
                "slot": "dense_gemm", "language": "torch", "source": GEMM_SOURCE + f"# load {run_tag} {i}\n",
                "config_space": {"n_chunks": [1, 2, 4]}, "provenance": {"author": "bench", "notes": f"load {i}"}}),
                client, args.concurrency, args.requests, args.seconds, ok=(201,)),
        ]
    out[0]["job_runs"] = r.json()["runs"]
    return out


# --- results ------------------------------------------------------------------------------------------

def results_path(date: str) -> Path:
    return RESULTS / f"{date}-cpu-load.json"


def merge_results(section: str, data: dict[str, Any]) -> Path:
    """bench/load_api.py and bench/drain_queue.py share one file per day: each writes its section."""
    date = dt.date.today().isoformat()
    path = results_path(date)
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = json.loads(path.read_text()) if path.exists() else {"date": date}
    doc.setdefault(section, []).append(data)  # every run of the day is kept, in order
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.with_suffix(".md").write_text(render_md(doc))
    return path


def render_md(doc: dict[str, Any]) -> str:
    lines = [f"# CPU load figures, {doc['date']}", ""]
    for la in doc.get("load_api", []):
        lines += ["## API load (bench/load_api.py)", "",
                  f"- command: `{la['command']}`", f"- started: {la['started']}", f"- commit: `{la['commit']}`",
                  f"- machine: {la['machine']}", f"- load average at end: {la.get('loadavg_at_end')}",
                  f"- setup: {la['setup']}", "",
                  "| phase | concurrency | requests | ok | req/s | p50 ms | p99 ms | max ms | loadgen CPU s | target | met |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for p in la["phases"]:
            lines.append(f"| {p['phase']} | {p['concurrency']} | {p['requests']} | {p['ok']} | {p['rps']} | "
                         f"{p['p50_ms']} | {p['p99_ms']} | {p['max_ms']} | {p['loadgen_cpu_s']} | "
                         f"{p['target']} | {'yes' if p['met'] else 'NO'} |")
        lines.append("")
    for dq in doc.get("drain_queue", []):
        lines += ["## Queue drain (bench/drain_queue.py)", "", f"- command: `{dq['command']}`",
                  f"- started: {dq['started']}", f"- commit: `{dq['commit']}`", f"- machine: {dq['machine']}", ""]
        lines += [f"- {k}: {v}" for k, v in dq["summary"].items()]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=6000, help="per phase")
    ap.add_argument("--seconds", type=float, default=20.0, help="per phase")
    ap.add_argument("--api-workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    mach = machine()
    server = Server(api_workers=args.api_workers).start()
    try:
        phases = asyncio.run(run_load(server, args))
    finally:
        server.stop()
    for p in phases:
        target = TARGETS[p["phase"]]
        p["target"] = ", ".join(f"{k} {'>=' if k == 'rps' else '<='} {v}" for k, v in target.items())
        p["met"] = p["rps"] >= target["rps"] and p["p99_ms"] <= target.get("p99_ms", float("inf")) \
            and not p["transport_errors"]
        print(json.dumps(p))
    if not args.no_write:
        path = merge_results("load_api", {
            "command": "python bench/load_api.py " + " ".join(sys.argv[1:]), "commit": git_commit(),
            "machine": mach, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "setup": f"uvicorn --workers {args.api_workers} on loopback, PostgreSQL 127.0.0.1:5432 (fresh database), "
                     f"filesystem broker; one asyncio httpx load generator on the same host",
            "loadavg_at_end": os.getloadavg(), "phases": phases})
        print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0 if all(p["met"] for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
