"""Alembic environment for kvtune's tables (not Optuna's: they share the database, not the history)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from db.models import Base

config = context.config
target_metadata = Base.metadata
VERSION_TABLE = config.get_main_option("version_table") or "kvtune_alembic_version"


def _include_object(obj, name, type_, reflected, compare_to):  # noqa: ANN001
    # Autogenerate compares only our tables: Optuna's live in the same database.
    if type_ == "table" and reflected and name not in target_metadata.tables:
        return False
    return True


def _configure(connection) -> None:  # noqa: ANN001
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_object=_include_object,
        render_as_batch=connection.dialect.name == "sqlite",  # ALTER on SQLite needs table copies
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # db.migrate hands us a connection already inside a locked transaction
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("no database URL: pass -x url=... (or use `kvtune db upgrade`)")
    from db.session import normalize_url

    engine = create_engine(normalize_url(url))
    with engine.connect() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run them against a database")
run_migrations_online()
