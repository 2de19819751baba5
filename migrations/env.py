"""Alembic environment: runs on the connection that ``scheduler.store.migrate`` hands over.

Contract: online mode only, on ``config.attributes["connection"]``; batch mode on SQLite so later migrations
can alter tables there.
"""

from __future__ import annotations

from alembic import context

from scheduler.store.models import Base


def run() -> None:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run()
