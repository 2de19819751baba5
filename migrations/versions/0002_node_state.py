"""node state: cordon, drain and lost nodes, set by an admin

Revision ID: 0002_node_state
Revises: 0001
Create Date: 2026-11-23 14:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_node_state"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("state", sa.String(length=16), nullable=False, server_default="ready"))
        batch_op.add_column(sa.Column("drain_grace", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("state_since", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("state_since")
        batch_op.drop_column("drain_grace")
        batch_op.drop_column("state")
