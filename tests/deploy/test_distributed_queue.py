"""The distributed-job protocol of db/queue.py on SQLite and the real PostgreSQL, step by step:
join, the shared trial budget, fencing per participant, the last participant publishing once,
leaving, and a lost participant."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from db import configs, jobs, leases, queue
from db.errors import LeaseLost
from db.models import Job, JobParticipant, KernelConfig, TrialResult
from db.session import Database
from tests.db.fixtures import lapse
from catalog.core import Bucket, Config, ProblemKey, TrialStatus
from catalog.results import BucketResult, TrialRecord, TuneResult

KEY = ProblemKey("pack", "interp", 0, 0, 0, ("fp8_528",), 512)
B1 = Bucket("N", 1, 4)


def submit(db: Database, **kw) -> int:  # noqa: ANN003
    kw.setdefault("trials", 3)
    return jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(B1,), distributed=True, **kw)).id


def trial(n: int, t: float | None = 10.0) -> TrialRecord:
    status = TrialStatus.OK if t is not None else TrialStatus.COMPILE_ERROR
    return TrialRecord(number=n, bucket=B1, config=Config.of(BLOCK_T=n + 1), status=status, time_us=t)


def publish_fn(lease: leases.Lease):  # noqa: ANN201
    d, w = trial(0, 20.0), trial(1, 10.0)
    res = TuneResult(key=KEY, target="interp", buckets=(BucketResult(bucket=B1, default=d, best=w, trials=(d, w)),))

    def publish(s):  # noqa: ANN001, ANN202
        configs.store_sources(s, [("h1", "pack.py.j2", "# h1")])
        return configs.publish(s, job_id=lease.job_id, key=KEY, result=res, source_hashes={"N1-4": "h1"})

    return publish


def parts(db: Database, job_id: int) -> dict[str, str]:
    return {p["owner"]: p["status"] for p in queue.participants(db, job_id)}


def count(db: Database, model, *where) -> int:  # noqa: ANN001
    return db.run(lambda s: s.scalar(select(func.count()).select_from(model).where(*where)), write=False)


def test_two_participants_share_the_budget_and_the_last_publishes_once(db: Database) -> None:
    job_id = submit(db, trials=3, max_workers=2)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    assert a is not None and a.distributed and (a.job_id, a.attempt, a.slot) == (job_id, 1, 0)
    assert queue.claim(db, arch="interp", owner="b", lease_s=30) is None  # nothing queued any more
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert b is not None and (b.job_id, b.attempt, b.slot) == (job_id, 1, 1)
    assert queue.join(db, arch="interp", owner="c", lease_s=30) is None  # max_workers=2
    assert queue.join(db, arch="interp", owner="b", lease_s=30) is None  # already in

    # Budget 3 for both together: a reservation held by one counts against the other.
    assert queue.reserve(db, a, "N1-4", 3) and queue.reserve(db, b, "N1-4", 3)
    queue.record_shared_trial(db, a, trial(0, 20.0), is_default=True, total=3)
    assert queue.reserve(db, a, "N1-4", 3)  # 1 done + b's 1 held < 3
    assert queue.reserve(db, a, "N1-4", 3)  # asking again keeps the one reservation, takes no second
    queue.record_shared_trial(db, b, trial(1, 10.0), is_default=False, total=3)
    assert not queue.reserve(db, b, "N1-4", 3)  # 2 done + a's 1 held
    queue.record_shared_trial(db, a, trial(2, None), is_default=False, total=3)
    assert not queue.reserve(db, a, "N1-4", 3)
    j = jobs.get(db, job_id)
    assert j.progress["trials_done"] == 3 and j.progress["failed_by_status"] == {"compile_error": 1}
    assert j.best["N1-4"]["time_us"] == 10.0 and j.best["N1-4"]["default_time_us"] == 20.0
    assert count(db, TrialResult, TrialResult.job_id == job_id) == 3

    assert queue.finish(db, a) is False  # b is still live
    c = queue.join(db, arch="interp", owner="c", lease_s=30)  # a's place is free again...
    assert c is not None and c.slot == 2
    assert queue.finish(db, b) is False  # ...and c is live
    assert queue.finish(db, c) is True  # the last one
    assert queue.join(db, arch="interp", owner="d", lease_s=30) is None  # publishing: no one joins
    with pytest.raises(LeaseLost):
        queue.record_shared_trial(db, a, trial(3), is_default=False, total=3)  # a is done: fenced
    queue.complete_shared(db, c, publish_fn(c))
    assert parts(db, job_id) == {"a": "done", "b": "done", "c": "published"}
    j = jobs.get(db, job_id)
    assert (j.status, j.attempt, j.lease_owner) == ("succeeded", 1, None)
    assert j.best["N1-4"]["published"] is True
    assert count(db, KernelConfig, KernelConfig.job_id == job_id) == 1
    with pytest.raises(LeaseLost):  # a second publish matches nothing
        queue.complete_shared(db, c, publish_fn(c))
    assert count(db, KernelConfig, KernelConfig.job_id == job_id) == 1


def test_a_participant_past_its_lease_is_fenced_out_and_not_waited_for(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert a is not None and b is not None
    queue.record_shared_trial(db, b, trial(0), is_default=True, total=3)
    lapse(db, job_id, "b")
    assert not leases.heartbeat(db, b, 30)  # its own lease ran out: no renewal
    with pytest.raises(LeaseLost):
        queue.record_shared_trial(db, b, trial(1), is_default=False, total=3)
    with pytest.raises(LeaseLost):
        queue.reserve(db, b, "N1-4", 3)
    assert leases.heartbeat(db, a, 30)  # the job and a are fine
    assert queue.finish(db, a) is True  # b is not waited for: a publishes
    assert parts(db, job_id) == {"a": "publishing", "b": "lost"}
    assert count(db, TrialResult, TrialResult.job_id == job_id) == 1
    assert jobs.get(db, job_id).status == "running"


def test_job_is_requeued_only_when_every_participant_is_silent(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    claimed_until = jobs.get(db, job_id).lease_expires_at
    b = queue.join(db, arch="interp", owner="b", lease_s=60)
    assert a is not None and b is not None
    assert jobs.get(db, job_id).lease_expires_at > claimed_until  # b's join pushed the job's lease out
    lapse(db, job_id, "a")  # a falls silent
    assert queue.requeue_expired(db) == 0
    assert jobs.get(db, job_id).status == "running"
    assert leases.heartbeat(db, b, 0.2)  # a heartbeat never pulls the job's lease in
    assert jobs.get(db, job_id).lease_expires_at > jobs.get(db, job_id).heartbeat_at
    # Everyone silent: the lease runs out and a new attempt fences out both old participants.
    db.run(lambda s: s.execute(Job.__table__.update().where(Job.id == job_id).values(
        lease_expires_at=Job.heartbeat_at)))
    assert queue.requeue_expired(db) == 1
    new = queue.claim(db, arch="interp", owner="c", lease_s=30)
    assert new is not None and (new.attempt, new.slot) == (2, 0)
    for old in (a, b):
        assert not leases.heartbeat(db, old, 30)
        with pytest.raises(LeaseLost):
            queue.finish(db, old)
    assert parts(db, job_id) == {"c": "active"}
    assert count(db, JobParticipant, JobParticipant.job_id == job_id, JobParticipant.attempt == 1,
                 JobParticipant.status == "lost") == 2


def test_leaving_requeues_only_the_last_participant(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert queue.release(db, a, "SIGTERM")  # release = leave for a participant
    assert jobs.get(db, job_id).status == "running"
    assert queue.release(db, b, "SIGTERM")
    j = jobs.get(db, job_id)
    assert (j.status, j.expired_leases, j.error) == ("queued", 0, "released: SIGTERM")
    assert not queue.release(db, b, "again")


def test_a_failing_participant_fails_the_job_for_all(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert queue.fail(db, b, "tuner crashed")
    assert jobs.get(db, job_id).status == "failed"
    assert not leases.heartbeat(db, a, 30)
    with pytest.raises(LeaseLost):
        queue.finish(db, a)


def test_cancel_fences_out_every_participant(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    jobs.cancel(db, job_id)
    for p in (a, b):
        assert not leases.heartbeat(db, p, 30)
        with pytest.raises(LeaseLost):
            queue.reserve(db, p, "N1-4", 3)
    assert queue.join(db, arch="interp", owner="c", lease_s=30) is None


def test_non_distributed_jobs_are_never_joined(db: Database) -> None:
    jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(B1,), trials=3))
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    assert a is not None and not a.distributed
    assert queue.join(db, arch="interp", owner="b", lease_s=30) is None
    assert count(db, JobParticipant) == 0


def test_a_done_participant_takes_over_when_the_other_dies(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    assert a is not None and b is not None
    assert queue.finish(db, a) is False  # b is live: a waits, heartbeating
    assert queue.take_over(db, a) == "wait"
    assert leases.heartbeat(db, a, 30)  # a done participant keeps its lease
    with pytest.raises(LeaseLost):
        queue.reserve(db, a, "N1-4", 3)  # ...but measures nothing more
    lapse(db, job_id, "b")  # b dies: its lease runs out
    assert queue.take_over(db, a) == "last"
    assert parts(db, job_id) == {"a": "publishing", "b": "lost"}
    with pytest.raises(LeaseLost):
        queue.finish(db, b)
    queue.complete_shared(db, a, publish_fn(a))
    assert jobs.get(db, job_id).status == "succeeded"
    assert queue.take_over(db, a) == "published"
    assert count(db, KernelConfig, KernelConfig.job_id == job_id) == 1


def test_two_waiting_participants_publish_once(db: Database) -> None:
    job_id = submit(db)
    a = queue.claim(db, arch="interp", owner="a", lease_s=30)
    b = queue.join(db, arch="interp", owner="b", lease_s=30)
    c = queue.join(db, arch="interp", owner="c", lease_s=30)
    assert queue.finish(db, a) is False and queue.finish(db, b) is False
    lapse(db, job_id, "c")  # c dies
    assert [queue.take_over(db, a), queue.take_over(db, b)] == ["last", "wait"]  # a is publishing: live
    queue.complete_shared(db, a, publish_fn(a))
    assert queue.take_over(db, b) == "published"
    assert parts(db, job_id) == {"a": "published", "b": "done", "c": "lost"}
