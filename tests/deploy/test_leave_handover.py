"""Issue 24: in a distributed job, SIGTERM to the active participant while the other was `done` sent
the job back to the queue (`leave()` did not count `done` participants), attempt 2 measured the
whole budget again, and the log claimed another participant had published. Now `leave()` hands
the publishing to the waiting `done` participant, and the logs say what happens."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from catalog.core import Bucket
from db import jobs, queue
from db.session import Database
from tests.deploy.test_distributed_queue import B1, count, parts, publish_fn, submit, trial
from tests.service.procs import start_worker, stop
from tests.service.test_worker_faults import KEY, wait_for
from db.models import KernelConfig, TrialResult


def test_leave_hands_the_publishing_to_a_done_participant(db: Database) -> None:
    job_id = submit(db, trials=3)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert a is not None and b is not None
    assert queue.reserve(db, b, B1.name(), 3)
    queue.record_shared_trial(db, b, trial(0, 20.0), is_default=True, total=3)
    assert queue.finish(db, b) is False  # a is live: b waits, heartbeating
    assert queue.take_over(db, b) == "wait"
    what = queue.leave(db, a, "SIGTERM")  # a stops early
    j = jobs.get(db, job_id)
    assert (j.status, j.attempt, j.expired_leases) == ("running", 1, 0)
    assert what == queue.LEFT_TO_DONE
    assert queue.take_over(db, b) == "last"  # at once: no lease to wait out
    queue.complete_shared(db, b, publish_fn(b))
    assert jobs.get(db, job_id).status == "succeeded"
    assert parts(db, job_id) == {"a": "left", "b": "published"}
    assert count(db, KernelConfig, KernelConfig.job_id == job_id) == 1


def test_leave_says_where_the_job_goes(db: Database) -> None:
    submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert queue.leave(db, a, "SIGTERM") == queue.LEFT_TO_OTHERS
    assert queue.leave(db, b, "SIGTERM") == queue.LEFT_TO_QUEUE
    assert queue.leave(db, b, "again") is None  # fenced out already


def test_sigterm_to_the_active_participant_the_done_one_publishes(db: Database, db_url: str, tmp_path: Path) -> None:
    """Two real workers on the stand-in tuner: A measures slowly, B fast, so B finishes its share
    and waits while A is mid-trial; then A gets SIGTERM."""
    job_id = jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(Bucket("N", 1, 4),), trials=4, distributed=True)).id
    env = {"KVTUNE_WORKER_TUNE": "tests.service.fake_tune:tune", "KVTUNE_POLL_S": "0.1"}
    # A's trial is long (8 s) so that B's start and its three fast trials fit inside it even on a
    # loaded 2-core machine (at 3 s, a CI run under load saw A finish before B was done).
    a = start_worker(db_url, tmp_path / "a.log", "--lease", "10", KVTUNE_FAKE_TRIAL_S="8", **env)
    b = None
    try:
        wait_for(lambda: len(queue.participants(db, job_id)) == 1, 60, "worker A to claim the job")
        b = start_worker(db_url, tmp_path / "b.log", "--lease", "10", KVTUNE_FAKE_TRIAL_S="0.2", **env)

        def b_done_a_active() -> bool:
            return {p["slot"]: p["status"] for p in queue.participants(db, job_id)} == {0: "active", 1: "done"}

        wait_for(b_done_a_active, 60, "B done while A still measures")
        owners = {p["slot"]: p["owner"] for p in queue.participants(db, job_id)}
        assert int(owners[0].split(":")[1]) == a.pid
        t0 = time.monotonic()
        a.send_signal(signal.SIGTERM)
        assert a.wait(20) == 0
        wait_for(lambda: jobs.get(db, job_id).status != "running", 30, "the job to end")
        assert time.monotonic() - t0 < 10  # no lease waited out, nothing measured again
    finally:
        stop(a)
        if b is not None:
            stop(b)
    j = jobs.get(db, job_id)
    logs = {n: (tmp_path / f"{n}.log").read_text() for n in ("a", "b")}
    assert (j.status, j.attempt, j.expired_leases) == ("succeeded", 1, 0), logs["b"][-3000:]
    assert {p["owner"]: p["status"] for p in queue.participants(db, job_id)} == {owners[0]: "left",
                                                                                owners[1]: "published"}
    assert count(db, TrialResult, TrialResult.job_id == job_id) == 4  # the budget, measured once
    assert count(db, KernelConfig, KernelConfig.job_id == job_id) == 1
    assert "a done participant publishes" in logs["a"]
    assert "last participant; publishing" in logs["b"]
    assert "another participant published" not in logs["a"] + logs["b"]
