"""Databases for the service tests: every test gets a fresh SQLite file or a fresh PostgreSQL schema.

PostgreSQL: one uniquely named database per test session (dropped at the end), and inside it one
schema per test (the URL's `search_path` option points every connection, Optuna's included, at it;
dropped after the test). So reruns and parallel sessions never see each other's rows.

The PostgreSQL of CI is `KVTUNE_TEST_POSTGRES_URL` (default: the local one). Where none answers, the
PostgreSQL cases are skipped with the reason, unless `KVTUNE_REQUIRE_POSTGRES=1` makes that a failure.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from typing import Iterator

import pytest
from sqlalchemy.engine import make_url

from db import migrate
from db.session import Database

PG_URL = os.environ.get("KVTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def _pg_connect(dbname: str | None = None):  # noqa: ANN202
    import psycopg

    u = make_url(PG_URL)
    return psycopg.connect(
        host=u.host or "127.0.0.1", port=u.port or 5432, user=u.username or "postgres", password=u.password,
        dbname=dbname or u.database or "postgres", autocommit=True, connect_timeout=5,
    )


def scratch_database(prefix: str) -> Iterator[str]:
    """A uniquely named, empty PostgreSQL database, dropped at the end whatever is still connected;
    yields its SQLAlchemy URL. Skips the test where no PostgreSQL answers (see the module doc)."""
    try:
        admin = _pg_connect()
    except Exception as e:  # noqa: BLE001
        if os.environ.get("KVTUNE_REQUIRE_POSTGRES") == "1":
            raise
        pytest.skip(f"no PostgreSQL at {PG_URL}: {e}")
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh database for this session; yields its SQLAlchemy URL."""
    yield from scratch_database("kvtune_test")


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # noqa: ANN001
    """A fresh, empty database URL (SQLite file or PostgreSQL schema) for one test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kvtune.db'}"
        return
    yield from _pg_schema(request.getfixturevalue("pg_database"))


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL schema URL, for tests of PostgreSQL-only behaviour."""
    yield from _pg_schema(pg_database)


def _pg_schema(base: str) -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn = _pg_connect(make_url(base).database)
    conn.execute(f'CREATE SCHEMA "{schema}"')
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A migrated `Database` on `db_url`, disposed after the test."""

    d = Database(db_url)
    migrate.upgrade(d)
    yield d
    d.dispose()


LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


def lapse(d: Database, job_id: int, owner: str | None = None) -> None:
    """End a lease now, as a silent holder's would: the participant `owner`'s lease, or (owner None)
    the job's own. Tests use this instead of short leases and sleeps, which raced on a loaded CI
    machine (the lease ran out before the step that needed it live)."""
    from sqlalchemy import update

    from db.models import Job, JobParticipant

    if owner is None:
        stmt = update(Job).where(Job.id == job_id).values(lease_expires_at=LONG_AGO)
    else:
        stmt = (update(JobParticipant).where(JobParticipant.job_id == job_id, JobParticipant.owner == owner)
                .values(lease_expires_at=LONG_AGO))
    d.run(lambda s: s.execute(stmt))
