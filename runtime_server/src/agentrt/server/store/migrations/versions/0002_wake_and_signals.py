"""Reconciliation wake-ups and the per-run signal inbox.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("wake_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "run_signals",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_run_signals_run_id", "run_signals", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_run_signals_run_id", table_name="run_signals")
    op.drop_table("run_signals")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("wake_ms")
