"""project usage: decayed GPU-seconds above quota, when it was last brought up to date, the weight it left

Revision ID: 0007_project_usage
Revises: 0006_job_eta
Create Date: 2026-11-25 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_project_usage"
down_revision = "0006_job_eta"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("usage_gpu_seconds", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("usage_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("usage_weight", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("usage_weight")
        batch_op.drop_column("usage_at")
        batch_op.drop_column("usage_gpu_seconds")
