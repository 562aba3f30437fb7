"""api tokens; jobs owned by a token (private flag); runs' child wall seconds

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("gpu_seconds_per_day", sa.Float(), nullable=True),
        sa.Column("max_concurrent_jobs", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_used_at", TS, nullable=True),
        sa.Column("revoked_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("name", name="uq_api_tokens_name"),
        sa.UniqueConstraint("secret_hash", name="uq_api_tokens_secret_hash"),
    )
    # Plain ADD COLUMN, never batch mode: on SQLite, batch mode drops and re-creates jobs, and with
    # foreign keys on that DROP would cascade into runs. ADD COLUMN ... REFERENCES is allowed there.
    # No ON DELETE: tokens are revoked, never deleted, so a job always keeps its owner.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE jobs ADD COLUMN token_id INTEGER CONSTRAINT fk_jobs_token_id_api_tokens "
                   "REFERENCES api_tokens (id)")
    else:
        op.add_column("jobs", sa.Column("token_id", sa.Integer(), nullable=True))
        op.create_foreign_key("fk_jobs_token_id_api_tokens", "jobs", "api_tokens", ["token_id"], ["id"])
    # Existing jobs were visible to everyone: they stay public.
    op.add_column("jobs", sa.Column("private", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("ix_jobs_token_id", "jobs", ["token_id"])
    op.add_column("runs", sa.Column("wall_s", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "wall_s")
    op.drop_index("ix_jobs_token_id", table_name="jobs")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("fk_jobs_token_id_api_tokens", "jobs", type_="foreignkey")
    # SQLite (3.35+) drops a column that only a column-level REFERENCES points from.
    op.drop_column("jobs", "private")
    op.drop_column("jobs", "token_id")
    op.drop_table("api_tokens")
