"""A stand-in for `tuner.search.tune` with the same signature, for queue tests that need hundreds
of jobs to finish in seconds (selected in a worker by KVTUNE_WORKER_TUNE=tests.service.fake_tune:tune).

Behaviour by the job's `seed` (so a test picks it per job): seed % 10 == 7 raises (the job fails),
seed % 10 == 9 gives only failed trials (no verified config: the job fails). Each trial sleeps
KVTUNE_FAKE_TRIAL_S seconds; `should_stop` is honoured between trials.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from catalog.core import Bucket, ProblemKey, TrialStatus
from tuner.kernels import get_family
from catalog.results import BucketResult, TrialRecord, TuneResult


def tune(key: ProblemKey, *, buckets: list[Bucket] | None = None, trials: int = 32, search: str = "tpe",
         target: str = "auto", time_budget_s: float | None = None, storage: str | None = None, seed: int = 0,
         on_trial: Callable[[TrialRecord], None] | None = None, should_stop: Callable[[], bool] | None = None,
         runner=None, family: str | None = None) -> TuneResult:  # noqa: ANN001
    fam = get_family(family or key.kernel)
    if seed % 10 == 7:
        raise RuntimeError(f"fake tuner crash for seed {seed}")
    sleep_s = float(os.environ.get("KVTUNE_FAKE_TRIAL_S", "0"))
    configs = list(fam.space(key).grid())
    default = fam.default_config(key)
    configs = [default] + [c for c in configs if c != default]
    out = []
    for bucket in buckets or fam.buckets(key):
        recs: list[TrialRecord] = []
        for i in range(trials):
            if should_stop and should_stop():
                break
            if sleep_s:
                time.sleep(sleep_s)
            ok = seed % 10 != 9
            rec = TrialRecord(
                number=i, bucket=bucket, config=configs[i % len(configs)],
                status=TrialStatus.OK if ok else TrialStatus.WRONG_RESULT,
                time_us=(100.0 - 10.0 * i) if ok else None, error=None if ok else "fake mismatch",
                source_hash="", timing="fake",
            )
            recs.append(rec)
            if on_trial:
                on_trial(rec)
        if not recs:
            break
        good = [r for r in recs if r.ok]
        best = min(good, key=lambda r: r.time_us) if good else None  # type: ignore[arg-type,return-value]
        out.append(BucketResult(bucket=bucket, default=recs[0], best=best, trials=tuple(recs)))
    return TuneResult(key=key, target=target, buckets=tuple(out), device_name="fake-device",
                      triton_version="fake", torch_version="fake")
