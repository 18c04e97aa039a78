"""Issue 24: dropping a worker's database connections (`pg_terminate_backend`) made every running job
fail for good (`StorageInternalError` from the Optuna storage). Now the storage pre-pings its pool
and retries a call whose connection was lost (tuner.study_storage), and a tune that still loses
its connection gives the job back to the queue instead of failing it (kvtune.worker)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from catalog.core import Bucket
from catalog.keys import make_key
from db import jobs, queue
from db.session import Database
from kvtune.worker import Worker
from tests.deploy.chaos import Killer, scratch_pg, terminate_all  # noqa: F401  (fixture)
from tuner.bench.protocol import Candidate, Measurement
from tuner.bench.simulation import SimulatedRunner, synthetic_table
from tuner.search import study_name, tune
from tuner.study_storage import open_storage

KEY = make_key("pack", "interp", formats=["fp8_528"])
B = Bucket("N", 1, 4)
@pytest.fixture(scope="module")
def table() -> dict:
    return synthetic_table("pack", KEY, [B], seed=11)  # SYNTHETIC: made-up times


def test_a_tune_survives_its_connections_being_terminated(scratch_pg: str, table: dict) -> None:  # noqa: F811
    class Terminating(SimulatedRunner):
        """Drops every database connection while each candidate is measured (the storage's pooled
        ones included), as an operator's `pg_terminate_backend` would."""

        killed = 0

        def evaluate(self, candidate: Candidate) -> Measurement:
            self.killed += terminate_all(scratch_pg)
            return super().evaluate(candidate)

    runner = Terminating(table)
    # The schema exists before the connections start to drop, as a fleet's `kvtune db upgrade`
    # makes it before any worker runs: creating Optuna's tables is dozens of DDL statements, and on
    # a slow day of a 2-core machine no attempt of it finished between two kills 0.15 s apart (30
    # attempts, 2026-12-02). What the test is about -- every storage call of a running tune, over
    # pooled connections killed under it -- runs under the killer as before.
    open_storage(scratch_pg)
    with Killer(scratch_pg, 0.15) as killer:  # and more of them at any moment, mid-query too
        res = tune(KEY, buckets=[B], trials=12, search="random", seed=3, storage=scratch_pg, runner=runner,
                   study_job=1)
    # Each trial's storage calls open a connection that one of the two kills: the runner's during the
    # measurement, or the killer's first when it comes in between (then the runner finds none to kill,
    # as in a CI run of 2026-12-05: 10 of 12). So the kills are counted together.
    assert runner.calls == 12 and runner.killed + killer.killed >= 12 and killer.killed > 0
    assert len(res.buckets) == 1 and res.buckets[0].best is not None and len(res.buckets[0].trials) == 12
    study = optuna.load_study(study_name=study_name(KEY, B, 1), storage=scratch_pg)
    assert [t.number for t in study.get_trials(states=(TrialState.RUNNING,))] == []


def _lost_connection() -> optuna.exceptions.StorageInternalError:
    cause = OperationalError("UPDATE trials ...", {}, Exception("terminating connection due to administrator command"))
    try:
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
    except optuna.exceptions.StorageInternalError as e:
        return e


def _dropping_tune(key: Any, **kw: Any) -> Any:
    """A tuner whose Optuna storage lost its connection beyond the retries, after one trial."""
    from catalog.core import Config, TrialStatus
    from catalog.results import TrialRecord

    kw["on_trial"](TrialRecord(number=0, bucket=B, config=Config.of(), status=TrialStatus.OK, time_us=1.0))
    raise _lost_connection()


_dropping_tune.shared_studies = True  # type: ignore[attr-defined]


def test_a_lost_database_connection_requeues_the_job_instead_of_failing_it(db: Database) -> None:
    job_id = jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(B,), trials=4)).id
    worker = Worker(db, arch="interp", tune=_dropping_tune, lease_s=30)
    lease = queue.claim(db, arch="interp", owner=worker.owner, lease_s=30)
    assert lease is not None and lease.job_id == job_id
    worker.run_job(lease)
    j = jobs.get(db, job_id)
    assert (j.status, j.attempt, j.expired_leases, j.lease_owner) == ("queued", 1, 0, None), j.error
    assert j.error.startswith("released: database connection lost: StorageInternalError")
    again = queue.claim(db, arch="interp", owner="next", lease_s=30)  # and the job runs again
    assert again is not None and (again.job_id, again.attempt) == (job_id, 2)


def test_a_distributed_participant_that_loses_its_connection_leaves_the_job(db: Database) -> None:
    job_id = jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(B,), trials=4, distributed=True)).id
    worker = Worker(db, arch="interp", tune=_dropping_tune, lease_s=30)
    lease = queue.claim(db, arch="interp", owner=worker.owner, lease_s=30)
    assert lease is not None and lease.distributed
    worker.run_job(lease)
    j = jobs.get(db, job_id)
    assert (j.status, j.attempt, j.expired_leases) == ("queued", 1, 0), j.error
    assert {p["owner"]: p["status"] for p in queue.participants(db, job_id)} == {worker.owner: "left"}


def test_a_worker_starting_while_connections_drop_keeps_running(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI run lost a worker process at start: creating Optuna's tables under the chaos test's
    killer raised `StorageInternalError` (Optuna wraps the driver's error, so it is no
    SQLAlchemyError), which ended `kvtune worker`. Now every try is retried, none is fatal, and the
    worker goes on to claim jobs (the first job's storage creates the tables then)."""
    from kvtune import worker as worker_mod

    calls: list[int] = []

    def dropping(url: str) -> None:
        calls.append(1)
        raise _lost_connection()

    monkeypatch.setattr(worker_mod.search, "prepare_storage", dropping)
    job_id = jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(B,), trials=4)).id
    worker = Worker(db, arch="interp", tune=_dropping_tune, lease_s=30, poll_s=0.05)
    assert worker.run(once=True) == 0
    assert len(calls) == 5  # every try made, then on to the queue
    j = jobs.get(db, job_id)  # the job was claimed and run (and, its tune losing the database, given back)
    assert (j.status, j.attempt) == ("queued", 1) and j.error.startswith("released: database connection lost")
