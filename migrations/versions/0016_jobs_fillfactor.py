"""PostgreSQL: the jobs table keeps 30 % of each page free (fillfactor 70), so the engine's writes of a job's
reason and place in line, every cycle for thousands of waiting jobs, stay on the row's page (HOT updates:
no new index entries); a storage parameter only, nothing else changes (SQLite: nothing to do)

Pages written before keep what they hold until their rows move; ``VACUUM FULL jobs`` rewrites them at once.

Revision ID: 0016_jobs_fillfactor
Revises: 0015_gpu_fractions
Create Date: 2026-11-28 18:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0016_jobs_fillfactor"
down_revision = "0015_gpu_fractions"
branch_labels = None
depends_on = None

FILLFACTOR = 70  # as in scheduler.store.models.JobRow


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE jobs SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE jobs RESET (fillfactor)")
