"""Schema migrations, runnable from an installed package (`kvtune db upgrade`, or at API/worker start).

Many processes may start at once (an API and eight workers): the upgrade runs inside one transaction
that first takes a lock (an advisory lock on PostgreSQL, `BEGIN IMMEDIATE` on SQLite), so exactly one
of them migrates and the others find the schema at head.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from db.errors import DatabaseUnavailable
from db.session import Database, is_retryable

HERE = Path(__file__).resolve().parent
_PG_LOCK_KEY = 0x6B76_7475  # "kvtu": our advisory lock id for migrations


def alembic_config() -> Config:
    cfg = Config(str(HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(HERE / "migrations"))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(db: Database) -> str | None:
    version_table = alembic_config().get_main_option("version_table")
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": version_table}).get_current_revision()


def _run(db: Database, fn_name: str, revision: str) -> None:
    cfg = alembic_config()
    with db._write_engine.begin() as conn:  # BEGIN IMMEDIATE on SQLite
        if db.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        cfg.attributes["connection"] = conn
        getattr(command, fn_name)(cfg, revision)


def upgrade(db: Database, revision: str = "head", *, attempts: int = 8) -> None:
    """Migrate to `revision`, retrying a dropped connection or a busy database with backoff (a
    worker starting while the database fails over must not exit: each attempt is one transaction,
    so a lost one leaves nothing half-done)."""
    delay = 0.1
    for i in range(attempts):
        try:
            _run(db, "upgrade", revision)
            return
        except Exception as e:  # noqa: BLE001 - classified just below
            if not is_retryable(e) or i == attempts - 1:
                if is_retryable(e):
                    raise DatabaseUnavailable(f"could not migrate: {e}") from e
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)


def downgrade(db: Database, revision: str = "base") -> None:
    _run(db, "downgrade", revision)
