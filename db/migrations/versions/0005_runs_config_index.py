"""runs(variant_id, config_key, shape_key, batch_bucket, hardware): the winner re-rank asks, for every
passing candidate, whether the same config failed anywhere in its bucket; without this index that
check scans the whole bucket per candidate, and a 10,000-run drain slowed from 9.9 to 1.7 runs/s.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_runs_config_bucket", "runs",
                    ["variant_id", "config_key", "shape_key", "batch_bucket", "hardware"])


def downgrade() -> None:
    op.drop_index("ix_runs_config_bucket", table_name="runs")
