"""A live service for integration and fault tests: the embedded stack (real uvicorn API + real
`celery worker` processes) pointed at a private redis-server and a fresh PostgreSQL database.

Nothing here stands in for a component. What it adds is observation: an audit trigger in the test
database records every claim of a run and every result write, so "exactly once" is checked from
the database's own history, not from the API's summary of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from db.session import APPLICATION_NAME
from service.client import Client
from service.embedded import EmbeddedStack, api_command
from tests.support.servers import RedisServer, free_port, fresh_pg_database

REPO = Path(__file__).resolve().parents[2]
GEMM_SOURCE = (REPO / "kernels/variants/torch/dense_gemm_matmul.py").read_text()
TINY = {"spec": "tiny-moe", "tp": 1}

# Fires on every UPDATE of runs that moves a run into running (a claim) or writes a result (status
# done). A second result for one run id shows up here as a second 'done' row whatever the API says.
AUDIT_DDL_PG = [
    "CREATE TABLE kt_audit (id bigserial PRIMARY KEY, run_id varchar(36) NOT NULL, old_status varchar(16), "
    "new_status varchar(16) NOT NULL, worker varchar(255), at timestamptz NOT NULL DEFAULT clock_timestamp())",
    """CREATE FUNCTION kt_audit_fn() RETURNS trigger AS $$
       BEGIN
         IF NEW.status = 'done' OR (NEW.status = 'running' AND NEW.attempts IS DISTINCT FROM OLD.attempts) THEN
           INSERT INTO kt_audit(run_id, old_status, new_status, worker)
           VALUES (NEW.id, OLD.status, NEW.status, NEW.worker);
         END IF;
         RETURN NEW;
       END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER kt_audit_tr AFTER UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION kt_audit_fn()",
]


def api_token(data_dir: Path, database_url: str) -> str | None:
    """The bearer token to send: the embedded stack's <data_dir>/admin-token once auth writes one;
    before that, an admin token created in the database when the token table exists; else None
    (a service without auth needs no header)."""
    path = data_dir / "admin-token"
    if path.exists() and path.read_text().strip():
        return path.read_text().strip()
    try:
        from db.queries import tokens as tq
    except ImportError:
        return None
    engine = sa.create_engine(database_url)
    try:
        if not sa.inspect(engine).has_table("api_tokens"):
            return None
        with sa.orm.Session(engine) as session:
            existing = tq.get_by_name(session, "tests-admin")
            secret = tq.rotate_secret(session, existing) if existing else tq.create_token(
                session, name="tests-admin", scopes=["admin"])[1]
            session.commit()
        return secret
    finally:
        engine.dispose()


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass
class LiveService:
    """EmbeddedStack + Redis + PostgreSQL, with helpers to drive and observe it."""

    root: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    workers: int = 1
    redis: RedisServer | None = None
    database_url: str = ""
    stack: EmbeddedStack | None = None
    http: httpx.Client | None = None
    api_proc: subprocess.Popen | None = None
    worker_procs: dict[int, subprocess.Popen] = field(default_factory=dict)  # pid -> live worker
    _next_worker: int = 0
    _drop: Callable[[], None] | None = None
    _engine: sa.Engine | None = None

    def start(self) -> "LiveService":
        self.redis = RedisServer(self.root / "redis").start()
        self.database_url, self._drop = fresh_pg_database()
        env = {"KT_DATABASE_URL": self.database_url, "KT_BROKER_URL": self.redis.url,
               # Small leases and sweeps: a dead worker's run is taken over within seconds.
               "KT_RUNNING_LEASE_SECONDS": "5", "KT_SWEEP_INTERVAL_S": "1", "KT_VISIBILITY_TIMEOUT_S": "30",
               "KT_QUEUED_LEASE_SECONDS": "120", "KT_RUN_TIMEOUT_S": "120", **self.env_extra}
        self.stack = EmbeddedStack(data_dir=self.root / "data", port=free_port(), workers=0, env_extra=env)
        self.stack.start(ready_timeout_s=120)
        self.api_proc = self.stack.procs[0]
        for _ in range(self.workers):
            self.spawn_worker()
        with self.engine() as eng, eng.begin() as conn:
            for ddl in AUDIT_DDL_PG:
                conn.execute(sa.text(ddl))
        token = api_token(self.stack.data_dir, self.database_url)
        self.http = httpx.Client(base_url=self.stack.url, timeout=30, headers=auth_headers(token))
        return self

    def stop(self) -> None:
        if self.http:
            self.http.close()
        if self.stack:
            self.stack.stop()
        if self.redis:
            self.redis.stop()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self._drop:
            try:
                self._drop()
            except sa.exc.OperationalError:
                # The admin engine's pooled connection died if PostgreSQL restarted during the
                # test; the failed call invalidated it, so the second call reconnects.
                self._drop()

    @contextmanager
    def engine(self) -> Iterator[sa.Engine]:
        """The test's own engine on the service's database, kept for the service's lifetime: the fault
        tests poll the database many times a second, and a new connection each time costs the CPU
        the workers under test need. pool_pre_ping replaces a connection a PostgreSQL restart broke."""
        if self._engine is None:
            self._engine = sa.create_engine(self.database_url, pool_size=2, pool_pre_ping=True)
        yield self._engine

    def spawn_worker(self) -> subprocess.Popen:
        assert self.stack is not None
        proc = self.stack.start_worker(self._next_worker)
        self._next_worker += 1
        self.worker_procs[proc.pid] = proc
        return proc

    def kill_worker(self, pid: int) -> int:
        """SIGKILL a worker and its sandbox children, then wait until PostgreSQL has ended their backends (see
        kill_api); returns how many children were alive."""
        proc = self.worker_procs.pop(pid)
        tree = kill_worker_tree(pid)
        proc.wait(timeout=10)
        self.wait_backends_gone([pid, *tree])
        return len(tree)

    def restart_api(self) -> None:
        """SIGKILL the API (nothing of it survives), start a new one on the same port, wait ready."""
        assert self.stack is not None
        self.kill_api()
        self.api_proc = self.stack._spawn(api_command(self.stack.host, self.stack.port), "api")
        Client(self.stack.url).wait_ready(120)

    def kill_api(self) -> None:
        """SIGKILL the API's process group, then wait until PostgreSQL has ended its backends: a COMMIT the API sent
        just before it died is still carried out, and a read of the database before that can miss it."""
        assert self.stack is not None and self.api_proc is not None
        if self.api_proc.poll() is None:
            pids = [self.api_proc.pid, *descendants(self.api_proc.pid)]
            os.killpg(self.api_proc.pid, signal.SIGKILL)
            self.api_proc.wait(timeout=10)
            self.wait_backends_gone(pids)
        if self.api_proc in self.stack.procs:
            self.stack.procs.remove(self.api_proc)

    def wait_backends_gone(self, pids: list[int], timeout_s: float = 30) -> None:
        """Until no PostgreSQL backend serves any of these (dead) processes (db/session.py names each backend)."""
        names = [f"{APPLICATION_NAME}:{pid}" for pid in pids]
        deadline = time.monotonic() + timeout_s
        with self.engine() as eng:
            while True:
                with eng.connect() as conn:
                    left = conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(:n)"),
                                        {"n": names}).scalar_one()
                if not left:
                    return
                assert time.monotonic() < deadline, f"{left} backends of dead processes {pids} still open"
                time.sleep(0.05)

    # --- driving the API ---------------------------------------------------------------------------

    def submit_variant(self, source: str = GEMM_SOURCE, space: dict[str, Any] | None = None,
                       headers: dict[str, str] | None = None) -> int:
        assert self.http is not None
        r = self.http.post("/v1/variants", headers=headers or {}, json={
            "slot": "dense_gemm", "language": "torch", "source": source,
            "config_space": space or {"n_chunks": [1, 2, 4]}, "provenance": {"author": "tests"}})
        assert r.status_code in (200, 201), r.text
        return int(r.json()["id"])

    def submit_job(self, variant_id: int, batch_sizes: list[int], shapes: list[str] | None = None,
                   configs: Any = "all") -> dict[str, Any]:
        assert self.http is not None
        r = self.http.post("/v1/jobs", json={"variant_id": variant_id, "hardware": "cpu", "configs": configs,
                                             "deployment": {**TINY, "batch_sizes": batch_sizes},
                                             "shapes": shapes})
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["enqueued"], body
        return body

    def job(self, job_id: int) -> dict[str, Any]:
        assert self.http is not None
        r = self.http.get(f"/v1/jobs/{job_id}")
        r.raise_for_status()
        return r.json()

    def wait_done(self, job_ids: list[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.job(j)["state"] == "done" for j in job_ids):
                return
            time.sleep(0.5)
        raise AssertionError(f"jobs {job_ids} not done after {timeout_s:.0f} s: "
                             f"{[self.job(j)['progress'] for j in job_ids]}")

    # --- observing the database ----------------------------------------------------------------------

    def running_workers(self) -> dict[str, str]:
        """run id -> worker id ("host:pid") for runs a worker holds now."""
        with self.engine() as eng, eng.connect() as conn:
            return {r: w for r, w in conn.execute(sa.text("SELECT id, worker FROM runs WHERE status = 'running'"))}

    def exactly_once_report(self, job_ids: list[int]) -> dict[str, Any]:
        """From the runs and the audit trail: lost (not done), duplicates (a run id with more than one
        result write), re-run (claimed more than once), and attempts that disagree with the claims seen."""
        with self.engine() as eng, eng.connect() as conn:
            runs = conn.execute(sa.text("SELECT id, status, verdict, attempts, median_us FROM runs "
                                        "WHERE job_id = ANY(:ids)"), {"ids": job_ids}).all()
            writes = dict(conn.execute(sa.text(
                "SELECT run_id, count(*) FROM kt_audit WHERE new_status = 'done' GROUP BY run_id")).all())
            claims = dict(conn.execute(sa.text(
                "SELECT run_id, count(*) FROM kt_audit WHERE new_status = 'running' GROUP BY run_id")).all())
        return {
            "runs": len(runs),
            "lost": [r.id for r in runs if r.status != "done"],
            "duplicates": [r.id for r in runs if writes.get(r.id, 0) > 1],
            "unwritten": [r.id for r in runs if writes.get(r.id, 0) == 0],
            "rerun": [r.id for r in runs if claims.get(r.id, 0) > 1],
            "attempts_mismatch": [r.id for r in runs if r.attempts != claims.get(r.id, 0)],
            "not_passed": [(r.id, r.verdict) for r in runs if r.verdict != "passed" or r.median_us is None],
        }


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (from /proc): a killed worker's sandbox children run in their
    own sessions, so killing the worker's process group does not reach them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_worker_tree(pid: int) -> list[int]:
    """SIGKILL a worker the way a lost machine or an OOM-killed container would: its process group,
    then every descendant (sandbox children). Returns the descendants that were alive."""
    tree = descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in tree:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return tree
