"""schema compatibility: the revision the schema is at and the oldest revision whose code still runs against
it (``scheduler.store.migrate`` writes the one row at every migration), so that the previous release, rolled
back onto a schema one expand-only migration ahead, runs instead of refusing

Revision ID: 0014_schema_compat
Revises: 0010_preemption_notice
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_schema_compat"
down_revision = "0013_job_progress"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schema_compat",
        sa.Column("revision", sa.String(length=64), nullable=False),
        sa.Column("compatible_with", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("revision"),
    )


def downgrade() -> None:
    op.drop_table("schema_compat")
