"""API token aggregate: create (hashed), look up by secret, revoke, and the usage its quotas count."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, time, timezone

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.models import ApiToken, Job, Run, utcnow

SECRET_PREFIX = "kt_"


def new_secret() -> str:
    # 256 bits from the OS: a plain (unsalted) sha256 is enough for secrets this strong.
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(session: Session, *, name: str, scopes: list[str], gpu_seconds_per_day: float | None = None,
                 max_concurrent_jobs: int | None = None) -> tuple[ApiToken, str]:
    """The token row and its secret; the secret exists only in the return value. Commits."""
    secret = new_secret()
    token = ApiToken(name=name, secret_hash=hash_secret(secret), prefix=secret[:10], scopes=sorted(set(scopes)),
                     gpu_seconds_per_day=gpu_seconds_per_day, max_concurrent_jobs=max_concurrent_jobs,
                     created_at=utcnow())
    session.add(token)
    session.commit()
    return token, secret


def rotate_secret(session: Session, token: ApiToken) -> str:
    """A new secret for an existing token (the old one stops working). Commits."""
    secret = new_secret()
    token.secret_hash, token.prefix, token.revoked_at = hash_secret(secret), secret[:10], None
    session.commit()
    return secret


def get_by_name(session: Session, name: str) -> ApiToken | None:
    return session.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()


def get_by_secret(session: Session, secret: str) -> ApiToken | None:
    """The live (not revoked) token with this secret, or None."""
    return get_by_hash(session, hash_secret(secret))


def get_by_hash(session: Session, digest: str) -> ApiToken | None:
    """The live (not revoked) token whose secret hashes to ``digest`` (hash_secret), or None."""
    return session.scalars(select(ApiToken).where(ApiToken.secret_hash == digest,
                                                  ApiToken.revoked_at.is_(None))).one_or_none()


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def revoke(session: Session, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    session.commit()


def touch(session: Session, token_id: int, now: datetime | None = None) -> None:
    """Record use; commits. Called at most once a minute per token (see service.auth)."""
    session.execute(update(ApiToken).where(ApiToken.id == token_id).values(last_used_at=now or utcnow()))
    session.commit()


@dataclass(frozen=True)
class Usage:
    active_jobs: int  # jobs with a queued or running run, not cancelled
    gpu_seconds_today: float  # child wall seconds of runs finished since 00:00 UTC


def start_of_day(now: datetime) -> datetime:
    return datetime.combine(now.astimezone(timezone.utc).date(), time(), tzinfo=timezone.utc)


def usage(session: Session, token_id: int, now: datetime | None = None) -> Usage:
    now = now or utcnow()
    active = session.scalar(
        select(func.count(func.distinct(Run.job_id))).join(Job, Run.job_id == Job.id)
        .where(Job.token_id == token_id, Job.cancelled.is_(False), Run.status.in_(("queued", "running"))))
    seconds = session.scalar(
        select(func.coalesce(func.sum(Run.wall_s), 0.0)).join(Job, Run.job_id == Job.id)
        .where(Job.token_id == token_id, Run.status == "done", Run.finished_at >= start_of_day(now)))
    return Usage(active_jobs=int(active or 0), gpu_seconds_today=float(seconds or 0.0))
