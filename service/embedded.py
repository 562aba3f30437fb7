"""The embedded stack: API server + one local worker as child processes, no servers needed.

Used by `kerneltune up` and `kerneltune demo`, and by the integration tests (pointed at a real
Redis and PostgreSQL through the same environment variables the production stack reads).
"""

from __future__ import annotations

import os
import signal
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
    env.setdefault("KT_DATA_DIR", str(data_dir))
    env.setdefault("KT_DATABASE_URL", f"sqlite:///{data_dir / 'kerneltune.db'}")
    env.setdefault("KT_BROKER_URL", "filesystem://")
    env.update(extra or {})
    return env


def api_command(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app", "--host", host,
            "--port", str(port), "--log-level", "warning"]


def worker_command(hardware: str, name: str = "worker") -> list[str]:
    # --pool solo: one run at a time in the worker process; each run still gets its own
    # sandboxed child, so a crashing kernel never takes the worker down.
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app:app", "worker", "-Q", f"kt.{hardware}",
            "--pool", "solo", "--concurrency", "1", "-n", f"{name}-{hardware}@%h", "--loglevel", "WARNING",
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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return embedded_env(self.data_dir, {"KT_API_URL": self.url, **self.env_extra})

    def _spawn(self, cmd: list[str], log_name: str) -> subprocess.Popen:
        log_dir = self.log_dir or self.data_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = open(log_dir / f"{log_name}.log", "ab")
        proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_api(self) -> subprocess.Popen:
        return self._spawn(api_command(self.host, self.port), "api")

    def start_worker(self, index: int = 0) -> subprocess.Popen:
        return self._spawn(worker_command(self.hardware, name=f"w{index}"), f"worker{index}")

    def start(self, ready_timeout_s: float = 90.0) -> "EmbeddedStack":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.start_api()
        Client(self.url).wait_ready(ready_timeout_s)  # the API migrates the DB before it is ready
        for i in range(self.workers):
            self.start_worker(i)
        return self

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
