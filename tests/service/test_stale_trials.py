"""Issue 24: killed workers left their Optuna trials RUNNING forever (12 after ten kills). Now a
trial's heartbeat is recorded while it is measured (Optuna's RDB heartbeat, timed from the job
lease), and the next attempt fails what a dead process left RUNNING (`fail_stale_trials`) before
the job ends. A real `kvtune worker` with the real tuner on `interp`, SIGKILLed mid-trial."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from sqlalchemy import text

from db import jobs
from db.session import Database
from tests.service.procs import start_worker, stop
from tests.service.test_worker_faults import KEY, n_configs, n_trials, wait_for
from catalog.core import Bucket

ENV = {"KVTUNE_POLL_S": "0.2"}


def running_trials(db: Database, job_id: int) -> list[int]:
    """The RUNNING trials of the job's Optuna studies (Optuna's own tables, in the job database)."""
    q = text("SELECT t.number FROM trials t JOIN studies s ON s.study_id = t.study_id "
             "WHERE s.study_name LIKE :name AND t.state = 'RUNNING'")
    return db.run(lambda s: [r[0] for r in s.execute(q, {"name": f"job{job_id}/%"})], write=False)


def kill_mid_trial(pid: int, db: Database, job_id: int, tries: int = 100) -> None:
    """SIGKILL the worker while one of its trials is RUNNING (stopped first, so it cannot tell it
    between the look and the kill)."""
    for _ in range(tries):
        if running_trials(db, job_id):
            os.kill(pid, signal.SIGSTOP)
            if running_trials(db, job_id):
                os.kill(pid, signal.SIGKILL)
                return
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("never saw a RUNNING trial")


def test_a_worker_killed_mid_trial_leaves_no_trial_running(db: Database, db_url: str, tmp_path: Path) -> None:
    job_id = jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(Bucket("N", 1, 4),), trials=6)).id
    a = start_worker(db_url, tmp_path / "a.log", "--lease", "3", **ENV)
    b = None
    try:
        wait_for(lambda: n_trials(db, job_id, 1) >= 2, 90, "worker A's first trials")
        kill_mid_trial(a.pid, db, job_id)
        a.wait(10)
        assert len(running_trials(db, job_id)) == 1  # what the kill left behind
        b = start_worker(db_url, tmp_path / "b.log", "--lease", "3", "--once", **ENV)
        wait_for(lambda: jobs.get(db, job_id).status != "running", 120, "worker B to finish the job")
        assert b.wait(30) == 0
    finally:
        stop(a)
        if b is not None:
            stop(b)
    j = jobs.get(db, job_id)
    assert (j.status, j.attempt, j.expired_leases) == ("succeeded", 2, 1), (tmp_path / "b.log").read_text()[-3000:]
    assert running_trials(db, job_id) == []
    assert n_configs(db) == 1
