"""jobs.idempotency_key: a retried POST /v1/jobs with the same Idempotency-Key returns the same job

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN + a unique index, never batch mode (see 0002: a batch re-create of jobs on
    # SQLite would cascade into runs). NULLs do not collide: jobs without a key stay unconstrained.
    op.add_column("jobs", sa.Column("idempotency_key", sa.String(200), nullable=True))
    op.create_index("ix_jobs_idempotency_key", "jobs", ["idempotency_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_jobs_idempotency_key", table_name="jobs")
    op.drop_column("jobs", "idempotency_key")
