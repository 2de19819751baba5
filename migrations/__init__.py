"""Tide's Alembic history: one line of migrations that runs on SQLite and PostgreSQL.

Shipped inside the package so an installed ``tide`` migrates its database on start
(``scheduler.store.migrate.upgrade``). Migrations are never edited after they land; add a new one.
"""
