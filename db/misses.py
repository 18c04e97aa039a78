"""Lookup misses written in batches, and the auto-tune rule that may queue a job for a missed key.

The API counts misses in memory (api/read_path.py) and hands a batch here about once a second: one
write transaction per batch, whatever the request rate, so reads never wait on SQLite's write lock.

Auto-tune (`KVTUNE_AUTO_TUNE_MISSES=N`): a key whose stored miss count reached N gets one tune job,
never two at once. The check and the insert share the flush transaction, serialised per key (SQLite:
the write lock `BEGIN IMMEDIATE` takes; PostgreSQL: a transaction advisory lock on the key), so
flushes from several API processes cannot both queue one. A key whose automatic job ended without
publishing anything is not queued again by the rule: that failure is data for a person to read (the
dashboard shows the job), not a loop that retunes every second.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from db import jobs
from db.configs import _insert
from db.models import ACTIVE_STATUSES, Job, LookupMiss
from db.session import Database
from catalog.core import ProblemKey

AUTO_TUNE_SUBMITTER = "auto-tune:misses"


@dataclass
class MissCount:
    """Misses of one key since the last flush."""

    key: ProblemKey
    count: int
    first_seen: dt.datetime
    last_seen: dt.datetime


def _upsert(s: Session, batch: Mapping[str, MissCount]) -> None:
    rows = [{"key_slug": slug, "key_json": m.key.to_json(), "kernel": m.key.kernel, "arch": m.key.arch,
             "count": m.count, "first_seen": m.first_seen, "last_seen": m.last_seen} for slug, m in sorted(batch.items())]
    stmt = _insert(s, LookupMiss).values(rows)
    s.execute(stmt.on_conflict_do_update(
        index_elements=["key_slug"],
        set_={"count": LookupMiss.count + stmt.excluded.count, "last_seen": stmt.excluded.last_seen},
    ))


def _auto_tune(s: Session, batch: Mapping[str, MissCount], after: int) -> list[int]:
    due = list(s.scalars(select(LookupMiss.key_slug).where(LookupMiss.key_slug.in_(list(batch)),
                                                             LookupMiss.count >= after).order_by(LookupMiss.key_slug)))
    queued: list[int] = []
    pg = s.get_bind().dialect.name == "postgresql"
    for slug in due:
        if pg:
            s.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": f"kvtune-auto-tune:{slug}"})
        busy = s.scalar(select(Job.id).where(
            Job.key_slug == slug,
            Job.status.in_(ACTIVE_STATUSES) | (Job.submitted_by == AUTO_TUNE_SUBMITTER)).limit(1))
        if busy is None:
            spec = jobs.JobSpec(key=batch[slug].key, submitted_by=AUTO_TUNE_SUBMITTER)
            queued.append(jobs._insert(s, spec).id)
    return queued


def flush(db: Database, batch: Mapping[str, MissCount], *, auto_tune_after: int | None = None) -> list[int]:
    """Add `batch` (key slug -> misses) to the stored counts in one transaction; with auto-tune on,
    queue the jobs the rule asks for in the same one. Returns the ids of the jobs queued."""
    if not batch:
        return []

    def tx(s: Session) -> list[int]:
        _upsert(s, batch)
        return _auto_tune(s, batch, auto_tune_after) if auto_tune_after else []

    return db.run(tx)


def stored_counts(db: Database) -> dict[str, int]:
    def tx(s: Session) -> dict[str, Any]:
        return {m.key_slug: m.count for m in s.scalars(select(LookupMiss))}

    return db.run(tx, write=False)
