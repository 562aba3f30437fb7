"""Small helpers shared by the query modules."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import DeclarativeBase, Session


def dialect_insert(bind: Session | Connection) -> Any:
    """The dialect's insert() (with on_conflict_do_nothing) for this session's or connection's database."""
    dialect = (bind.get_bind() if isinstance(bind, Session) else bind).dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise NotImplementedError(f"database {dialect!r} is not supported (SQLite or PostgreSQL)")
    return insert


def insert_ignore(session: Session, model: type[DeclarativeBase], values: dict[str, Any], keys: list[str]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING: concurrent writers of the same key neither fail nor duplicate.
    Whether this call inserted the row."""
    insert = dialect_insert(session)
    res = session.execute(insert(model).values(**values).on_conflict_do_nothing(index_elements=keys))
    return res.rowcount == 1
