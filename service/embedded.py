"""The embedded stack: API server + one local worker as child processes, no servers needed.

Used by `kerneltune up` and `kerneltune demo`, and by the integration tests (pointed at a real
Redis and PostgreSQL through the same environment variables the production stack reads).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.client import Client


def default_data_dir() -> Path:
    return Path(os.environ.get("KT_DATA_DIR", Path.home() / ".kerneltune"))


def embedded_env(data_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the embedded default: SQLite file + filesystem broker under ``data_dir``."""
    env = dict(os.environ)
    # The stack's own folder, whatever KT_DATA_DIR the caller's shell has: the filesystem broker's queues and the
    # admin token live there, and two stacks sharing them would hand each other's runs and tokens around.
    env["KT_DATA_DIR"] = str(data_dir)
    env.setdefault("KT_DATABASE_URL", f"sqlite:///{data_dir / 'kerneltune.db'}")
    env.setdefault("KT_BROKER_URL", "filesystem://")
    env.update(extra or {})
    return env


class StackError(RuntimeError):
    """The embedded stack cannot start as asked (its port is taken)."""


def exit_on_sigterm() -> None:
    """Make SIGTERM (kill, `timeout`, docker stop) raise SystemExit, so that the caller's `finally: stack.stop()` runs:
    by default it ends the process at once, and the stack's processes, each in its own session, would outlive it."""
    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")
    signal.signal(signal.SIGTERM, _exit)


def port_answers(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on (host, port)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def api_command(host: str, port: int, workers: int = 1) -> list[str]:
    # uvicorn picks httptools and uvloop when installed (they are dependencies): the load benchmark's
    # figures (bench/results/2026-12-02-cpu-load.md) were measured with them
    return [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", host,
            "--port", str(port), "--log-level", "warning", *(["--workers", str(workers)] if workers > 1 else [])]


def worker_command(hardware: str, name: str = "worker") -> list[str]:
    # --pool solo: one run at a time in the worker process; each run still gets its own
    # sandboxed child, so a crashing kernel never takes the worker down.
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app:app", "worker", "-Q", f"kt.{hardware}",
            "--pool", "solo", "--concurrency", "1", "-n", f"{name}-{hardware}@%h", "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat"]


def control_worker_command(name: str = "control", concurrency: int = 4) -> list[str]:
    # Search drivers (kt.drive_search) on their own worker: a driver runs for the whole search, so on a
    # device worker's queue it would hold the device it waits for. Threads: a driver mostly waits on
    # the database, and several searches are driven at once.
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app:app", "worker", "-Q", "kt.control",
            "--pool", "threads", "--concurrency", str(concurrency), "-n", f"{name}@%h", "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat"]


@dataclass
class EmbeddedStack:
    data_dir: Path
    port: int = 8765
    host: str = "127.0.0.1"
    hardware: str = "cpu"
    workers: int = 1
    env_extra: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    admin_token_file: Path | None = None  # set by start(): where the local admin token's secret is
    admin_token_created: bool = False
    control_worker: bool = True  # a worker on kt.control that drives searches

    @property
    def admin_token(self) -> str:
        assert self.admin_token_file is not None, "start() the stack first"
        return self.admin_token_file.read_text().strip()

    def client(self) -> Client:
        return Client(self.url, token=self.admin_token)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return embedded_env(self.data_dir, {"KT_API_URL": self.url, **self.env_extra})

    @property
    def logs(self) -> Path:
        """Where each process's log goes (<name>.log)."""
        return self.log_dir or self.data_dir / "logs"

    def _spawn(self, cmd: list[str], log_name: str) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{log_name}.log", "ab")
        proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_api(self) -> subprocess.Popen:
        return self._spawn(api_command(self.host, self.port), "api")

    def start_worker(self, index: int = 0) -> subprocess.Popen:
        return self._spawn(worker_command(self.hardware, name=f"w{index}"), f"worker{index}")

    def start_control_worker(self) -> subprocess.Popen:
        return self._spawn(control_worker_command(), "control")

    def start(self, ready_timeout_s: float = 90.0) -> "EmbeddedStack":
        # An API already on the port (one an earlier, killed run left behind) would answer wait_ready while ours
        # fails to bind: everything after would go to that other service and its DB (seen on the H200).
        if port_answers(self.host, self.port):
            raise StackError(f"{self.url} already answers: another server holds port {self.port} (an earlier "
                             f"stack left running?); stop it or choose another port")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.ensure_admin_token()
        api = self.start_api()
        Client(self.url).wait_ready(ready_timeout_s)  # the API migrates the DB before it is ready
        if api.poll() is not None:
            raise StackError(f"the API process exited ({api.returncode}) while {self.url} answered: another "
                             f"server took port {self.port}; see {self.logs / 'api.log'}")
        for i in range(self.workers):
            self.start_worker(i)
        if self.control_worker:
            self.start_control_worker()
        return self

    def ensure_admin_token(self) -> Path:
        """First start: migrate and create the local admin token (<data_dir>/admin-token, mode 0600)."""
        from db.migrate import upgrade
        from db.session import make_engine, make_session_factory
        from service.auth import ensure_local_admin_token

        engine = make_engine(self.env["KT_DATABASE_URL"])
        try:
            upgrade(engine=engine)
            self.admin_token_file, self.admin_token_created = ensure_local_admin_token(
                make_session_factory(engine), Path(self.env["KT_DATA_DIR"]))
        finally:
            engine.dispose()
        return self.admin_token_file

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> "EmbeddedStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
