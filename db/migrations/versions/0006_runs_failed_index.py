"""runs(variant_id, config_key, shape_key, batch_bucket, hardware) WHERE the run failed: a partial index
for the winner's "did this config fail anywhere in the bucket" probe. Recording a result now updates
the winner from the current winner and the new run (db/queries/winners.py update_winner); the probe
it makes per result is a point lookup into the failed runs only, whatever the bucket's size.

The predicate is the one the query spells (db.queries.winners.failing_run, with literals): PostgreSQL
and SQLite use a partial index only when the query's WHERE implies the index's.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here (a migration must not change when models.py does): models.FAILED_RUNS_PREDICATE today.
FAILED = "status = 'done' AND verdict NOT IN ('passed', 'compiled')"


def upgrade() -> None:
    op.create_index("ix_runs_failed_config", "runs",
                    ["variant_id", "config_key", "shape_key", "batch_bucket", "hardware"],
                    postgresql_where=sa.text(FAILED), sqlite_where=sa.text(FAILED))


def downgrade() -> None:
    op.drop_index("ix_runs_failed_config", table_name="runs")
