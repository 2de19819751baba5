"""job ETA: a job's declared expected duration, its first start, its latest start-time forecast

Revision ID: 0006_job_eta
Revises: 0005_allowed_replicas
Create Date: 2026-11-25 06:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_job_eta"
down_revision = "0005_allowed_replicas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expected_duration", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("started_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("eta", sa.JSON(), nullable=True))
        batch_op.create_index("ix_jobs_finished_at", ["finished_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_finished_at")
        batch_op.drop_column("eta")
        batch_op.drop_column("started_at")
        batch_op.drop_column("expected_duration")
