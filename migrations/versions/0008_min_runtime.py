"""minimum runtime (R15): seconds a job is spared by reclaim after a start or resize, per project (NULL:
its department's) and per department (0: off)

Revision ID: 0008_min_runtime
Revises: 0007_project_usage
Create Date: 2026-11-27 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_min_runtime"
down_revision = "0007_project_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("min_runtime_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("departments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("min_runtime_seconds", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    # SQLite drops the columns in place (3.35+): a batch copy of ``departments`` would drop the table that
    # ``projects`` rows refer to, which foreign keys refuse
    for table in ("departments", "projects"):
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            batch_op.drop_column("min_runtime_seconds")
