"""config searches (searches table; runs' search_id and fidelity); the exports table

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "searches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("short_job_id", sa.Integer(), nullable=True),
        sa.Column("hardware", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(48), nullable=False),
        sa.Column("deployment", sa.JSON(), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("shape_filter", sa.JSON(), nullable=True),
        sa.Column("strategy", sa.String(32), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("budget", sa.JSON(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("per", sa.String(8), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("targets", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stop_reasons", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("driver", sa.String(255), nullable=True),
        sa.Column("driver_lease_expires_at", TS, nullable=True),
        sa.Column("submitted_by", sa.String(128), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("private", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_searches"),
        sa.CheckConstraint("state IN ('queued', 'running', 'done', 'cancelled', 'failed')", name="ck_searches_state"),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], name="fk_searches_variant_id_variants"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_searches_job_id_jobs"),
        sa.ForeignKeyConstraint(["short_job_id"], ["jobs.id"], name="fk_searches_short_job_id_jobs"),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], name="fk_searches_token_id_api_tokens"),
    )
    op.create_index("ix_searches_variant_id", "searches", ["variant_id"])
    op.create_index("ix_searches_token_id", "searches", ["token_id"])

    # Plain ADD COLUMN, never batch mode (see 0002: a re-created runs table would cascade on SQLite).
    # No ON DELETE: searches are never deleted (cancelled at most), so a run keeps its search.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE runs ADD COLUMN search_id INTEGER CONSTRAINT fk_runs_search_id_searches "
                   "REFERENCES searches (id)")
    else:
        op.add_column("runs", sa.Column("search_id", sa.Integer(), nullable=True))
        op.create_foreign_key("fk_runs_search_id_searches", "runs", "searches", ["search_id"], ["id"])
    op.create_index("ix_runs_search_id", "runs", ["search_id"])
    # Every run before this migration was a full evaluation.
    op.add_column("runs", sa.Column("fidelity", sa.String(8), nullable=False, server_default="full"))

    # Before this migration export/record.py created "exports" itself on first export (checkfirst):
    # such a database already has the table, with the same columns.
    if not sa.inspect(op.get_bind()).has_table("exports"):
        op.create_table(
            "exports",
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("created_at", TS, nullable=False),
            sa.Column("hardware", sa.String(32), nullable=False),
            sa.Column("model", sa.String(128), nullable=False),
            sa.Column("version", sa.String(64), nullable=False),
            sa.Column("wheel_filename", sa.String(255), nullable=False),
            sa.Column("sha256", sa.String(64), nullable=False),
            sa.Column("entries", sa.Integer(), nullable=False),
            sa.Column("partial", sa.Boolean(), nullable=False),
            sa.Column("skipped", sa.JSON(), nullable=False),
            sa.PrimaryKeyConstraint("id", name="pk_exports"),
        )
        op.create_index("ix_exports_hardware", "exports", ["hardware"])
        op.create_index("ix_exports_model", "exports", ["model"])


def downgrade() -> None:
    op.drop_index("ix_exports_model", table_name="exports")
    op.drop_index("ix_exports_hardware", table_name="exports")
    op.drop_table("exports")
    op.drop_column("runs", "fidelity")
    op.drop_index("ix_runs_search_id", table_name="runs")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("fk_runs_search_id_searches", "runs", type_="foreignkey")
    op.drop_column("runs", "search_id")
    op.drop_index("ix_searches_token_id", table_name="searches")
    op.drop_index("ix_searches_variant_id", table_name="searches")
    op.drop_table("searches")
