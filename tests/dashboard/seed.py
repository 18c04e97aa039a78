"""Fill a database for the dashboard tests through the db/ functions the service itself uses
(configs.publish, configs.record_miss, jobs.submit), never raw SQL, so the rows are what a worker
and an engine would have written."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from db import configs, jobs
from db.session import Database
from catalog.core import Bucket, Config, ProblemKey, TrialStatus
from catalog.keys import make_key
from catalog.results import BucketResult, TrialRecord, TuneResult

ARCHS = ("sm_90", "sm_100", "gfx950")
DEFAULT_CFG = Config.of(BLOCK=32, num_warps=4, num_stages=1)
TUNED_CFG = Config.of(BLOCK=64, num_warps=8, num_stages=2)


@dataclass(frozen=True)
class Row:
    """One published (key, bucket): what the page must show for it."""

    bucket: Bucket
    default_us: float
    tuned_us: float
    failed: tuple[tuple[TrialStatus, int], ...] = ()


def bucket_result(row: Row) -> BucketResult:
    default = TrialRecord(number=0, bucket=row.bucket, config=DEFAULT_CFG, status=TrialStatus.OK,
                          time_us=row.default_us, timing="cuda-graph")
    trials = [default]
    for status, n in row.failed:
        trials += [TrialRecord(number=len(trials), bucket=row.bucket, config=TUNED_CFG.replace(BLOCK=16 + i),
                               status=status, error="seeded failure") for i in range(n)]
    best = TrialRecord(number=len(trials), bucket=row.bucket, config=TUNED_CFG, status=TrialStatus.OK,
                       time_us=row.tuned_us, timing="cuda-graph")
    return BucketResult(bucket=row.bucket, default=default, best=best, trials=tuple(trials + [best]))


def publish(db: Database, key: ProblemKey, rows: list[Row], *, triton: str = "3.6.0", device: str = "NVIDIA H200",
            job_id: int | None = None) -> None:
    result = TuneResult(key=key, target=key.arch, buckets=tuple(bucket_result(r) for r in rows), device_name=device,
                        triton_version=triton, torch_version="2.11.0", timing="cuda-graph")
    hashes = {r.bucket.name(): hashlib.sha256(f"{key.slug()}/{r.bucket.name()}".encode()).hexdigest()[:16] for r in rows}
    db.run(lambda s: configs.publish(s, job_id=job_id, key=key, result=result, source_hashes=hashes))


def record_miss(db: Database, key: ProblemKey, times: int = 1) -> None:
    for _ in range(times):
        db.run(lambda s: configs.record_miss(s, key))


def many_keys(n: int = 50) -> list[ProblemKey]:
    """n distinct keys spread over three archs and all three kernels."""
    from tuner.formats import FORMATS

    out: list[ProblemKey] = []
    i = 0
    while len(out) < n:
        arch = ARCHS[i % 3]
        kind = (i // 3) % 3
        if kind == 0:
            key = make_key("decode", arch, heads=4 * (1 + i % 16), topk=256 << (i % 4), window=128)
        elif kind == 1:
            key = make_key("pack", arch, formats=[sorted(FORMATS)[(i // 9) % len(FORMATS)]])
        else:
            key = make_key("logits", arch, topk=512 * (1 + i % 8))
        if key not in out:
            out.append(key)
        i += 1
    return out


def buckets_for(key: ProblemKey, n: int = 3) -> list[Bucket]:
    from tuner.kernels import get_family

    return get_family(key.kernel).buckets(key)[:n]


def fill_many(db: Database, n: int = 50) -> list[ProblemKey]:
    keys = many_keys(n)
    for j, key in enumerate(keys):
        rows = [Row(b, default_us=100.0 + j, tuned_us=(100.0 + j) / (1.1 + 0.1 * k)) for k, b in enumerate(buckets_for(key))]
        publish(db, key, rows)
    return keys


def submit_job(db: Database, key: ProblemKey, trials: int = 4) -> int:
    return jobs.submit(db, jobs.JobSpec(key=key, trials=trials)).id
