"""Recording an export: one ``exports`` row per wheel built.

The ``ExportRecord`` model lives in db/models.py and its table comes with migration 0003; it is
re-exported here for the code that imported it from this module.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from db.models import ExportRecord, utcnow

__all__ = ["ExportRecord", "record_export"]


def record_export(session: Session, **values: Any) -> ExportRecord:
    """Insert one export row and commit (an export is one unit of work)."""
    row = ExportRecord(created_at=utcnow(), **values)
    session.add(row)
    session.commit()
    return row
