"""Time as the database sees it, and a UTC datetime column type that behaves the same on both backends.

Leases are compared against the database server's clock on PostgreSQL, so workers on many hosts never
disagree about whether a lease has expired because their own clocks drift. SQLite serves one host, so
the process clock is the database clock there.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import DateTime, func, literal
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

UTC = dt.timezone.utc


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Aware UTC datetimes in and out. PostgreSQL stores `timestamptz`; SQLite stores a naive UTC
    string (fixed width, so string order is time order and SQL comparisons stay correct)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def db_now(session: Session) -> ColumnElement[dt.datetime]:
    """`now` as a SQL expression: the server clock on PostgreSQL (statement time, so a long transaction
    does not age its own lease), the process clock elsewhere."""
    if session.get_bind().dialect.name == "postgresql":
        return func.statement_timestamp()
    return literal(utcnow(), UTCDateTime())


def db_after(session: Session, seconds: float) -> ColumnElement[dt.datetime]:
    """`now + seconds` as a SQL expression (a lease deadline)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.statement_timestamp() + literal(dt.timedelta(seconds=seconds))
    return literal(utcnow() + dt.timedelta(seconds=seconds), UTCDateTime())
