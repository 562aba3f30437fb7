"""Real servers for integration tests: a private redis-server process and a fresh PostgreSQL
database on the server that .ci/run starts. Nothing here stands in for a component."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("KT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    """A real redis-server on a free loopback port, owned by the test (so it can be restarted)."""

    workdir: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: run .ci/run (it installs Debian's redis-server)")
        self.port = self.port or free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([exe, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                      "--appendonly", "no", "--dir", str(self.workdir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def fresh_pg_database() -> tuple[str, "callable"]:
    """Create a uniquely named database; returns its URL and a function that drops it."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"kt_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        raise RuntimeError(f"PostgreSQL not reachable at {PG_ADMIN_URL}: run .ci/run or set KT_TEST_PG_URL ({exc})") from exc
    url = admin.url.set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return url, drop
