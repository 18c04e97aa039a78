"""A distributed job whose second participant is SIGKILLed mid-job, on the real PostgreSQL with the
real tuner on `interp`: the survivor finishes the budget, waits out the dead one's lease, takes the
publishing over and publishes once, in the same attempt; the dead one's rows stay as they were."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from sqlalchemy import func, select

from db import jobs, migrate
from db.models import JobParticipant, KernelConfig, TrialResult
from db.session import Database
from tests.deploy.test_cluster import pg_url  # noqa: F401  (fixture)
from tests.service.procs import start_worker, stop
from catalog.core import Bucket
from catalog.keys import make_key


def test_sigkill_of_a_participant_the_survivor_publishes_once(pg_url: str, tmp_path: Path) -> None:  # noqa: F811
    db = Database(pg_url)
    migrate.upgrade(db)
    env = {"KVTUNE_POLL_S": "0.2"}
    procs = {n: start_worker(pg_url, tmp_path / f"{n}.log", "--lease", "3", **env) for n in ("a", "b")}
    try:
        key = make_key("pack", "interp", formats=["fp8_528"])
        job_id = jobs.submit(db, jobs.JobSpec(key=key, buckets=(Bucket("N", 1, 4),), trials=12, distributed=True)).id

        def rows() -> list:  # noqa: ANN202
            return db.run(lambda s: s.execute(select(JobParticipant.owner, JobParticipant.slot, JobParticipant.status)
                                              .where(JobParticipant.job_id == job_id)).all(), write=False)

        def n_trials(owner: str) -> int:
            return db.run(lambda s: s.scalar(select(func.count()).select_from(TrialResult).where(
                TrialResult.job_id == job_id, TrialResult.worker == owner)), write=False)

        end = time.monotonic() + 90
        while time.monotonic() < end:
            joined = [r for r in rows() if r.slot == 1]
            if joined and n_trials(joined[0].owner) >= 1:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("no second participant recorded a trial:\n" + (tmp_path / "a.log").read_text()[-2000:])
        victim_owner = joined[0].owner
        pid = int(victim_owner.split(":")[1])
        victim = next(n for n, p in procs.items() if p.pid == pid)
        os.kill(pid, signal.SIGKILL)
        procs[victim].wait(10)
        before = n_trials(victim_owner)
        end = time.monotonic() + 120
        while jobs.get(db, job_id).status == "running" and time.monotonic() < end:
            time.sleep(0.3)
        j = jobs.get(db, job_id)
        survivor = "b" if victim == "a" else "a"
        log = (tmp_path / f"{survivor}.log").read_text()
        assert (j.status, j.attempt, j.expired_leases) == ("succeeded", 1, 0), log[-3000:]
        final = {r.owner: r.status for r in rows()}
        assert final[victim_owner] == "lost" and sorted(final.values()) == ["lost", "published"], final
        assert n_trials(victim_owner) == before  # nothing written for the dead one after the kill
        total = db.run(lambda s: s.scalar(select(func.count()).select_from(TrialResult).where(TrialResult.job_id == job_id)),
                       write=False)
        assert total == 12  # the survivor measured the rest of the budget, no more
        assert db.run(lambda s: s.scalar(select(func.count()).select_from(KernelConfig)), write=False) == 1
        assert "Traceback" not in log
    finally:
        for p in procs.values():
            stop(p)
        db.dispose()
