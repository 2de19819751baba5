"""job checkpoints: when each job last reported a complete checkpoint

Revision ID: 0004_job_checkpoints
Revises: 0003_inplace_launches
Create Date: 2026-11-25 06:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_job_checkpoints"
down_revision = "0003_inplace_launches"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("checkpointed_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("checkpointed_at")
