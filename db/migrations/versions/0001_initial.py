"""initial schema: variants, jobs, device fingerprints, runs, winners

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "variants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("slot", sa.String(64), nullable=False),
        sa.Column("language", sa.String(16), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("config_space", sa.JSON(), nullable=False),
        sa.Column("constraints", sa.JSON(), nullable=False),
        sa.Column("n_points", sa.Integer(), nullable=False),
        sa.Column("declares_library", sa.Boolean(), nullable=False),
        sa.Column("author", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(128), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_variants"),
        sa.UniqueConstraint("content_hash", name="uq_variants_content_hash"),
        sa.ForeignKeyConstraint(["parent_id"], ["variants.id"], name="fk_variants_parent_id_variants",
                                ondelete="SET NULL"),
    )
    op.create_index("ix_variants_slot", "variants", ["slot"])
    op.create_index("ix_variants_author", "variants", ["author"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("deployment", sa.JSON(), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("hardware", sa.String(32), nullable=False),
        sa.Column("queue", sa.String(48), nullable=False),
        sa.Column("configs", sa.JSON(), nullable=False),
        sa.Column("shape_filter", sa.JSON(), nullable=True),
        sa.Column("cancelled", sa.Boolean(), nullable=False),
        sa.Column("cancelled_at", TS, nullable=True),
        sa.Column("submitted_by", sa.String(128), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], name="fk_jobs_variant_id_variants"),
    )
    op.create_index("ix_jobs_variant_id", "jobs", ["variant_id"])
    op.create_index("ix_jobs_model_name", "jobs", ["model_name"])

    op.create_table(
        "device_fingerprints",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("hardware_class", sa.String(32), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("bandwidth_gbs", sa.Float(), nullable=True),
        sa.Column("first_seen_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_device_fingerprints"),
    )

    op.create_table(
        "runs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("slot", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_key", sa.Text(), nullable=False),
        sa.Column("shape", sa.JSON(), nullable=False),
        sa.Column("shape_key", sa.String(256), nullable=False),
        sa.Column("shape_name", sa.String(64), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("batch_bucket", sa.String(16), nullable=False),
        sa.Column("hardware", sa.String(32), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("verdict", sa.String(32), nullable=True),
        sa.Column("reason_code", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("compile", sa.JSON(), nullable=True),
        sa.Column("check", sa.JSON(), nullable=True),
        sa.Column("bench", sa.JSON(), nullable=True),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("baseline_median_us", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("speedup_ci_lo", sa.Float(), nullable=True),
        sa.Column("speedup_ci_hi", sa.Float(), nullable=True),
        sa.Column("frac_of_floor", sa.Float(), nullable=True),
        sa.Column("uses_library", sa.Boolean(), nullable=True),
        sa.Column("fingerprint_id", sa.String(128), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("job_id", "config_key", "shape_key", "m", name="uq_runs_job_id_config_key_shape_key_m"),
        sa.CheckConstraint("status IN ('queued', 'running', 'done', 'cancelled')", name="ck_runs_status"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_runs_job_id_jobs", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], name="fk_runs_variant_id_variants"),
        sa.ForeignKeyConstraint(["fingerprint_id"], ["device_fingerprints.id"],
                                name="fk_runs_fingerprint_id_device_fingerprints"),
    )
    op.create_index("ix_runs_variant_id", "runs", ["variant_id"])
    op.create_index("ix_runs_job_status", "runs", ["job_id", "status"])
    op.create_index("ix_runs_bucket", "runs", ["slot", "shape_key", "batch_bucket", "hardware", "status"])
    op.create_index("ix_runs_lease", "runs", ["status", "lease_expires_at"])

    op.create_table(
        "winners",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("slot", sa.String(64), nullable=False),
        sa.Column("shape_key", sa.String(256), nullable=False),
        sa.Column("shape_name", sa.String(64), nullable=False),
        sa.Column("batch_bucket", sa.String(16), nullable=False),
        sa.Column("hardware", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("is_stock", sa.Boolean(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_winners"),
        sa.UniqueConstraint("slot", "shape_key", "batch_bucket", "hardware",
                            name="uq_winners_slot_shape_key_batch_bucket_hardware"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_winners_run_id_runs", ondelete="SET NULL"),
    )


def downgrade() -> None:
    op.drop_table("winners")
    op.drop_index("ix_runs_lease", table_name="runs")
    op.drop_index("ix_runs_bucket", table_name="runs")
    op.drop_index("ix_runs_job_status", table_name="runs")
    op.drop_index("ix_runs_variant_id", table_name="runs")
    op.drop_table("runs")
    op.drop_table("device_fingerprints")
    op.drop_index("ix_jobs_model_name", table_name="jobs")
    op.drop_index("ix_jobs_variant_id", table_name="jobs")
    op.drop_table("jobs")
    op.drop_index("ix_variants_author", table_name="variants")
    op.drop_index("ix_variants_slot", table_name="variants")
    op.drop_table("variants")
