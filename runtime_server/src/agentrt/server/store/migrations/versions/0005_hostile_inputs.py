"""Request hashes, fault counts, payloads by reference, tombstones and the indexes admission and
retention query by (DESIGN R8.2, R8.4, R10.4).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("request_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("fault_count", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("input_ref", sa.Text, nullable=True))
        batch.add_column(sa.Column("output_ref", sa.Text, nullable=True))
        batch.add_column(sa.Column("pruned_ms", sa.BigInteger, nullable=True))
    op.create_index("ix_runs_tenant_phase", "runs", ["tenant_id", "phase"])
    op.create_index("ix_runs_phase_updated", "runs", ["phase", "updated_ms"])
    op.create_table(
        "run_payloads",
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("payload_id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("location", sa.String(400), nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "payload_id", name="pk_run_payloads"),
    )


def downgrade() -> None:
    op.drop_table("run_payloads")
    op.drop_index("ix_runs_phase_updated", table_name="runs")
    op.drop_index("ix_runs_tenant_phase", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("pruned_ms")
        batch.drop_column("output_ref")
        batch.drop_column("input_ref")
        batch.drop_column("fault_count")
        batch.drop_column("request_hash")
