"""GPU fractions: a job's share of one GPU per replica, a replica's share and the shared GPU of its node it
runs on; expand-only (nullable columns)

Revision ID: 0015_gpu_fractions
Revises: 0014_schema_compat
Create Date: 2026-11-28 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_gpu_fractions"
down_revision = "0014_schema_compat"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_fraction", sa.String(length=16), nullable=True))
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("share", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("shared_gpu", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("shared_gpu")
        batch_op.drop_column("share")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("gpu_fraction")
