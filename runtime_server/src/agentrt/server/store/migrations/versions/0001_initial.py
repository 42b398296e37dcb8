"""Initial schema: runs, run_events, run_checkpoints.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("agent_name", sa.String(200), nullable=False),
        sa.Column("agent_spec", sa.Text(), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(400), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("budgets", sa.Text(), nullable=False),
        sa.Column("usage", sa.Text(), nullable=False),
        sa.Column("request_key", sa.String(200), nullable=True),
        sa.Column("session_id", sa.String(200), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.Column("deadline_ms", sa.BigInteger(), nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_ms", sa.BigInteger(), nullable=True),
        sa.Column("lease_generation", sa.BigInteger(), nullable=False),
        sa.Column("cancel_requested_ms", sa.BigInteger(), nullable=True),
        sa.Column("cancel_reason", sa.String(400), nullable=True),
        sa.Column("state_version", sa.Integer(), nullable=False),
        sa.Column("runtime_version", sa.String(40), nullable=False),
        sa.Column("agent_config_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_runs"),
        sa.UniqueConstraint("tenant_id", "request_key", name="uq_runs_tenant_request_key"),
    )
    op.create_index("ix_runs_tenant_created", "runs", ["tenant_id", "created_ms"])
    op.create_index("ix_runs_claim", "runs", ["phase", "lease_expires_ms"])
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_run_events"),
    )
    op.create_table(
        "run_checkpoints",
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("through_seq", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("state_version", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "through_seq", name="pk_run_checkpoints"),
    )


def downgrade() -> None:
    op.drop_table("run_checkpoints")
    op.drop_table("run_events")
    op.drop_index("ix_runs_claim", table_name="runs")
    op.drop_index("ix_runs_tenant_created", table_name="runs")
    op.drop_table("runs")
