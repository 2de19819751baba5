"""job progress: the training speed each job reported at each size it ran (goodput-aware growth)

Revision ID: 0013_job_progress
Revises: 0010_preemption_notice
Create Date: 2026-11-28 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_job_progress"
down_revision = "0012_resize_cost"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("progress_rates", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("progress_rates")
