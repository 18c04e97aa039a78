"""Engines and the one session helper every database operation goes through.

`Database.run(fn)` runs `fn(session)` in one transaction and commits it. It is the only place that
turns driver errors into domain errors (db.errors), and it retries the whole transaction, with
jittered exponential backoff, when the database answers "busy" (SQLite's `database is locked`) or
PostgreSQL aborts it as a serialization failure or deadlock victim. So no caller ever sees a
"database is locked": at worst, after every retry, a `DatabaseUnavailable`.

SQLite: WAL (readers never block the writer), a busy timeout, and write transactions opened with
`BEGIN IMMEDIATE` so that two writers queue on the busy handler instead of both reading under a
shared lock and deadlocking when they upgrade (the one case the busy timeout does not cover).
"""

from __future__ import annotations

import logging
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from db.errors import Conflict, DatabaseUnavailable, DomainError, InvalidData

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_SQLITE_BUSY_MS = 30_000
# A client stopped inside a transaction (a frozen worker, a stalled VM) keeps its row locks until its
# session ends. PostgreSQL ends such a session after this long, so nobody waits on a lock holder
# that is not running; this service's transactions last milliseconds.
DEFAULT_PG_IDLE_IN_TRANSACTION_MS = 120_000
# PostgreSQL SQLSTATEs worth retrying: serialization_failure, deadlock_detected, lock_not_available,
# and the session ended by the server (admin_shutdown: `pg_terminate_backend`, crash_shutdown,
# cannot_connect_now). Class 08 (connection exceptions) is retried too. A dropped pooled
# connection never gets this far: the engine pre-pings (`pool_pre_ping`) and replaces it.
_PG_RETRY_STATES = {"40001", "40P01", "55P03", "57P01", "57P02", "57P03"}


def normalize_url(url: str) -> str:
    """`postgresql://` (what people paste) means psycopg 3 here, not psycopg2 (not installed)."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def is_retryable(exc: BaseException) -> bool:
    """Busy/locked on SQLite, serialization or deadlock on PostgreSQL, a dropped connection."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, OperationalError):
        msg = str(exc.orig).lower()
        if "database is locked" in msg or "database is busy" in msg or "database table is locked" in msg:
            return True
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None), "sqlstate", None)
    return state in _PG_RETRY_STATES or (isinstance(state, str) and state.startswith("08"))


class Database:
    """One per process (the API, each worker). Thread-safe: sessions are per call."""

    def __init__(self, url: str, *, sqlite_busy_ms: int = DEFAULT_SQLITE_BUSY_MS, retries: int = 8, pool_size: int = 5,
                 pg_idle_in_transaction_ms: int = DEFAULT_PG_IDLE_IN_TRANSACTION_MS) -> None:
        self.url = normalize_url(url)
        self.retries = retries
        u = make_url(self.url)
        self.dialect = u.get_backend_name()
        if self.dialect == "sqlite":
            if u.database and u.database != ":memory:":
                Path(u.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(
                self.url, connect_args={"timeout": sqlite_busy_ms / 1000, "check_same_thread": False}
            )
            _sqlite_setup(self.engine, sqlite_busy_ms)
        else:
            self.engine = create_engine(self.url, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size)
            if self.dialect == "postgresql":
                _pg_setup(self.engine, pg_idle_in_transaction_ms)
        # Write transactions on SQLite take the write lock up front (see the module docstring).
        self._write_engine = self.engine.execution_options(sqlite_begin="IMMEDIATE")

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def optuna_storage_url(self) -> str:
        """The URL Optuna's RDB storage gets: the same database; on SQLite with the same busy timeout
        (pysqlite takes `timeout` from the URL query)."""
        u: URL = make_url(self.url)
        if self.is_sqlite and "timeout" not in u.query:
            u = u.update_query_dict({"timeout": str(DEFAULT_SQLITE_BUSY_MS // 1000)})
        return u.render_as_string(hide_password=False)

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """One transaction, committed on success, rolled back on error; driver errors come out as
        domain errors. No retry here (a `with` body cannot be re-run): use `run` for that."""
        s = Session(bind=self._write_engine if write else self.engine, expire_on_commit=False)
        try:
            with s.begin():
                yield s
        except DomainError:
            raise
        except IntegrityError as e:
            raise Conflict(f"conflicting write: {_short(e)}") from e
        except DataError as e:  # a value its column cannot hold: the data's fault, not the database's
            raise InvalidData(f"the database refused a value: {_short(e)}") from e
        except OverflowError as e:  # SQLite's driver: an int beyond 64 bits, refused before the database
            raise InvalidData(f"the database refused a value: {e}") from e
        except SQLAlchemyError as e:
            raise DatabaseUnavailable(f"database error: {_short(e)}") from e
        finally:
            s.close()

    def run(self, fn: Callable[[Session], T], *, write: bool = True, retries: int | None = None) -> T:
        """`fn(session)` in one transaction, retried on busy/serialization errors with backoff."""
        attempts = (self.retries if retries is None else retries) + 1
        delay = 0.02
        for i in range(attempts):
            try:
                with self.session(write=write) as s:
                    return fn(s)
            except (DatabaseUnavailable, Conflict) as e:
                cause = e.__cause__
                if cause is None or not is_retryable(cause) or i == attempts - 1:
                    if cause is not None and is_retryable(cause):
                        raise DatabaseUnavailable(f"database stayed busy through {attempts} attempts") from cause
                    raise
                log.debug("retrying a busy transaction (%d/%d): %s", i + 1, attempts, cause)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def dispose(self) -> None:
        self.engine.dispose()


def _short(e: BaseException, limit: int = 300) -> str:
    msg = str(getattr(e, "orig", None) or e).strip().splitlines()
    return (msg[0] if msg else type(e).__name__)[:limit]


def _pg_setup(engine: Engine, idle_in_transaction_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"SET idle_in_transaction_session_timeout = {int(idle_in_transaction_ms)}")
        cur.close()
        dbapi_conn.commit()  # a session setting: keep it past this first implicit transaction


def _sqlite_setup(engine: Engine, busy_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy (not the sqlite3 module) emit BEGIN, so we can choose IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")
