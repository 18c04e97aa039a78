"""The queue and config store on SQLite and on the real PostgreSQL: claims, leases, fencing,
re-queueing, publishing, misses, and busy retries."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from sqlalchemy import func, select, text

from db import configs, jobs, leases, migrate, queue
from db.errors import Conflict, LeaseLost
from db.models import Job, KernelConfig, KernelSource, LookupMiss, TrialResult
from db.session import Database
from tests.db.fixtures import lapse
from catalog.core import Bucket, Config, ProblemKey, TrialStatus
from catalog.results import BucketResult, TrialRecord, TuneResult

KEY = ProblemKey("pack", "interp", 0, 0, 0, ("fp8_528",), 512)
B1, B2 = Bucket("N", 1, 4), Bucket("N", 5, 64)


def spec(**kw) -> jobs.JobSpec:  # noqa: ANN003
    kw.setdefault("key", KEY)
    kw.setdefault("buckets", (B1,))
    kw.setdefault("trials", 3)
    return jobs.JobSpec(**kw)


def trial(n: int, t: float | None = 10.0, bucket: Bucket = B1) -> TrialRecord:
    status = TrialStatus.OK if t is not None else TrialStatus.COMPILE_ERROR
    return TrialRecord(number=n, bucket=bucket, config=Config.of(BLOCK_T=n + 1), status=status, time_us=t)


def result(times: dict[Bucket, float]) -> TuneResult:
    brs = []
    for b, t in times.items():
        d, w = trial(0, 2 * t, b), trial(1, t, b)
        brs.append(BucketResult(bucket=b, default=d, best=w, trials=(d, w)))
    return TuneResult(key=KEY, target="interp", buckets=tuple(brs), device_name="cpu", triton_version="3.6.0", torch_version="2.13")


def count(db: Database, model, *where) -> int:  # noqa: ANN001
    return db.run(lambda s: s.scalar(select(func.count()).select_from(model).where(*where)), write=False)


def complete(db: Database, lease: leases.Lease, times: dict[Bucket, float]) -> None:
    res = result(times)
    hashes = {b.name(): f"{abs(hash((lease.job_id, b.name()))):016x}"[:16] for b in times}

    def publish(s):  # noqa: ANN001, ANN202
        configs.store_sources(s, [(h, "pack.py.j2", f"# source {h}") for h in hashes.values()])
        return configs.publish(s, job_id=lease.job_id, key=lease.key, result=res, source_hashes=hashes)

    queue.complete(db, lease, publish, progress={"trials_done": 2})


def test_migrations_reach_head_and_match_models(db: Database) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from db.models import Base

    assert migrate.current_revision(db) == migrate.head_revision()
    migrate.upgrade(db)  # idempotent
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": "kvtune_alembic_version",
                                                      "include_object": lambda o, n, t, r, c: not (t == "table" and r and n not in Base.metadata.tables)})
        diffs = [d for d in compare_metadata(ctx, Base.metadata)]
    assert diffs == []
    migrate.downgrade(db, "base")
    assert migrate.current_revision(db) is None
    migrate.upgrade(db)
    assert migrate.current_revision(db) == migrate.head_revision()


def test_claim_takes_oldest_job_of_its_arch_once(db: Database) -> None:
    other = jobs.submit(db, spec(key=ProblemKey("pack", "sm_90", 0, 0, 0, ("fp8_528",), 512)))
    a = jobs.submit(db, spec())
    b = jobs.submit(db, spec())
    l1 = queue.claim(db, arch="interp", owner="w1", lease_s=30)
    l2 = queue.claim(db, arch="interp", owner="w2", lease_s=30)
    assert (l1.job_id, l1.attempt, l2.job_id) == (a.id, 1, b.id)
    assert l1.buckets == (B1,) and l1.key == KEY and l1.trials == 3
    assert queue.claim(db, arch="interp", owner="w3", lease_s=30) is None
    j = jobs.get(db, a.id)
    assert (j.status, j.lease_owner, j.attempt) == ("running", "w1", 1)
    assert j.lease_expires_at > j.heartbeat_at
    assert jobs.get(db, other.id).status == "queued"


def test_fenced_writes_and_heartbeat(db: Database) -> None:
    jobs.submit(db, spec())
    lease = queue.claim(db, arch="interp", owner="w1", lease_s=30)
    before = jobs.get(db, lease.job_id).lease_expires_at
    time.sleep(0.05)
    assert leases.heartbeat(db, lease, 30)
    assert jobs.get(db, lease.job_id).lease_expires_at > before
    queue.record_trial(db, lease, trial(0), progress={"trials_done": 1}, best={"N1-4": {"time_us": 10.0}})
    assert count(db, TrialResult) == 1
    assert jobs.get(db, lease.job_id).progress == {"trials_done": 1}
    # A different owner or attempt holding the same job id matches nothing.
    for forged in (leases.Lease(**{**lease.__dict__, "owner": "w2"}), leases.Lease(**{**lease.__dict__, "attempt": 2})):
        with pytest.raises(LeaseLost):
            queue.record_trial(db, forged, trial(1), progress={"trials_done": 99}, best={})
        assert not leases.heartbeat(db, forged, 30)
    assert count(db, TrialResult) == 1
    assert jobs.get(db, lease.job_id).progress == {"trials_done": 1}


def test_cancel_fences_out_the_running_worker(db: Database) -> None:
    jobs.submit(db, spec())
    lease = queue.claim(db, arch="interp", owner="w1", lease_s=30)
    assert jobs.cancel(db, lease.job_id).status == "cancelled"
    assert jobs.cancel(db, lease.job_id).status == "cancelled"  # idempotent
    assert not leases.heartbeat(db, lease, 30)
    with pytest.raises(LeaseLost):
        queue.record_trial(db, lease, trial(0), progress={}, best={})
    with pytest.raises(LeaseLost):
        complete(db, lease, {B1: 5.0})
    assert count(db, TrialResult) == 0 and count(db, KernelConfig) == 0
    assert jobs.get(db, lease.job_id).status == "cancelled"


def test_cancel_of_finished_job_conflicts(db: Database) -> None:
    jobs.submit(db, spec())
    lease = queue.claim(db, arch="interp", owner="w1", lease_s=30)
    complete(db, lease, {B1: 5.0})
    with pytest.raises(Conflict):
        jobs.cancel(db, lease.job_id)


def test_expired_lease_is_requeued_and_old_attempt_writes_nothing(db: Database) -> None:
    jobs.submit(db, spec())
    old = queue.claim(db, arch="interp", owner="w1", lease_s=30)
    queue.record_trial(db, old, trial(0), progress={"trials_done": 1}, best={})
    lapse(db, old.job_id)
    # Expired but not yet re-queued: already fenced out by the database clock.
    assert not leases.heartbeat(db, old, 30)
    with pytest.raises(LeaseLost):
        queue.record_trial(db, old, trial(1), progress={}, best={})
    assert queue.requeue_expired(db) == 1
    assert queue.requeue_expired(db) == 0
    j = jobs.get(db, old.job_id)
    assert (j.status, j.expired_leases, j.lease_owner) == ("queued", 1, None)
    new = queue.claim(db, arch="interp", owner="w2", lease_s=30)
    assert (new.job_id, new.attempt) == (old.job_id, 2)
    with pytest.raises(LeaseLost):
        complete(db, old, {B1: 1.0})
    assert not queue.release(db, old, "late") and not queue.fail(db, old, "late")
    complete(db, new, {B1: 5.0})
    j = jobs.get(db, old.job_id)
    assert (j.status, j.attempt) == ("succeeded", 2)
    assert count(db, TrialResult, TrialResult.attempt == 1) == 1
    rows = db.run(lambda s: list(s.scalars(select(KernelConfig))), write=False)
    assert [(r.job_id, r.time_us, r.active) for r in rows] == [(old.job_id, 5.0, True)]


def test_job_fails_after_max_attempts_lost_leases(db: Database) -> None:
    jobs.submit(db, spec(max_attempts=2))
    for expected in ("queued", "failed"):
        lease = queue.claim(db, arch="interp", owner="w", lease_s=0.2)
        assert lease is not None
        time.sleep(0.3)
        assert queue.requeue_expired(db) == 1
        assert jobs.get(db, lease.job_id).status == expected
    j = jobs.get(db, lease.job_id)
    assert j.finished_at is not None and "giving up" in j.error
    assert queue.claim(db, arch="interp", owner="w", lease_s=1) is None


def test_release_requeues_without_counting_an_attempt(db: Database) -> None:
    jobs.submit(db, spec(max_attempts=1))
    lease = queue.claim(db, arch="interp", owner="w1", lease_s=30)
    assert queue.release(db, lease, "SIGTERM")
    j = jobs.get(db, lease.job_id)
    assert (j.status, j.attempt, j.expired_leases, j.lease_owner) == ("queued", 1, 0, None)
    again = queue.claim(db, arch="interp", owner="w2", lease_s=30)
    assert again.attempt == 2
    assert not queue.release(db, lease, "stale")  # the old attempt's release changes nothing
    assert jobs.get(db, lease.job_id).lease_owner == "w2"


def test_publish_keeps_exactly_one_active_config_per_key_and_bucket(db: Database) -> None:
    for t in (5.0, 7.0, 3.0):
        jobs.submit(db, spec(buckets=(B1, B2)))
        complete(db, queue.claim(db, arch="interp", owner="w", lease_s=30), {B1: t, B2: t * 2})
    active = db.run(lambda s: configs.active_configs(s, KEY.slug()), write=False)
    assert sorted((c.bucket, c.time_us, c.default_time_us) for c in active) == [("N1-4", 3.0, 6.0), ("N5-64", 6.0, 12.0)]
    assert count(db, KernelConfig) == 6 and count(db, KernelConfig, KernelConfig.active.is_(True)) == 2
    assert count(db, KernelSource) == 6
    last = jobs.get(db, 3)
    assert last.best["N1-4"]["time_us"] == 3.0 and last.best["N1-4"]["speedup"] == 2.0

    # The partial unique index itself refuses a second active row.
    def second_active(s):  # noqa: ANN001, ANN202
        row = configs.active_configs(s, KEY.slug())[0]
        s.add(KernelConfig(**{c.name: getattr(row, c.name) for c in KernelConfig.__table__.columns if c.name != "id"}))
        s.flush()

    with pytest.raises(Conflict):
        db.run(second_active)


def test_concurrent_publishers_of_one_key(db: Database) -> None:
    n = 6
    jobs.submit_many(db, [spec() for _ in range(n)])
    leases = [queue.claim(db, arch="interp", owner=f"w{i}", lease_s=60) for i in range(n)]
    errors: list[BaseException] = []

    def go(lease: leases.Lease) -> None:
        try:
            complete(db, lease, {B1: float(lease.job_id)})
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=go, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert count(db, KernelConfig) == n
    assert count(db, KernelConfig, KernelConfig.active.is_(True)) == 1
    assert count(db, Job, Job.status == "succeeded") == n


def test_lookup_miss_upsert_counts(db: Database) -> None:
    for _ in range(3):
        db.run(lambda s: configs.record_miss(s, KEY))
    rows = db.run(lambda s: list(s.scalars(select(LookupMiss))), write=False)
    assert [(r.key_slug, r.count, r.kernel, r.arch) for r in rows] == [(KEY.slug(), 3, "pack", "interp")]
    assert rows[0].last_seen >= rows[0].first_seen


def test_sqlite_busy_is_retried_not_raised(tmp_path) -> None:  # noqa: ANN001
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    db = Database(url, sqlite_busy_ms=50)  # a busy timeout far shorter than the lock below
    migrate.upgrade(db)
    raw = sqlite3.connect(tmp_path / "busy.db", isolation_level=None, check_same_thread=False)
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("UPDATE jobs SET trials = trials")
    threading.Timer(0.6, lambda: raw.execute("COMMIT")).start()
    t0 = time.monotonic()
    job = jobs.submit(db, spec())  # would be "database is locked" without the retry loop
    assert time.monotonic() - t0 >= 0.5
    assert jobs.get(db, job.id).status == "queued"
    raw.close()
    db.dispose()


def test_in_process_claim_race(db: Database) -> None:
    jobs.submit_many(db, [spec() for _ in range(60)])
    claimed: list[tuple[int, int]] = []
    lock = threading.Lock()

    def claimer(i: int) -> None:
        while (lease := queue.claim(db, arch="interp", owner=f"t{i}", lease_s=60)) is not None:
            with lock:
                claimed.append((lease.job_id, lease.attempt))

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == [(i, 1) for i in range(1, 61)]
    assert db.run(lambda s: s.execute(text("SELECT count(*) FROM jobs WHERE status = 'running'")).scalar()) == 60
