"""Run Alembic migrations programmatically (the API and workers call ``upgrade`` at startup)."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from db.session import make_engine

HERE = Path(__file__).resolve().parent
# Any constant works: it only has to be the same in every process that migrates this database.
_PG_LOCK_KEY = 0x6B74_6D69  # "ktmi"


def alembic_config(url: str | None = None) -> Config:
    cfg = Config(str(HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _migration_lock(engine: Engine, conn: Connection) -> Iterator[None]:
    """API and workers start together: only one of them may create the tables."""
    if engine.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        yield
        return
    db_path = engine.url.database
    if engine.dialect.name == "sqlite" and db_path and db_path != ":memory:" and not db_path.startswith("file:"):
        with open(f"{db_path}.migrate.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    yield


def upgrade(url: str | None = None, engine: Engine | None = None, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: head). Idempotent."""
    own = engine is None
    engine = engine or make_engine(url)
    try:
        with engine.begin() as conn, _migration_lock(engine, conn):
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        if own:
            engine.dispose()


def downgrade(engine: Engine, revision: str = "base") -> None:
    with engine.begin() as conn, _migration_lock(engine, conn):
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
