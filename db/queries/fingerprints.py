"""Device fingerprints: one row per hardware_key, written by whichever worker reports it first."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from db.models import DeviceFingerprint, utcnow
from db.queries.common import insert_ignore


def ensure_fingerprint(session: Session, fingerprint: dict[str, Any]) -> str:
    """Store the fingerprint if its hardware_key is new (no commit); returns the key."""
    key = str(fingerprint["hardware_key"])
    bw = fingerprint.get("bandwidth_gbs", fingerprint.get("copy_bandwidth_gbs"))
    insert_ignore(session, DeviceFingerprint,
                  dict(id=key, hardware_class=str(fingerprint.get("hardware_class") or "unknown"),
                       fields=fingerprint, bandwidth_gbs=float(bw) if isinstance(bw, (int, float)) else None,
                       first_seen_at=utcnow()),
                  ["id"])
    return key


def get_fingerprint(session: Session, key: str) -> DeviceFingerprint | None:
    return session.get(DeviceFingerprint, key)
