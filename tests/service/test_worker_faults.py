"""Workers that die, freeze, get stopped or whose job is cancelled, on SQLite and the real PostgreSQL.

- SIGKILL mid-job: the job is re-claimed once its lease expires, and finishes (attempt 2).
- SIGSTOP past the lease, job re-claimed by someone else, SIGCONT: the resumed worker writes nothing.
- SIGTERM mid-job: the job goes straight back to the queue, not counted as a failed attempt.
- Cancel mid-job: the worker notices at its next heartbeat and publishes nothing.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

from sqlalchemy import func, select, text

from db import jobs, leases, queue
from db.models import KernelConfig, TrialResult
from db.session import Database
from tests.service.procs import start_worker, stop
from catalog.core import Bucket
from catalog.keys import make_key

KEY = make_key("pack", "interp", formats=["fp8_528"])
SLOW = {"KVTUNE_WORKER_TUNE": "tests.service.fake_tune:tune", "KVTUNE_POLL_S": "0.1", "KVTUNE_FAKE_TRIAL_S": "0.4"}


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def n_trials(db: Database, job_id: int, attempt: int) -> int:
    return db.run(lambda s: s.scalar(select(func.count()).select_from(TrialResult)
                                     .where(TrialResult.job_id == job_id, TrialResult.attempt == attempt)), write=False)


def n_configs(db: Database) -> int:
    return db.run(lambda s: s.scalar(select(func.count()).select_from(KernelConfig)), write=False)


def _holds_write_lock(db_url: str, job_id: int) -> bool:
    """Whether someone holds the database's write lock (SQLite) or the job's row lock (PostgreSQL):
    a short write with no retries and a 0.3 s wait either gets through or says busy."""
    probe = Database(db_url, sqlite_busy_ms=300, retries=0)
    try:
        if probe.is_sqlite:
            probe.run(lambda s: s.execute(text("UPDATE jobs SET id = id WHERE id = :i"), {"i": job_id}))
        else:
            def tx(s) -> None:  # noqa: ANN001
                s.execute(text("SET LOCAL lock_timeout = '300ms'"))
                s.execute(text("SELECT id FROM jobs WHERE id = :i FOR UPDATE"), {"i": job_id})
            probe.run(tx)
        return False
    except Exception:  # noqa: BLE001 - busy / lock timeout, whatever the driver calls it
        return True
    finally:
        probe.dispose()


def freeze(pid: int, db_url: str, job_id: int, tries: int = 50) -> None:
    """SIGSTOP a worker at a moment it holds no write transaction. A process frozen inside one keeps
    its lock (SQLite's file lock cannot be taken from a stopped process, and PostgreSQL only frees a
    row lock when the session ends), which would stall this test, not the fencing it is about."""
    for _ in range(tries):
        os.kill(pid, signal.SIGSTOP)
        if not _holds_write_lock(db_url, job_id):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("could not freeze the worker outside a write transaction")


def submit(db: Database, trials: int) -> int:
    return jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(Bucket("N", 1, 4),), trials=trials)).id


def test_sigkill_mid_job_is_reclaimed_after_the_lease_and_finishes(db: Database, db_url: str, tmp_path: Path) -> None:
    job_id = submit(db, trials=6)
    a = start_worker(db_url, tmp_path / "a.log", "--lease", "3", **SLOW)
    try:
        wait_for(lambda: n_trials(db, job_id, 1) >= 2, 60, "worker A's first trials")
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        killed_at = time.monotonic()
        assert jobs.get(db, job_id).status == "running"
        b = start_worker(db_url, tmp_path / "b.log", "--lease", "3", "--once", **SLOW)
        wait_for(lambda: jobs.get(db, job_id).status == "succeeded", 60, "worker B to finish the job")
        assert b.wait(20) == 0
    finally:
        stop(a)
    j = jobs.get(db, job_id)
    assert (j.attempt, j.expired_leases, j.status) == (2, 1, "succeeded")
    assert j.started_at is not None and time.monotonic() - killed_at >= 2.0  # not before the lease ran out
    assert n_trials(db, job_id, 2) == 6
    assert n_configs(db) == 1


def test_worker_frozen_past_its_lease_writes_nothing_when_resumed(db: Database, db_url: str, tmp_path: Path) -> None:
    job_id = submit(db, trials=8)
    a = start_worker(db_url, tmp_path / "a.log", "--lease", "2", **SLOW)
    try:
        wait_for(lambda: n_trials(db, job_id, 1) >= 1, 60, "worker A's first trial")
        freeze(a.pid, db_url, job_id)
        frozen = n_trials(db, job_id, 1)
        time.sleep(3.0)  # past the lease
        assert queue.requeue_expired(db) == 1
        b = queue.claim(db, arch="interp", owner="worker-b", lease_s=60)
        assert (b.job_id, b.attempt) == (job_id, 2)
        os.kill(a.pid, signal.SIGCONT)
        # Give A time to finish its in-flight trial, try to record it and heartbeat, and give up.
        wait_for(lambda: "abandoned" in (tmp_path / "a.log").read_text(), 20, "worker A to notice")
        time.sleep(0.5)
        assert n_trials(db, job_id, 1) == frozen
        j = jobs.get(db, job_id)
        assert (j.status, j.attempt, j.lease_owner) == ("running", 2, "worker-b")
        assert j.progress == {"trials_done": 0, "trials_failed": 0}  # what B's claim wrote, untouched
        assert n_configs(db) == 0
        assert leases.heartbeat(db, b, 60)
        assert a.poll() is None  # A lives on, back to claiming
    finally:
        os.kill(a.pid, signal.SIGCONT)
        stop(a)
    assert "database is locked" not in (tmp_path / "a.log").read_text()


def test_sigterm_mid_job_releases_it_to_the_queue(db: Database, db_url: str, tmp_path: Path) -> None:
    job_id = submit(db, trials=20)
    a = start_worker(db_url, tmp_path / "a.log", "--lease", "30", **SLOW)
    try:
        wait_for(lambda: n_trials(db, job_id, 1) >= 1, 60, "the first trial")
        t0 = time.monotonic()
        assert stop(a, signal.SIGTERM) == 0
        assert time.monotonic() - t0 < 5
    finally:
        stop(a)
    j = jobs.get(db, job_id)
    assert (j.status, j.attempt, j.expired_leases, j.lease_owner) == ("queued", 1, 0, None)
    assert j.error == "released: worker shutting down"
    assert n_configs(db) == 0


def test_cancel_mid_job_stops_the_worker_and_publishes_nothing(db: Database, db_url: str, tmp_path: Path) -> None:
    job_id = submit(db, trials=20)
    a = start_worker(db_url, tmp_path / "a.log", "--lease", "2", "--once", **SLOW)
    try:
        wait_for(lambda: n_trials(db, job_id, 1) >= 1, 60, "the first trial")
        jobs.cancel(db, job_id)
        assert a.wait(15) == 0  # --once: it gave the job up and exited
    finally:
        stop(a)
    assert jobs.get(db, job_id).status == "cancelled"
    assert n_trials(db, job_id, 1) < 20 and n_configs(db) == 0
    assert "lease lost" in (tmp_path / "a.log").read_text()
