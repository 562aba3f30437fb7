"""Persistence: SQLAlchemy models, engine/session factory, Alembic migrations, queries by aggregate."""

from db.models import Base, DeviceFingerprint, Job, Run, Variant, Winner
from db.session import database_url, make_engine, make_session_factory, session_scope

__all__ = ["Base", "DeviceFingerprint", "Job", "Run", "Variant", "Winner", "database_url", "make_engine",
           "make_session_factory", "session_scope"]
