"""runs: the incumbent timed beside each run (control_run_id, control_median_us, vs_control and its CI) and
ranked_us, what winners rank by. Existing runs had no control: their ranked_us is their median.

Why: winners were ranked by absolute median across jobs, and two sessions on one hardware class differ by
3-8% (H100 tables ZP-ZT vs ZX, the same code), so a challenger measured in a slower session could not
displace an incumbent it beat, and a faster session's could displace one it did not beat.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("control_median_us", "vs_control", "vs_control_ci_lo", "vs_control_ci_hi", "ranked_us")


def upgrade() -> None:
    op.add_column("runs", sa.Column("control_run_id", sa.String(36), nullable=True))
    for name in COLUMNS:
        op.add_column("runs", sa.Column(name, sa.Float(), nullable=True))
    op.execute("UPDATE runs SET ranked_us = median_us")


def downgrade() -> None:
    for name in ("control_run_id", *COLUMNS):  # plain columns: SQLite (3.35+) drops them in place
        op.drop_column("runs", name)
