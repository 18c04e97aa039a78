"""PostgreSQL sessions that end badly: a client stopped inside a transaction must not hold its
locks forever, and a connection the server kills must cost a retry, not a write or a worker."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from db import jobs, migrate
from db.session import Database
from catalog.core import Bucket
from catalog.keys import make_key


def test_a_session_idle_inside_a_transaction_is_ended_and_its_lock_freed(pg_url: str) -> None:
    frozen = Database(pg_url, pg_idle_in_transaction_ms=800)
    other = Database(pg_url, retries=0)
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


def test_a_connection_the_server_kills_is_replaced_and_the_transaction_retried(pg_url: str) -> None:
    """A PostgreSQL restart, failover or an admin's pg_terminate_backend drops connections under a
    worker: the transaction that was on one is retried whole on a fresh connection (its partial
    work was rolled back by the server), and dead pooled connections are replaced at checkout."""
    from sqlalchemy.engine import make_url

    from db import leases, queue
    from tests.db.fixtures import _pg_connect

    # A name of its own for this test's connections, so that only they are killed.
    name = f"kvtune-kill-{uuid.uuid4().hex[:8]}"
    db = Database(make_url(pg_url).update_query_dict({"application_name": name}).render_as_string(hide_password=False))
    admin = _pg_connect(make_url(pg_url).database)
    try:
        migrate.upgrade(db)
        job = jobs.submit(db, jobs.JobSpec(key=make_key("pack", "interp", formats=["fp8_528"]),
                                           buckets=(Bucket("N", 1, 4),), trials=1))
        lease = queue.claim(db, arch="interp", owner="w1", lease_s=30)
        assert lease is not None
        attempts = []

        def write(s) -> None:  # noqa: ANN001
            attempts.append(s.execute(text("SELECT pg_backend_pid()")).scalar_one())
            s.execute(text("UPDATE jobs SET trials = trials + 1 WHERE id = :i"), {"i": job.id})
            if len(attempts) == 1:  # the server ends this session in the middle of the transaction
                # (the timeout makes the call wait until the backend is gone: no race with the next statement)
                assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (attempts[0],)).fetchone()[0]
            s.execute(text("UPDATE jobs SET trials = trials + 1 WHERE id = :i"), {"i": job.id})

        db.run(write)
        assert len(attempts) == 2 and attempts[0] != attempts[1]
        assert jobs.get(db, job.id).trials == 3  # the killed attempt wrote nothing, the retry both updates
        # Every pooled connection of the database dies while idle: the next calls still work.
        killed = admin.execute("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                               "WHERE application_name = %s", (name,)).fetchone()[0]
        assert killed >= 1
        assert leases.heartbeat(db, lease, 30)
        assert jobs.get(db, job.id).status == "running"
    finally:
        admin.close()
        db.dispose()
