"""Small helpers shared by the query modules."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import DeclarativeBase, Session


def insert_ignore(session: Session, model: type[DeclarativeBase], values: dict[str, Any], keys: list[str]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING: concurrent writers of the same key neither fail nor duplicate."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise NotImplementedError(f"database {dialect!r} is not supported (SQLite or PostgreSQL)")
    session.execute(insert(model).values(**values).on_conflict_do_nothing(index_elements=keys))
