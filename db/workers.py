"""Which workers are alive, per arch: each worker process refreshes its `worker_presence` row every
few seconds (`announce`) and removes it when it exits cleanly (`forget`); a row not refreshed within
`PRESENCE_TTL_S` belongs to a worker that died. The API warns about a job no live worker can run:
it would stay queued with no hint why (a README `sm_90` curl on a CPU box)."""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from db.clock import db_after, db_now
from db.configs import _insert
from db.errors import DomainError
from db.models import WorkerPresence
from db.session import Database

ANNOUNCE_EVERY_S = 10.0  # how often a live worker refreshes its row
PRESENCE_TTL_S = 60.0  # a row older than this is a worker that is gone
log = logging.getLogger("kvtune.worker")


def announce(db: Database, owner: str, arch: str, gpu: int | None) -> None:
    def tx(s: Session) -> None:
        now = db_now(s)
        stmt = _insert(s, WorkerPresence).values(owner=owner, arch=arch, gpu=gpu, started_at=now, last_seen=now)
        s.execute(stmt.on_conflict_do_update(index_elements=["owner"], set_={"last_seen": stmt.excluded.last_seen,
                                                                            "arch": arch, "gpu": gpu}))

    db.run(tx)


def forget(db: Database, owner: str) -> None:
    db.run(lambda s: s.execute(delete(WorkerPresence).where(WorkerPresence.owner == owner)))


def live_workers(db: Database, arch: str, within_s: float = PRESENCE_TTL_S) -> int:
    """Workers of `arch` that announced themselves within the last `within_s` seconds."""

    def tx(s: Session) -> int:
        # The clock announce() wrote with: the server's on PostgreSQL, the process's on SQLite.
        fresh = WorkerPresence.last_seen >= db_after(s, -within_s)
        return int(s.scalar(select(func.count()).select_from(WorkerPresence).where(WorkerPresence.arch == arch, fresh)))

    return db.run(tx, write=False)


def no_worker_warning(db: Database, arch: str) -> str | None:
    """The warning a job for `arch` carries while no live worker of that arch has announced itself."""
    if live_workers(db, arch):
        return None
    how = ("`kvtune worker --arch interp` runs on any machine" if arch == "interp"
           else f"`kvtune worker` on a machine with a {arch} GPU")
    return (f"no live worker for {arch} has announced itself in the last {PRESENCE_TTL_S:.0f} s: the job stays "
            f"queued until one starts ({how})")


@contextmanager
def presence(db: Database, owner: str, arch: str, gpu: int | None) -> Iterator[None]:
    """A worker's presence for the body's duration: announced now and every ANNOUNCE_EVERY_S from a
    daemon thread (a database outage skips beats: the row ages, it is not an error), removed at
    the end."""
    done = threading.Event()

    def beat() -> None:
        while True:
            try:
                announce(db, owner, arch, gpu)
            except DomainError as e:
                log.debug("%s: presence not refreshed: %s", owner, e)
            if done.wait(ANNOUNCE_EVERY_S):
                return

    thread = threading.Thread(target=beat, name="kvtune-presence", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)
        try:
            forget(db, owner)
        except DomainError:
            pass  # the row ages out instead
