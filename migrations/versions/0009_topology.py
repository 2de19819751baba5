"""topology domains (R17): a node's domain as the executor reports it, a job's requirement

Revision ID: 0009_topology
Revises: 0008_min_runtime
Create Date: 2026-11-27 19:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_topology"
down_revision = "0008_min_runtime"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("domain", sa.String(length=253), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("topology", sa.String(length=16), nullable=False, server_default="preferred")
        )


def downgrade() -> None:
    # SQLite drops the columns in place (3.35+): a batch copy of ``jobs`` would drop a table that replica
    # rows refer to
    for table, column in (("jobs", "topology"), ("nodes", "domain")):
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            batch_op.drop_column(column)
