"""The publish generation: one cheap read that changes whenever a publish changes what a bundle serves.

Configs are only ever written by `db.configs.publish`, which inserts a new row for every winner (and
flips the superseded row inactive in the same commit), so the largest config id moves on every
publish; the row count is read with it so that a deleted row (an operator's cleanup) moves it too.
No counter table, no schema change, and no write: a bundle cache compares this pair and drops what
it built under another one.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import KernelConfig
from db.session import Database

Generation = tuple[int, int]


def read(s: Session) -> Generation:
    """(max config id, config rows) in the caller's transaction (its snapshot)."""
    top, n = s.execute(select(func.coalesce(func.max(KernelConfig.id), 0), func.count()).select_from(KernelConfig)).one()
    return int(top), int(n)


def current(db: Database) -> Generation:
    return db.run(read, write=False, retries=2)
