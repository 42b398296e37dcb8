"""Cleanups (issue 11): where a run's registered cleanups stand, how many may have left a
resource behind, and when the background job retries them.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cleanup_status", sa.String(16), nullable=True))
        batch.add_column(sa.Column("cleanups_unknown", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("cleanup_due_ms", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("cleanup_retries", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_runs_cleanup_due", "runs", ["cleanup_status", "cleanup_due_ms"])


def downgrade() -> None:
    op.drop_index("ix_runs_cleanup_due", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("cleanup_retries")
        batch.drop_column("cleanup_due_ms")
        batch.drop_column("cleanups_unknown")
        batch.drop_column("cleanup_status")
