"""Engine and session factory from a URL.

``KT_DATABASE_URL`` wins; otherwise an SQLite file under ``KT_DATA_DIR`` (default ``~/.kerneltune``).
SQLite connections get WAL (readers never block the writer), a busy timeout (concurrent workers wait
instead of failing) and foreign keys (off by default in SQLite). PostgreSQL goes through psycopg 3.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

# How long a writer waits for SQLite's lock before "database is locked" (the API answers 503
# database_busy). KT_SQLITE_BUSY_TIMEOUT_MS overrides it; the fault tests shorten the wait.
SQLITE_BUSY_TIMEOUT_MS = int(os.environ.get("KT_SQLITE_BUSY_TIMEOUT_MS") or 30_000)
APPLICATION_NAME = "kerneltune"  # PostgreSQL application_name prefix: "kerneltune:<pid>"


def data_dir() -> Path:
    return Path(os.environ.get("KT_DATA_DIR") or "~/.kerneltune").expanduser()


def default_database_url(directory: Path | None = None) -> str:
    return f"sqlite:///{(directory or data_dir()) / 'kerneltune.db'}"


def database_url() -> str:
    return normalize_url(os.environ.get("KT_DATABASE_URL") or default_database_url())


def normalize_url(url: str) -> str:
    """Plain ``postgresql://`` would pick psycopg2, which is not installed: route it to psycopg 3."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")  # safe under WAL, much faster than FULL
    cur.close()


def make_engine(url: str | None = None, **kwargs: Any) -> Engine:
    url = normalize_url(url or database_url())
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:" and not u.database.startswith("file:"):
            path = Path(u.database).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            # Owner-only (SQLite gives its -wal and -shm files the same mode): it holds token hashes and
            # every submitted source; no other local user has a reason to read it.
            path.touch(mode=0o600, exist_ok=True)
            try:
                path.chmod(0o600)
            except PermissionError:
                pass  # another user's file: theirs to protect
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)  # a restarted PostgreSQL must not poison the pool
    # Each backend names the process it serves (pg_stat_activity.application_name): an operator sees which API or
    # worker process holds a connection or a lock, and a test that kills a process can wait for its backends to end.
    if "application_name" not in u.query:
        kwargs.setdefault("connect_args", {}).setdefault("application_name", f"{APPLICATION_NAME}:{os.getpid()}")
    # SQLAlchemy's default keeps 5 idle connections and closes any extra one on check-in: an API
    # serving more than 5 requests at once then opens and closes a PostgreSQL connection (a backend
    # fork, ~5 ms) per request. Keep up to 10 idle, at most 20 at once (the API has two such pools
    # per process, see service/app.py: mind PostgreSQL's max_connections with several processes).
    if "poolclass" not in kwargs and "pool" not in kwargs:  # callers may pick NullPool & co.
        kwargs.setdefault("pool_size", int(os.environ.get("KT_DB_POOL_SIZE") or 10))
        kwargs.setdefault("max_overflow", 10)
    return create_engine(url, **kwargs)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    # Objects stay readable after commit: handlers and tasks return them after the unit of work.
    return sessionmaker(engine, expire_on_commit=False)


_DEFAULT_FACTORIES: dict[str, sessionmaker[Session]] = {}


def default_session_factory() -> sessionmaker[Session]:
    """One engine per process and URL (workers and scripts); the API builds its own in create_app."""
    url = database_url()
    if url not in _DEFAULT_FACTORIES:
        _DEFAULT_FACTORIES[url] = make_session_factory(make_engine(url))
    return _DEFAULT_FACTORIES[url]


@contextmanager
def session_scope(factory: sessionmaker[Session] | None = None) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on error. Default: the KT_DATABASE_URL database."""
    session = (factory or default_session_factory())()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
