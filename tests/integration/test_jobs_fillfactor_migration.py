"""Migration ``0016_jobs_fillfactor``: on PostgreSQL the jobs table leaves 30 % of each page free (the engine
rewrites thousands of jobs' notes every cycle: with full pages almost none of those updates stayed on their
page, each one added index entries and the table grew); the rows are kept, it downgrades cleanly, and on
SQLite it changes nothing."""

from __future__ import annotations

from migrationkit import up_down_up
from sqlalchemy import text

from scheduler.store.db import Database
from scheduler.store.migrate import migrate_to, upgrade

BEFORE = "0015_gpu_fractions"


def fillfactor(db: Database) -> list[str] | None:
    with db.read() as session:
        return session.execute(
            text("SELECT reloptions FROM pg_class WHERE oid = CAST('jobs' AS regclass)")
        ).scalar_one()


def test_jobs_fillfactor_migration_up_down_up(db_url: str) -> None:
    def upgraded(db: Database) -> None:
        if not db.is_sqlite:
            assert fillfactor(db) == ["fillfactor=70"]

    def round_trip(db: Database) -> None:
        upgraded(db)
        with db.read() as session:
            assert session.execute(text("SELECT name FROM projects")).all() == [("a",)]

    up_down_up(db_url, BEFORE, {}, after_upgrade=upgraded, after_round_trip=round_trip)


def test_the_fillfactor_comes_with_the_migration_and_goes_with_its_downgrade(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        migrate_to(db, BEFORE)
        assert fillfactor(db) is None
        upgrade(db)
        assert fillfactor(db) == ["fillfactor=70"]
        migrate_to(db, BEFORE, down=True)
        assert fillfactor(db) is None
    finally:
        db.dispose()
