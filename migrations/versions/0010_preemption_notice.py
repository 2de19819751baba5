"""preemption notice: seconds of SIGUSR1 before the SIGTERM of a reclaimed or preempted replica, per project
(NULL: its department's) and per department (NULL: none); per replica, the notice it gets and when it got it

Revision ID: 0010_preemption_notice
Revises: 0009_topology
Create Date: 2026-11-28 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_preemption_notice"
down_revision = "0009_topology"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("projects", "departments"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("preemption_notice_seconds", sa.Integer(), nullable=True))
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notice_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("noticed_at", sa.Float(), nullable=True))


def downgrade() -> None:
    # SQLite drops the columns in place (3.35+): a batch copy of ``departments`` would drop the table that
    # ``projects`` rows refer to, which foreign keys refuse
    for table, columns in (
        ("replicas", ("noticed_at", "notice_seconds")),
        ("departments", ("preemption_notice_seconds",)),
        ("projects", ("preemption_notice_seconds",)),
    ):
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            for column in columns:
                batch_op.drop_column(column)
