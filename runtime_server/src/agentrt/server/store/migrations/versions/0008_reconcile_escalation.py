"""Waits that scale and escalate (issue 11): the reconcile attempt count of an unknown outcome
survives its run's parking, a run whose wait was escalated is marked for people, and a partial
run keeps the summary of its calls.

Revision ID: 0008
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("reconcile_attempts", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("needs_attention", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("call_summary", sa.Text, nullable=True))
    op.create_index("ix_runs_tenant_attention", "runs", ["tenant_id", "needs_attention"])


def downgrade() -> None:
    op.drop_index("ix_runs_tenant_attention", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("call_summary")
        batch.drop_column("needs_attention")
        batch.drop_column("reconcile_attempts")
