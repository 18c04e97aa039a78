"""The fault test of issue 24's done-when, on the real PostgreSQL: 10 jobs (8 single, 2 distributed;
two or three per key, so publishes supersede each other) on 2 real `kvtune worker` processes with
the real tuner on `interp`, while every connection to the job database is terminated every few
seconds (`pg_terminate_backend`, the workers' queue and Optuna pools alike). Every job succeeds,
exactly one config per (key, bucket) is active, and no Optuna trial is left RUNNING.

Bounded: 3 trials of one bucket per job, at most 120 rounds of terminations (one every 2 s), 300 s in all."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from sqlalchemy import func, select, text

from catalog.core import Bucket
from catalog.keys import make_key
from db import jobs, migrate
from db.models import Job, KernelConfig
from db.session import Database
from tests.deploy.chaos import Killer, scratch_pg  # noqa: F401  (fixture)
from tests.service.procs import start_worker, stop

FORMATS = ["fp8_528", "nvfp4_288", "fp8_584", "mxfp4_68"]
B = Bucket("N", 1, 4)


def _specs() -> list[jobs.JobSpec]:
    keys = [make_key("pack", "interp", formats=[f]) for f in FORMATS]
    out = [jobs.JobSpec(key=keys[i % len(keys)], buckets=(B,), trials=3, seed=i) for i in range(8)]
    out += [jobs.JobSpec(key=keys[i], buckets=(B,), trials=3, seed=10 + i, distributed=True) for i in range(2)]
    return out


def test_ten_jobs_succeed_while_the_database_drops_every_connection(scratch_pg: str, tmp_path: Path) -> None:  # noqa: F811
    db = Database(scratch_pg)
    migrate.upgrade(db)
    specs = _specs()
    ids = [jobs.submit(db, s).id for s in specs]
    env = {"KVTUNE_POLL_S": "0.2"}
    workers = [start_worker(scratch_pg, tmp_path / f"w{i}.log", "--lease", "6", **env) for i in range(2)]
    t0 = time.monotonic()

    def statuses() -> Counter[str]:
        return Counter(db.run(lambda s: [r[0] for r in s.execute(select(Job.status))], write=False))

    try:
        with Killer(scratch_pg, period_s=2.0, limit=120) as killer:
            while time.monotonic() - t0 < 300:
                st = statuses()
                if st["queued"] + st["running"] == 0:
                    break
                time.sleep(1.0)
        alive = [w.poll() is None for w in workers]
    finally:
        for w in workers:
            stop(w)
    logs = "\n".join((tmp_path / f"w{i}.log").read_text()[-4000:] for i in range(2))
    try:
        final = {j: jobs.get(db, j) for j in ids}
        assert {j: v.status for j, v in final.items()} == {j: "succeeded" for j in ids}, (
            {j: (v.status, v.error) for j, v in final.items() if v.status != "succeeded"}, logs)
        assert killer.rounds >= 3 and killer.killed > 0, (killer.rounds, killer.killed)
        assert alive == [True, True], logs  # the workers rode it out
        # Exactly one active config per (key, bucket), however many jobs of the key published.
        active = db.run(lambda s: s.execute(select(KernelConfig.key_slug, KernelConfig.bucket, func.count())
                                            .where(KernelConfig.active.is_(True))
                                            .group_by(KernelConfig.key_slug, KernelConfig.bucket)).all(), write=False)
        assert sorted((k, b, n) for k, b, n in active) == sorted((s.key.slug(), B.name(), 1)
                                                                 for s in {s.key.slug(): s for s in specs}.values())
        # No Optuna trial left RUNNING in any job's study.
        running = db.run(lambda s: s.execute(text(
            "SELECT s.study_name, t.number FROM trials t JOIN studies s ON s.study_id = t.study_id "
            "WHERE t.state = 'RUNNING'")).all(), write=False)
        assert running == []
    finally:
        db.dispose()
