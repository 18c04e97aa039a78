"""Issue 24: a worker frozen past its lease and resumed still wrote to the job's Optuna study (a trial
told after its heartbeat saw the lease lost), and the publisher read the study, so a fenced-out
worker's record could be published. Now every trial carries its job attempt and owner, and a job
publishes only what its fenced trial rows hold.

The worker here is the real one, in this process, on the real search over a recorded (synthetic)
table; the fenced-out worker's trial is written into the study as it would have written it."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from sqlalchemy import select

from catalog.core import Bucket, TrialStatus
from catalog.keys import make_key
from catalog.results import TrialRecord
from db import jobs, queue
from db.models import KernelConfig, TrialResult
from db.session import Database
from kvtune.worker import Worker
from tests.db.fixtures import lapse
from tuner import search
from tuner.bench.simulation import SimulatedRunner, synthetic_table
from tuner.kernels import get_family

KEY = make_key("pack", "interp", formats=["fp8_528"])
B = Bucket("N", 1, 4)
TABLE = synthetic_table("pack", KEY, [B], seed=7)  # SYNTHETIC: made-up times
RUN_ATTR = "kvtune_run"  # tuner.search.RUN_ATTR: who asked for a trial (job, attempt, owner)


def sim_tune(key: Any, **kw: Any) -> Any:
    """The real tuner, measuring on the recorded table instead of a device (for a distributed job
    too: the benchmark child `tune_shared` opens for it is never started)."""
    kw.pop("runner", None)
    return search.tune(key, runner=SimulatedRunner(TABLE), **kw)


sim_tune.shared_studies = True  # type: ignore[attr-defined]


def _ghost(storage: str, job_id: int, owner: str) -> dict[str, Any]:
    """What a fenced-out worker of attempt 1 told the study after losing its lease: a trial, with
    its record, faster than anything in the table (so it would win if it were read)."""
    fam = get_family("pack")
    space = fam.space(KEY)
    default = fam.default_config(KEY)
    entries = TABLE["buckets"][B.name()]["entries"]
    cfg = next(c for c in space.grid() if c != default and entries.get(c.to_json(), {}).get("status") == "ok")
    study = optuna.create_study(study_name=search.study_name(KEY, B, job_id), storage=storage, direction="minimize",
                                load_if_exists=True)
    number = len(study.get_trials(deepcopy=False))
    rec = TrialRecord(number=number, bucket=B, config=cfg, status=TrialStatus.OK, time_us=0.001,
                      timing="simulated:synthetic")
    study.add_trial(optuna.trial.create_trial(
        params=cfg.as_dict(), distributions={p.name: CategoricalDistribution(list(p.choices)) for p in space.params},
        value=0.001, user_attrs={search.RECORD_ATTR: rec.to_json(),
                                 RUN_ATTR: {"job": job_id, "attempt": 1, "owner": owner}}))
    return cfg.as_dict()


@pytest.mark.parametrize("distributed", [False, True], ids=["single", "distributed"])
def test_a_fenced_out_workers_study_trial_is_never_published(db: Database, distributed: bool) -> None:
    job_id = jobs.submit(db, jobs.JobSpec(key=KEY, buckets=(B,), trials=5, distributed=distributed)).id
    frozen = queue.claim(db, arch="interp", owner="frozen-a", lease_s=30)
    assert frozen is not None and frozen.attempt == 1
    lapse(db, job_id)  # A froze; its lease ran out
    if distributed:
        lapse(db, job_id, "frozen-a")
    assert queue.requeue_expired(db) == 1
    worker = Worker(db, arch="interp", tune=sim_tune, lease_s=30)
    lease = queue.claim(db, arch="interp", owner=worker.owner, lease_s=30)
    assert lease is not None and (lease.job_id, lease.attempt) == (job_id, 2)
    ghost = _ghost(db.optuna_storage_url(), job_id, "frozen-a")  # A resumed and told Optuna its trial

    worker.run_job(lease)

    j = jobs.get(db, job_id)
    assert j.status == "succeeded", j.error
    cfg = db.run(lambda s: s.execute(select(KernelConfig.params, KernelConfig.time_us)
                                     .where(KernelConfig.active.is_(True))).one(), write=False)
    assert cfg.time_us != 0.001 and cfg.params != ghost
    rows = db.run(lambda s: s.execute(select(TrialResult.time_us, TrialResult.worker)
                                      .where(TrialResult.job_id == job_id)).all(), write=False)
    assert {r.worker for r in rows} == {worker.owner}  # A's trial never got a row...
    assert cfg.time_us == min(r.time_us for r in rows if r.time_us is not None)  # ...and the rows decide
    # Every trial B asked for says whose it is.
    study = optuna.load_study(study_name=search.study_name(KEY, B, job_id), storage=db.optuna_storage_url())
    assert search.RUN_ATTR == RUN_ATTR
    tags = [t.user_attrs.get(RUN_ATTR) for t in study.get_trials(deepcopy=False)]
    assert {"job": job_id, "attempt": 2, "owner": worker.owner} in tags
    assert all(t is not None for t in tags)
