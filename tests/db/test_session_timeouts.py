"""A client stopped inside a transaction must not hold its locks forever (PostgreSQL)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from db import jobs, migrate
from db.session import Database
from tuner.core import Bucket
from tuner.keys import make_key


def test_a_session_idle_inside_a_transaction_is_ended_and_its_lock_freed(pg_database: str) -> None:
    frozen = Database(pg_database, pg_idle_in_transaction_ms=800)
    other = Database(pg_database, retries=0)
    try:
        migrate.upgrade(frozen)
        job = jobs.submit(frozen, jobs.JobSpec(key=make_key("pack", "interp", formats=["fp8_528"]),
                                               buckets=(Bucket("N", 1, 4),), trials=1))
        with frozen.engine.connect() as conn:
            assert conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "800ms"
            # (SHOW began the transaction: SQLAlchemy autobegins.)
            conn.execute(text("SELECT id FROM jobs WHERE id = :i FOR UPDATE"), {"i": job.id})
            # The holder now does nothing, as a stopped process would. Another writer gets the row
            # once the server has ended the idle session, instead of waiting for ever.
            t0 = time.monotonic()

            def take(s) -> int:  # noqa: ANN001
                s.execute(text("SET LOCAL lock_timeout = '10s'"))
                return s.execute(text("SELECT id FROM jobs WHERE id = :i FOR UPDATE"), {"i": job.id}).scalar_one()

            assert other.run(take) == job.id
            assert 0.5 < time.monotonic() - t0 < 10
            with pytest.raises(DBAPIError):  # the holder's session is gone: nothing it does can land
                conn.execute(text("UPDATE jobs SET trials = 99 WHERE id = :i"), {"i": job.id})
        assert jobs.get(other, job.id).trials == 1
    finally:
        frozen.dispose()
        other.dispose()
