"""Run variables (S004 §1.2): the folded map of business facts tools set, for GetRun.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        # JSON object of name -> string/number/bool; NULL until a tool sets one (sealed at rest).
        batch.add_column(sa.Column("variables", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("variables")
