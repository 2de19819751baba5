"""in-place launches: the launch generation of each replica, the job's agent token, the agents' reports

Revision ID: 0003_inplace_launches
Revises: 0002_node_state
Create Date: 2026-11-25 06:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_inplace_launches"
down_revision = "0002_node_state"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("launch_generation", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("launch_at", sa.Float(), nullable=True))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent_token_hash", sa.String(length=64), nullable=True))
    op.create_table(
        "agent_reports",
        sa.Column("replica_id", sa.Integer(), sa.ForeignKey("replicas.id", ondelete="CASCADE"), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("port_generation", sa.Integer(), nullable=True),
        sa.Column("reported_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("replica_id"),
    )
    op.create_index("ix_agent_reports_job_id", "agent_reports", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_agent_reports_job_id", table_name="agent_reports")
    op.drop_table("agent_reports")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("agent_token_hash")
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("launch_at")
        batch_op.drop_column("launch_generation")
