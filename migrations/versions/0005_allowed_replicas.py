"""allowed replica counts of a job (R16)

Revision ID: 0005_allowed_replicas
Revises: 0004_job_checkpoints
Create Date: 2026-11-25 06:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_allowed_replicas"
down_revision = "0004_job_checkpoints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("allowed_replicas", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("allowed_replicas")
