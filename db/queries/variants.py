"""Variant aggregate: dedup by content hash, lookups, listing."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import Variant
from db.queries.common import dialect_insert


def content_hash(slot: str, language: str, source: str) -> str:
    h = hashlib.sha256()
    for part in (slot, language, source):
        h.update(part.encode())
        h.update(b"\0")  # separator: ("ab", "c") and ("a", "bc") must not collide
    return h.hexdigest()


def get_variant(session: Session, variant_id: int) -> Variant | None:
    return session.get(Variant, variant_id)


def get_variant_by_hash(session: Session, digest: str) -> Variant | None:
    return session.scalar(select(Variant).where(Variant.content_hash == digest))


def get_or_create_variant(session: Session, *, slot: str, language: str, source: str,
                          config_space: dict[str, Any], constraints: list[str], n_points: int, author: str,
                          agent: str | None = None, parent_id: int | None = None, notes: str = "",
                          declares_library: bool = False) -> tuple[Variant, bool]:
    """The variant for (slot, language, source), created if new; commits. Returns (variant, created).
    A resubmission keeps the first submission's config space and provenance."""
    digest = content_hash(slot, language, source)
    existing = get_variant_by_hash(session, digest)
    if existing is not None:
        return existing, False
    variant = Variant(content_hash=digest, slot=slot, language=language, source=source,
                      config_space=config_space, constraints=constraints, n_points=n_points,
                      declares_library=declares_library,
                      author=author, agent=agent, parent_id=parent_id, notes=notes)
    session.add(variant)
    try:
        session.commit()
    except IntegrityError:
        # Two identical submissions raced: the other one committed first, and it is the variant.
        session.rollback()
        existing = get_variant_by_hash(session, digest)
        if existing is None:
            raise
        return existing, False
    return variant, True


_VARIANTS = Variant.__table__


def put_variant(conn: Connection, *, slot: str, language: str, source: str, config_space: dict[str, Any],
                constraints: list[str], n_points: int, author: str, agent: str | None = None,
                parent_id: int | None = None, notes: str = "", declares_library: bool = False) -> tuple[int, str, bool]:
    """get_or_create_variant for the API's submission path, on a plain Connection in autocommit mode:
    INSERT .. ON CONFLICT (content_hash) DO NOTHING RETURNING id, so a new variant costs one statement
    (committed by itself); a known one (or the winner of an identical concurrent submission) is then
    read back. Returns (id, content hash, created); as there, the first submission's fields stay."""
    digest = content_hash(slot, language, source)
    insert = dialect_insert(conn)
    new_id = conn.execute(
        insert(_VARIANTS).values(content_hash=digest, slot=slot, language=language, source=source,
                                 config_space=config_space, constraints=constraints, n_points=n_points,
                                 declares_library=declares_library, author=author, agent=agent,
                                 parent_id=parent_id, notes=notes)
        .on_conflict_do_nothing(index_elements=["content_hash"]).returning(_VARIANTS.c.id)).scalar()
    if new_id is not None:
        return int(new_id), digest, True
    return int(conn.execute(select(_VARIANTS.c.id).where(_VARIANTS.c.content_hash == digest)).scalar_one()), digest, False


def variant_exists(conn: Connection, variant_id: int) -> bool:
    return conn.execute(select(_VARIANTS.c.id).where(_VARIANTS.c.id == variant_id)).first() is not None


def list_variants(session: Session, *, slot: str | None = None, author: str | None = None,
                  agent: str | None = None, language: str | None = None, parent_id: int | None = None,
                  limit: int = 100, offset: int = 0) -> list[Variant]:
    q = select(Variant).order_by(Variant.id.desc()).limit(limit).offset(offset)
    if slot is not None:
        q = q.where(Variant.slot == slot)
    if author is not None:
        q = q.where(Variant.author == author)
    if agent is not None:
        q = q.where(Variant.agent == agent)
    if language is not None:
        q = q.where(Variant.language == language)
    if parent_id is not None:
        q = q.where(Variant.parent_id == parent_id)
    return list(session.scalars(q))
