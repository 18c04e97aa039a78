"""Published configs, generated sources and lookup misses.

Publishing happens inside the worker's fenced completion transaction (db.queue.complete): the job
turns `succeeded` and every winner of the run becomes the one active config of its (key, bucket) in
the same commit, so an engine never sees half a run.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from db.clock import utcnow
from db.errors import NotFound
from db.models import KernelConfig, KernelSource, LookupMiss
from db.session import Database
from catalog.core import ProblemKey
from catalog.results import TuneResult


def _insert(s: Session, table: Any) -> Any:
    return pg_insert(table) if s.get_bind().dialect.name == "postgresql" else sqlite_insert(table)


def store_sources(s: Session, sources: Iterable[tuple[str, str, str]]) -> None:
    """(source_hash, template, source) rows; a hash already stored is left alone (same content)."""
    for h, template, source in sources:
        s.execute(
            _insert(s, KernelSource)
            .values(source_hash=h, template=template, source=source, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["source_hash"])
        )


def publish(
    s: Session, *, job_id: int | None, key: ProblemKey, result: TuneResult, source_hashes: dict[str, str],
    warmup_keys: Mapping[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Make each bucket's verified winner the active config of (key, bucket), superseding the old one.
    `source_hashes` maps bucket name -> the winner's source hash (its source stored by the caller);
    `warmup_keys` maps bucket name -> the winner's warmup keys (tuner.warmup), stored with it.
    Returns the per-bucket summary the job keeps as its final `best`."""
    from db import warmup as db_warmup
    slug = key.slug()
    if s.get_bind().dialect.name == "postgresql":
        # Serialise publishers of one key so the second sees (and supersedes) the first's rows.
        s.execute(text("SELECT pg_advisory_xact_lock(hashtext(:slug))"), {"slug": slug})
    summary: dict[str, Any] = {}
    now = utcnow()
    for br in result.buckets:
        name = br.bucket.name()
        failed = br.failed_by_status()
        if br.best is None:
            summary[name] = {"published": False, "reason": "no verified config", "failed": failed}
            continue
        s.execute(
            update(KernelConfig)
            .where(KernelConfig.key_slug == slug, KernelConfig.bucket == name, KernelConfig.active.is_(True))
            .values(active=False)
        )
        row = KernelConfig(
                key_slug=slug, key_json=key.to_json(), kernel=key.kernel, arch=key.arch, heads=key.heads,
                topk=key.topk, window=key.window, bucket=name, bucket_json=br.bucket.to_json(),
                params=br.best.config.as_dict(), source_hash=source_hashes[name], time_us=br.best.time_us,
                default_params=br.default.config.as_dict(),
                default_time_us=br.default.time_us if br.default.ok else None,
                timing=br.best.timing, trials_run=len(br.trials), trials_failed=failed or None,
                triton_version=result.triton_version, torch_version=result.torch_version,
                device_name=result.device_name, job_id=job_id, active=True, created_at=now,
        )
        s.add(row)
        if warmup_keys and warmup_keys.get(name) is not None:
            s.flush()  # the row's id
            db_warmup.store(s, row.id, warmup_keys[name], result.target, result.triton_version)
        summary[name] = {
            "published": True, "params": br.best.config.as_dict(), "time_us": br.best.time_us,
            "default_time_us": br.default.time_us if br.default.ok else None, "speedup": br.speedup,
            "source_hash": source_hashes[name], "trials": len(br.trials), "failed": failed,
        }
    s.flush()
    return summary


def active_configs(s: Session, key_slug: str) -> list[KernelConfig]:
    q = select(KernelConfig).where(KernelConfig.key_slug == key_slug, KernelConfig.active.is_(True))
    return list(s.scalars(q.order_by(KernelConfig.bucket)))


def record_miss(s: Session, key: ProblemKey) -> None:
    now = utcnow()
    stmt = _insert(s, LookupMiss).values(
        key_slug=key.slug(), key_json=key.to_json(), kernel=key.kernel, arch=key.arch, count=1,
        first_seen=now, last_seen=now,
    )
    s.execute(stmt.on_conflict_do_update(
        index_elements=["key_slug"], set_={"count": LookupMiss.count + 1, "last_seen": stmt.excluded.last_seen}
    ))


def get_source(db: Database, source_hash: str) -> KernelSource:
    def tx(s: Session) -> KernelSource:
        row = s.get(KernelSource, source_hash)
        if row is None:
            raise NotFound(f"no kernel source with hash {source_hash}")
        return row

    return db.run(tx, write=False)


def counts(db: Database) -> dict[str, int]:
    def tx(s: Session) -> dict[str, int]:
        return {
            "configs_active": int(s.scalar(select(func.count()).select_from(KernelConfig).where(KernelConfig.active.is_(True))) or 0),
            "configs_total": int(s.scalar(select(func.count()).select_from(KernelConfig)) or 0),
            "kernel_sources": int(s.scalar(select(func.count()).select_from(KernelSource)) or 0),
            "lookup_miss_keys": int(s.scalar(select(func.count()).select_from(LookupMiss)) or 0),
            "lookup_misses": int(s.scalar(select(func.coalesce(func.sum(LookupMiss.count), 0))) or 0),
        }

    return db.run(tx, write=False)
