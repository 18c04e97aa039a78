"""The last step of a job on a worker: render the winners, record their warmup keys, and publish
them with the job's success in one fenced transaction (db.queue.complete / complete_shared)."""

from __future__ import annotations

import logging
from typing import Any

from catalog.results import TuneResult
from db import configs as db_configs
from db import queue
from db.errors import LeaseLost
from db.leases import Lease
from db.session import Database

log = logging.getLogger("kvtune.worker")


def publish(db: Database, lease: Lease, family: Any, result: TuneResult, progress: dict[str, Any] | None) -> None:
    """Publish `result`'s verified winners for `lease`'s job, or fail the job when there is none or
    a winner does not render. `progress`: the job's final progress (None for a distributed job,
    whose progress its participants keep in the row). A lost lease publishes nothing."""
    winners = [br for br in result.buckets if br.best is not None]
    if not winners:
        failed = {k: v for br in result.buckets for k, v in br.failed_by_status().items()}
        queue.fail(db, lease, f"no verified config in any bucket (failed trials by status: {failed})")
        return

    hashes: dict[str, str] = {}
    sources: dict[str, tuple[str, str, str]] = {}
    try:
        for br in winners:
            assert br.best is not None
            rs = family.modules(lease.key, br.best.config)  # the config's own module first
            hashes[br.bucket.name()] = rs[0].source_hash
            for r in rs:
                sources[r.source_hash] = (r.source_hash, r.template, r.source)
    except Exception as e:  # noqa: BLE001
        queue.fail(db, lease, f"cannot render the winning config: {type(e).__name__}: {e}")
        return
    warmup_keys = winner_warmup_keys(family, lease.key, winners, result.target)

    def write(s: Any) -> dict[str, Any]:
        db_configs.store_sources(s, sources.values())
        return db_configs.publish(s, job_id=lease.job_id, key=lease.key, result=result, source_hashes=hashes,
                                  warmup_keys=warmup_keys)

    try:
        if lease.distributed:
            queue.complete_shared(db, lease, write)
        else:
            assert progress is not None
            queue.complete(db, lease, write, progress=progress)
        log.info("%s: job %d succeeded: %d bucket(s) published", lease.owner, lease.job_id, len(winners))
    except LeaseLost:
        log.warning("%s: job %d: lease lost before publishing; nothing published", lease.owner, lease.job_id)


def winner_warmup_keys(family: Any, key: Any, winners: list[Any], target: str) -> dict[str, list[dict[str, Any]]]:
    """Each winner's warmup keys (tuner.warmup), recorded on this worker's own GPU: launchers size
    some launch arguments from the device (decode's automatic split count follows its SM count), so
    keys belong to the device model the config was tuned on. The interpreter compiles nothing, so it
    gets none. A bucket whose keys cannot be enumerated is published without them (the bundle lists
    it under `warmup.missing`): failures are data, they never cost the tuned config."""
    if target == "interp":
        return {}
    import torch

    from tuner.warmup import keys_for

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out: dict[str, list[dict[str, Any]]] = {}
    for br in winners:
        try:
            keys = keys_for(family.name, key, br.best.config, br.bucket, target, device=device)
            out[br.bucket.name()] = [k.to_json() for k in keys]
        except Exception as e:  # noqa: BLE001
            log.warning("warmup keys for %s %s: %s: %s", key.slug(), br.bucket.name(), type(e).__name__, e)
    return out
