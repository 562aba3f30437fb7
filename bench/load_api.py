"""Load on the API over loopback: job-status reads and variant submissions against a real uvicorn
API backed by PostgreSQL. Bounded: each phase stops after --requests requests or --seconds seconds.

    python bench/load_api.py                       # writes bench/results/<date>-cpu-load.{json,md}
    python bench/load_api.py --concurrency 16 --api-workers 2

The load generator is one asyncio process on the same machine as the server, with a minimal
HTTP/1.1 keep-alive client (one connection per concurrent client; httpx only for the setup): its own
CPU use is measured and reported, since on 2 cores it competes with the API it measures; so are the
API's CPU seconds (per request too) and PostgreSQL's.
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
from search.landscape import git_commit  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PG_ADMIN_URL = os.environ.get("KT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
GEMM_SOURCE = (ROOT / "kernels/variants/torch/dense_gemm_matmul.py").read_text()
TARGETS = {"status_reads": {"rps": 300, "p99_ms": 100}, "variant_submissions": {"rps": 100}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    uvicorn_args: list[str] = field(default_factory=list)  # e.g. ["--http", "h11", "--loop", "asyncio"]
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
               "--port", str(self.port), "--log-level", "warning", "--no-access-log", "--workers", str(self.api_workers), *self.uvicorn_args]
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

class RawHttp:
    """A lean HTTP/1.1 keep-alive client over one asyncio connection: the load generator shares the
    2 cores with the API it measures, and httpx costs ~3 ms of CPU a request on this machine (more
    than a third of what the API spends). Requests are written whole; a response is read to the end
    of its body (Content-Length or chunked) before the next one is sent."""

    def __init__(self, host: str, port: int, headers: dict[str, str]):
        self.host, self.port = host, port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            await self._connect()
        assert self.reader is not None and self.writer is not None
        extra = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body is not None else ""
        self.writer.write(f"{method} {path} HTTP/1.1\r\n{self.head}{extra}\r\n".encode() + (body or b""))
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            if "content-length" in fields:
                data = await self.reader.readexactly(int(fields["content-length"]))
            elif fields.get("transfer-encoding", "").lower() == "chunked":
                parts = []
                while (size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)):
                    parts.append(await self.reader.readexactly(size + 2))
                await self.reader.readuntil(b"\r\n")
                data = b"".join(p[:-2] for p in parts)
            else:
                raise ConnectionError("response without Content-Length or chunked body")
            if fields.get("connection", "").lower() == "close":
                await self.close()
            return status, data
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            await self.close()
            raise

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    i = min(len(sorted_ms) - 1, max(0, round(q / 100 * (len(sorted_ms) - 1))))
    return sorted_ms[i]


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children (uvicorn --workers N forks N)."""
    pids = [pid]
    try:
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float | None:
    """CPU seconds of every process named postgres (the server's backends); None if none is visible."""
    total, seen = 0, False
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm = (d / "comm").read_text().strip()
            if comm != "postgres":
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            seen = True
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK") if seen else None


async def closed_loop(name: str, request: Callable[[RawHttp, int], Awaitable[tuple[int, bytes]]],
                      clients: list[RawHttp], max_requests: int, max_seconds: float,
                      ok: tuple[int, ...], server_pid: int | None = None) -> dict[str, Any]:
    """One load client per connection, each sending its next request when the last one answered,
    until the request budget or the time budget is spent. Latency is per request, send to full body
    read. Also counts the CPU seconds the API (``server_pid`` and its children) and PostgreSQL spent."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    issued = 0
    stop_at = time.monotonic() + max_seconds
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    srv0 = tree_cpu_s(server_pid) if server_pid else None
    pg0 = postgres_cpu_s()

    async def one_client(conn: RawHttp) -> None:
        nonlocal issued
        while issued < max_requests and time.monotonic() < stop_at:
            i = issued
            issued += 1
            t0 = time.perf_counter()
            try:
                status, _ = await request(conn, i)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            statuses[str(status)] = statuses.get(str(status), 0) + 1

    t0 = time.monotonic()
    await asyncio.gather(*(one_client(c) for c in clients))
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    srv1 = tree_cpu_s(server_pid) if server_pid else None
    pg1 = postgres_cpu_s()
    lat = sorted(latencies)
    good = sum(n for s, n in statuses.items() if int(s) in ok)
    n = len(latencies) + sum(errors.values())
    out = {
        "phase": name, "concurrency": len(clients), "requests": n,
        "ok": good, "statuses": statuses, "transport_errors": errors, "wall_s": round(wall, 2),
        "rps": round(good / wall, 1) if wall else 0.0,
        "p50_ms": round(percentile(lat, 50), 2), "p90_ms": round(percentile(lat, 90), 2),
        "p99_ms": round(percentile(lat, 99), 2), "max_ms": round(lat[-1], 2) if lat else None,
        "loadgen_cpu_s": round((cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime), 2),
    }
    if srv0 is not None and srv1 is not None:
        out["api_cpu_s"] = round(srv1 - srv0, 2)
        out["api_cpu_ms_per_request"] = round((srv1 - srv0) * 1000 / max(1, n), 2)
    if pg0 is not None and pg1 is not None:
        out["postgres_cpu_s"] = round(pg1 - pg0, 2)
    return out


async def run_load(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    token = server.token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as client:
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
        job_runs = r.json()["runs"]
    clients = [RawHttp("127.0.0.1", server.port, headers) for _ in range(args.concurrency)]
    try:
        for _ in range(50 // args.concurrency + 1):  # open the connections, warm the pool and the caches
            await asyncio.gather(*(c.request("GET", f"/v1/jobs/{job_id}") for c in clients))
        run_tag = uuid.uuid4().hex[:8]
        pid = server.proc.pid if server.proc else None

        def submission(i: int) -> bytes:
            return json.dumps({"slot": "dense_gemm", "language": "torch",
                               "source": GEMM_SOURCE + f"# load {run_tag} {i}\n",
                               "config_space": {"n_chunks": [1, 2, 4]},
                               "provenance": {"author": "bench", "notes": f"load {i}"}}).encode()

        out = [
            await closed_loop("status_reads", lambda c, i: c.request("GET", f"/v1/jobs/{job_id}"), clients,
                              args.requests, args.seconds, ok=(200,), server_pid=pid),
            await closed_loop("variant_submissions", lambda c, i: c.request("POST", "/v1/variants", submission(i)),
                              clients, args.requests, args.seconds, ok=(201,), server_pid=pid),
        ]
    finally:
        for c in clients:
            await c.close()
    out[0]["job_runs"] = job_runs
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
                  f"- setup: {la['setup']}", *([f"- note: {la['note']}"] if la.get("note") else []), "",
                  "| phase | concurrency | requests | ok | req/s | p50 ms | p99 ms | max ms | loadgen CPU s "
                  "| API CPU s (ms/req) | PostgreSQL CPU s | target | met |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for p in la["phases"]:
            api = f"{p['api_cpu_s']} ({p['api_cpu_ms_per_request']})" if "api_cpu_s" in p else "-"
            lines.append(f"| {p['phase']} | {p['concurrency']} | {p['requests']} | {p['ok']} | {p['rps']} | "
                         f"{p['p50_ms']} | {p['p99_ms']} | {p['max_ms']} | {p['loadgen_cpu_s']} | {api} | "
                         f"{p.get('postgres_cpu_s', '-')} | {p['target']} | {'yes' if p['met'] else 'NO'} |")
        lines.append("")
    for dq in doc.get("drain_queue", []):
        lines += ["## Queue drain (bench/drain_queue.py)", "", f"- command: `{dq['command']}`",
                  f"- started: {dq['started']}", f"- commit: `{dq['commit']}`", f"- machine: {dq['machine']}",
                  *([f"- load average at end: {dq['loadavg_at_end']}"] if dq.get("loadavg_at_end") else []), ""]
        lines += [f"- {k}: {v}" for k, v in dq["summary"].items()]
        lines.append("")
    return "\n".join(lines)


def uvicorn_impl(http: str, loop: str) -> str:
    """What uvicorn's "auto" picks here: httptools and uvloop when importable, else h11 and asyncio."""
    import importlib.util

    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if loop == "auto":
        loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"--http {http} --loop {loop}"


def wait_quiet(max_wait_s: float, below: float = 1.0) -> float:
    """Poll the 1-minute load average until it is below ``below`` (at most ``max_wait_s``); returns it."""
    deadline = time.monotonic() + max_wait_s
    while os.getloadavg()[0] >= below and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=6000, help="per phase")
    ap.add_argument("--seconds", type=float, default=20.0, help="per phase")
    ap.add_argument("--api-workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--http", default="auto", choices=["auto", "h11", "httptools"], help="uvicorn --http")
    ap.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"], help="uvicorn --loop")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="first wait (at most this long) for the 1-minute load average to drop below 1.0")
    ap.add_argument("--note", default="", help="a line to keep with this run's figures")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.wait_quiet:
        print(f"1-minute load average before starting: {wait_quiet(args.wait_quiet):.2f}", flush=True)
    mach = machine()
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")  # not when the figures are written
    impl = uvicorn_impl(args.http, args.loop)
    server = Server(api_workers=args.api_workers, uvicorn_args=impl.split()).start()
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
            "command": "python bench/load_api.py " + " ".join(sys.argv[1:]), "commit": git_commit(ROOT),
            "machine": mach, "started": started,
            "setup": f"uvicorn --workers {args.api_workers} {impl} on loopback, PostgreSQL 127.0.0.1:5432 (fresh "
                     f"database), filesystem broker; one asyncio load generator on the same host (raw HTTP/1.1 "
                     f"keep-alive, one connection per concurrent client)",
            "loadavg_at_end": os.getloadavg(), "phases": phases, **({"note": args.note} if args.note else {})})
        print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0 if all(p["met"] for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
