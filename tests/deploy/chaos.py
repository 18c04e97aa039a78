"""Dropped database connections for the fault tests: a scratch PostgreSQL database of the test's own
(every connection to it may be terminated, unlike the shared test database whose schemas the
fixtures of tests/db/fixtures.py hold open), and a thread that terminates every connection to it
now and then, as an operator's `pg_terminate_backend` (or a failover) would."""

from __future__ import annotations

import threading
from typing import Iterator

import pytest
from sqlalchemy.engine import make_url

from tests.db.fixtures import scratch_database

# The statement, sparing only the killers themselves (two may run at once).
TERMINATE = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'kvtune-chaos'")


@pytest.fixture
def scratch_pg() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test (dropped after it, whatever is still
    connected); yields its SQLAlchemy URL."""
    yield from scratch_database("kvtune_chaos")


def terminate_all(url: str) -> int:
    """Terminate every other connection to `url`'s database; how many there were."""
    import psycopg

    u = make_url(url)
    with psycopg.connect(host=u.host or "127.0.0.1", port=u.port or 5432, user=u.username or "postgres",
                         password=u.password, dbname=u.database, autocommit=True, connect_timeout=5,
                         application_name="kvtune-chaos") as conn:
        return sum(1 for (ok,) in conn.execute(TERMINATE).fetchall() if ok)


class Killer:
    """`terminate_all` every `period_s` in a thread, at most `limit` times, while in the `with`."""

    def __init__(self, url: str, period_s: float, limit: int = 1000) -> None:
        self.url, self.period_s, self.limit = url, period_s, limit
        self.rounds = self.killed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-killer", daemon=True)

    def _run(self) -> None:
        while self.rounds < self.limit and not self._stop.wait(self.period_s):
            self.killed += terminate_all(self.url)
            self.rounds += 1

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
