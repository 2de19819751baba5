"""Upgrades and rollbacks on real SQLite and PostgreSQL (``scheduler.store.migrate``, N/N+1).

Every migration step is expand-only (nothing dropped, renamed or tightened; new columns nullable or with a
server default); the previous release's code (its rows, frozen in ``previous_release_models.py``) inserts
and reads against a schema migrated to head; a schema one expand-only migration ahead of this code is run
against (it says so), one that is not is refused with what to do; pods that start together migrate once.
"""

from __future__ import annotations

import threading
from typing import Any

import previous_release_models as old
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select, text
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.client.cli.main import app
from scheduler.engine.leader import leadership_for
from scheduler.store.db import Database
from scheduler.store.migrate import (
    CONTRACTING,
    PREVIOUS_RELEASE,
    SchemaTooNewError,
    check_not_newer,
    current_revision,
    downgrade_plan,
    head_revision,
    known_revisions,
    migrate_to,
    upgrade,
)

Schema = dict[str, dict[str, dict[str, Any]]]


@pytest.fixture
def db(db_url: str) -> Any:
    database = Database(db_url)
    yield database
    database.dispose()


def schema(db: Database) -> Schema:
    with db.write_engine.connect() as conn:
        inspector = inspect(conn)
        return {
            table: {c["name"]: c for c in inspector.get_columns(table)}
            for table in inspector.get_table_names()
            if table != "alembic_version"
        }


def contractions(before: Schema, after: Schema) -> list[str]:
    """What a step did that the code of the revision before it may trip on (empty: expand-only)."""
    found = [f"table {t} dropped" for t in before if t not in after]
    for table, columns in before.items():
        for name, column in columns.items():
            new = after.get(table, {}).get(name)
            if table in after and new is None:
                found.append(f"column {table}.{name} dropped (or renamed)")
            elif new is not None and column["nullable"] and not new["nullable"]:
                found.append(f"column {table}.{name} made NOT NULL")
            elif new is not None and str(new["type"]) != str(column["type"]):
                found.append(f"column {table}.{name} changed from {column['type']} to {new['type']}")
    for table in set(before) & set(after):
        for name, column in after[table].items():
            if name not in before[table] and not column["nullable"] and column.get("default") is None:
                found.append(f"column {table}.{name} added NOT NULL without a server default")
    return found


def test_the_expand_only_check_sees_what_the_previous_code_would_trip_on() -> None:
    before: Schema = {"jobs": {"id": {"nullable": False, "type": "INTEGER", "default": None}}}
    dropped: Schema = {}
    strict: Schema = {
        "jobs": {
            "id": {"nullable": False, "type": "INTEGER", "default": None},
            "owner": {"nullable": False, "type": "VARCHAR", "default": None},
        }
    }
    assert contractions(before, dropped) == ["table jobs dropped"]
    assert contractions(before, strict) == ["column jobs.owner added NOT NULL without a server default"]
    assert contractions(before, before) == []


def test_every_migration_step_is_expand_only(db: Database) -> None:
    """N/N+1: each step, base to head, leaves the schema usable by the code of the revision before it."""
    steps = list(reversed(known_revisions()))
    before = schema(db)
    for revision in steps:
        migrate_to(db, revision)
        after = schema(db)
        if revision not in CONTRACTING:
            assert contractions(before, after) == [], revision
        before = after
    assert current_revision(db) == head_revision()


def test_the_previous_release_works_against_the_schema_at_head(db: Database) -> None:
    """The previous release's rows (frozen) insert and read back on a schema migrated to head."""
    migrate_to(db, PREVIOUS_RELEASE)
    upgrade(db)
    with db.write_engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), old.Base.metadata)
    needed = [d for d in diffs if not (isinstance(d, tuple) and d[0] in ("remove_table", "remove_column"))]
    assert needed == []  # all it has is there; what head added, it does not know and does not need
    with Session(db.write_engine) as session, session.begin():
        department = old.DepartmentRow(name="research", deserved_gpus=8, created_at=1.0)
        project = old.ProjectRow(name="a", deserved_gpus=4, department=department, created_at=1.0)
        job = old.JobRow(
            project=project, name="train", status="running", workers=1, min_replicas=1, max_replicas=2,
            gpus_per_replica=1, command=["python", "train.py"], env={}, created_at=2.0, submitted_at=2.0,
        )  # fmt: skip
        session.add_all([department, project, job, old.NodeRow(name="gpu-0", gpus=4, schedulable=True)])
        session.flush()
        session.add(old.ReplicaRow(job_id=job.id, index=0, node="gpu-0", gpus=1, created_at=3.0))
        session.add(old.EventRow(time=3.0, kind="start", project="a", job="train", replicas=[0], reason="r"))
    with Session(db.engine) as session:
        job = session.scalars(select(old.JobRow)).one()
        assert (job.project.name, job.project.department.name if job.project.department else None) == (
            "a",
            "research",
        )
        assert [(r.index, r.node, r.status) for r in job.replicas] == [(0, "gpu-0", "starting")]
        assert session.scalars(select(old.EventRow.kind)).all() == ["start"]


def _pretend_newer(db: Database, revision: str, compatible: str | None) -> None:
    """The database as a newer Tide leaves it: its revision, and (unless None) the compatibility it records."""
    with db.write() as session:
        session.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
        session.execute(text("DELETE FROM schema_compat"))
        if compatible is not None:
            session.execute(
                text("INSERT INTO schema_compat (revision, compatible_with) VALUES (:r, :c)"),
                {"r": revision, "c": compatible},
            )


def test_upgrade_records_what_code_the_schema_is_compatible_with(db: Database) -> None:
    upgrade(db)
    with db.read() as session:
        rows = session.execute(text("SELECT revision, compatible_with FROM schema_compat")).all()
    assert [tuple(r) for r in rows] == [(head_revision(), PREVIOUS_RELEASE)]


def test_a_schema_one_expand_only_migration_ahead_is_run_against(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """`kubectl rollout undo` after an expand-only migration: the older code runs, saying why."""
    upgrade(db)
    _pretend_newer(db, "0099_from_the_next_release", head_revision())
    check_not_newer(db)
    assert upgrade(db) == "0099_from_the_next_release"  # nothing migrated, nothing refused
    assert "declares code from" in caplog.text
    assert current_revision(db) == "0099_from_the_next_release"


def test_a_schema_ahead_by_a_contracting_migration_is_refused_with_what_to_do(db: Database) -> None:
    upgrade(db)
    _pretend_newer(db, "0099_from_the_next_release", "0099_from_the_next_release")
    with pytest.raises(SchemaTooNewError) as refused:
        upgrade(db)
    message = str(refused.value)
    assert "readable by Tide from revision '0099_from_the_next_release' on" in message
    assert f"tide db downgrade {head_revision()}" in message
    _pretend_newer(db, "0099_from_the_next_release", None)  # a newer Tide that recorded nothing
    with pytest.raises(SchemaTooNewError, match="newer version of Tide"):
        check_not_newer(db)


def test_pods_that_start_together_migrate_once(db: Database) -> None:
    """Three services starting at once against an empty database: one migrates, the others wait for it."""
    errors: list[BaseException] = []
    results: list[str] = []
    gate = threading.Barrier(3)

    def start() -> None:
        mine = Database(str(db.url.render_as_string(hide_password=False)))
        try:
            gate.wait()
            results.append(upgrade(mine))
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            mine.dispose()

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and results == [head_revision()] * 3


def test_a_downgrade_plan_lists_what_it_drops(db: Database) -> None:
    upgrade(db)
    plan = downgrade_plan(db, "0009_topology")
    assert plan.steps[-1] == "0010_preemption_notice" and plan.steps[0] == head_revision()
    assert "schema_compat" in plan.dropped_tables
    assert {"projects.preemption_notice_seconds", "replicas.noticed_at"} <= set(plan.dropped_columns)
    assert current_revision(db) == head_revision()  # nothing touched
    with pytest.raises(ValueError, match="unknown schema revision"):
        downgrade_plan(db, "0042_nope")
    with pytest.raises(ValueError, match="nothing to downgrade"):
        downgrade_plan(db, head_revision())


def test_tide_db_downgrade_dry_run_then_refused_while_a_leader_lives_then_done(db_url: str) -> None:
    """`tide db`: the plan, a refusal while a service leads (its election held), then the downgrade."""
    runner = CliRunner()
    env = {"TIDE_DATABASE_URL": db_url}
    upgraded = runner.invoke(app, ["db", "upgrade"], env=env)
    assert upgraded.exit_code == 0 and f"schema at {head_revision()}" in upgraded.output
    dry = runner.invoke(app, ["db", "downgrade", "0009_topology", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "drops table schema_compat" in dry.output and "drops column replicas.noticed_at" in dry.output
    db = Database(db_url)
    leader = leadership_for(db)
    try:
        assert leader.holds()
        refused = runner.invoke(app, ["db", "downgrade", "0009_topology"], env=env)
        assert refused.exit_code == 2 and "a Tide service leads on this database" in refused.output
        assert current_revision(db) == head_revision()
    finally:
        leader.release()
    done = runner.invoke(app, ["db", "downgrade", "0009_topology"], env=env)
    assert done.exit_code == 0, done.output
    assert current_revision(db) == "0009_topology"
    unknown = runner.invoke(app, ["db", "downgrade", "0042_nope"], env=env)
    assert unknown.exit_code == 2 and "unknown schema revision" in unknown.output
    current = runner.invoke(app, ["db", "current"], env=env)
    assert "database: 0009_topology" in current.output
    db.dispose()
