"""job pods: a job's pod template, and pod defaults per project and department (each a JSON document;
NULL: none)

Revision ID: 0011_pod_templates
Revises: 0010_preemption_notice
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_pod_templates"
down_revision = "0010_preemption_notice"
branch_labels = None
depends_on = None

COLUMNS = (("jobs", "pod_template"), ("projects", "pod_defaults"), ("departments", "pod_defaults"))


def upgrade() -> None:
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column(column, sa.JSON(), nullable=True))


def downgrade() -> None:
    # SQLite drops the columns in place (3.35+): a batch copy of ``departments`` would drop the table that
    # ``projects`` rows refer to, which foreign keys refuse
    for table, column in COLUMNS:
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            batch_op.drop_column(column)
