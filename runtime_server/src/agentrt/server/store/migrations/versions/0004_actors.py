"""Who started a run and who asked to cancel it (DESIGN R10.2: every change records its actor).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("created_by", sa.String(200), nullable=False, server_default=""))
        batch.add_column(sa.Column("cancel_requested_by", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("cancel_requested_by")
        batch.drop_column("created_by")
