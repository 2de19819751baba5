"""resize cost (R18): seconds a resize pauses a job, per project (NULL: its department's) and per department
(NULL: the service's default); per job, its measured estimate, how many resizes it measured and when the
resize being measured was decided

Revision ID: 0012_resize_cost
Revises: 0010_preemption_notice
Create Date: 2026-11-28 08:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_resize_cost"
down_revision = "0011_pod_templates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("projects", "departments"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("resize_cost_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resize_cost_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("resizes_measured", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("resize_from", sa.Float(), nullable=True))


def downgrade() -> None:
    # SQLite drops the columns in place (3.35+): a batch copy of ``departments`` would drop the table that
    # ``projects`` rows refer to, which foreign keys refuse
    for table, columns in (
        ("jobs", ("resize_from", "resizes_measured", "resize_cost_seconds")),
        ("departments", ("resize_cost_seconds",)),
        ("projects", ("resize_cost_seconds",)),
    ):
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            for column in columns:
                batch_op.drop_column(column)
