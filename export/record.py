"""The ``exports`` table: one row per wheel built, on db.models' metadata.

Lives here until the lead moves it into db/models.py with an Alembic migration; until then
``record_export`` creates the table if it is missing (checkfirst), so an export on a database
migrated without it still leaves its record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Integer, String
from sqlalchemy.orm import Mapped, Session, mapped_column

from db.models import Base, UTCDateTime, utcnow


class ExportRecord(Base):
    __tablename__ = "exports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    hardware: Mapped[str] = mapped_column(String(32), index=True)
    model: Mapped[str] = mapped_column(String(128), index=True)
    version: Mapped[str] = mapped_column(String(64))
    wheel_filename: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    entries: Mapped[int] = mapped_column(Integer)
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    skipped: Mapped[list[dict[str, Any]]] = mapped_column(JSON)


def record_export(session: Session, **values: Any) -> ExportRecord:
    """Insert one export row and commit (an export is one unit of work)."""
    ExportRecord.__table__.create(bind=session.connection(), checkfirst=True)
    row = ExportRecord(created_at=utcnow(), **values)
    session.add(row)
    session.commit()
    return row
