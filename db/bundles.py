"""The bundle an engine fetches at startup: for one (arch, heads, topk, window, formats), per kernel
and per bucket, the config to launch, its generated source's hash and where it came from.

Reading a bundle never writes. A kernel with no tuned config for the key is served its family's
default config for each default bucket, marked `"default": true`, and the key is returned as a miss
for the caller to count (api/read_path.py counts misses in memory and db/misses.py writes them in
batches). The default's generated sources must be fetchable by hash like a tuned one's: the read
returns the ones not stored yet, and the caller stores them once, in a transaction of their own
(`store_sources`), so a key's second read finds them and writes nothing. Buckets a run did not tune
keep their default entries, so coverage is explicit.

Version-aware: given the engine's Triton version and/or device name, each bucket serves the newest
config published for it with that version on that device (the active one, or one a later run on
other hardware superseded); a bucket with none serves its active config marked
`"stale": {field: the config's value}` for each field that differs from the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from db import generation
from db import warmup as db_warmup
from db.configs import active_configs, store_sources as _store_sources
from db.models import KernelConfig, KernelSource
from db.session import Database
from catalog.core import Bucket, ProblemKey
from catalog.coverage import fill_coverage
from catalog.families import family_names, get_spec
from catalog.keys import key_notes, make_key

Source = tuple[str, str, str]  # (source_hash, template, source)


@dataclass(frozen=True)
class BundleRequest:
    """Everything a bundle depends on besides the database: the cache key of api/read_path.py."""

    arch: str
    heads: int
    topk: int
    window: int
    formats: tuple[str, ...] | None = None
    triton: str | None = None
    device: str | None = None
    kernels: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Built:
    bundle: dict[str, Any]
    generation: generation.Generation  # of the snapshot the bundle was read from
    miss_keys: tuple[ProblemKey, ...]  # keys served only defaults
    unstored_sources: tuple[Source, ...]  # default sources the bundle names that are not stored yet


@dataclass(frozen=True)
class _Plan:
    name: str
    key: ProblemKey
    family: Any
    default_cfg: Any
    sources: tuple[Source, ...]  # the default config's modules, the launched one first


def _tuned_entry(c: KernelConfig, wk: Any, stale: dict[str, str] | None) -> dict[str, Any]:
    speedup = c.default_time_us / c.time_us if c.time_us and c.default_time_us else None
    return {
        "warmup": {"target": wk.target, "triton_version": wk.triton_version, "keys": wk.keys} if wk else None,
        "bucket": c.bucket_json,
        "name": c.bucket,
        "default": False,
        "stale": stale,
        "config": c.params,
        "source_hash": c.source_hash,
        "time_us": c.time_us,
        "default_config": c.default_params,
        "default_time_us": c.default_time_us,
        "speedup": speedup,
        "provenance": {
            "job_id": c.job_id,
            "created_at": c.created_at.isoformat(),
            "device_name": c.device_name,
            "triton_version": c.triton_version,
            "torch_version": c.torch_version,
            "timing": c.timing,
            "trials_run": c.trials_run,
            "trials_failed": c.trials_failed or {},
        },
    }


def _default_entry(b: Bucket, plan: _Plan) -> dict[str, Any]:
    cfg = plan.default_cfg.as_dict()
    return {
        "bucket": b.to_json(), "name": b.name(), "default": True, "stale": None, "config": cfg,
        "source_hash": plan.sources[0][0], "time_us": None, "default_config": cfg, "default_time_us": None,
        "speedup": None, "provenance": None, "warmup": None,
    }


def _plans(req: BundleRequest) -> tuple[list[_Plan], dict[str, str]]:
    """Each family's key and rendered default, outside any transaction. A family that cannot take the
    request (not in this build, formats it does not read, a default it cannot render) is listed as
    unavailable with the reason instead of failing the bundle."""
    plans: list[_Plan] = []
    skipped: dict[str, str] = {}
    for name in req.kernels or family_names():
        try:
            family = get_spec(name)
            key = make_key(name, req.arch, req.heads, req.topk, req.window, list(req.formats) if req.formats else None)
            cfg = family.default_config(key)
            rs = family.modules(key, cfg)
        except (ImportError, ValueError, KeyError, TypeError) as e:
            skipped[name] = str(e)
            continue
        plans.append(_Plan(name, key, family, cfg, tuple((r.source_hash, r.template, r.source) for r in rs)))
    return plans, skipped


def _stale(c: KernelConfig, req: BundleRequest) -> dict[str, str] | None:
    diff: dict[str, str] = {}
    if req.triton and c.triton_version != req.triton:
        diff["triton_version"] = c.triton_version
    if req.device and c.device_name != req.device:
        diff["device_name"] = c.device_name
    return diff or None


def _choose(s: Session, slug: str, req: BundleRequest) -> list[tuple[KernelConfig, dict[str, str] | None]]:
    """Per active bucket, the config to serve and its stale mark (see the module docstring)."""
    active = active_configs(s, slug)
    if not (req.triton or req.device) or not active:
        return [(c, None) for c in active]
    q = select(KernelConfig).where(KernelConfig.key_slug == slug, KernelConfig.bucket.in_([c.bucket for c in active]))
    if req.triton:
        q = q.where(KernelConfig.triton_version == req.triton)
    if req.device:
        q = q.where(KernelConfig.device_name == req.device)
    newest: dict[str, KernelConfig] = {}
    for c in s.scalars(q.order_by(KernelConfig.id.desc())):
        newest.setdefault(c.bucket, c)
    return [(newest[c.bucket], None) if c.bucket in newest else (c, _stale(c, req)) for c in active]


def _kernel(s: Session, plan: _Plan, req: BundleRequest) -> dict[str, Any]:
    chosen = _choose(s, plan.key.slug(), req)
    stored_keys = db_warmup.load(s, [c.id for c, _ in chosen])
    entries = [_tuned_entry(c, stored_keys.get(c.id), stale) for c, stale in chosen]
    tuned_buckets = [Bucket.from_json(c.bucket_json) for c, _ in chosen]
    # Coverage is explicit: the default buckets split around the tuned ones, so every size the
    # defaults covered has exactly one entry (a tuned N1-4 leaves a default N5-64, not a hole).
    entries += [_default_entry(b, plan) for b in fill_coverage(plan.family.buckets(plan.key), tuned_buckets)]
    entries.sort(key=lambda e: (e["bucket"]["dim"], e["bucket"]["ctx"], e["bucket"]["lo"]))
    return {"key": plan.key.to_json(), "key_slug": plan.key.slug(), "tuned": bool(chosen),
            "notes": key_notes(plan.key, req.formats), "buckets": entries}


def read_bundle(db: Database, req: BundleRequest) -> Built:
    """The bundle for `req` from one read-only snapshot, with the generation of that snapshot."""
    plans, skipped = _plans(req)

    def tx(s: Session) -> Built:
        gen = generation.read(s)
        out = {p.name: _kernel(s, p, req) for p in plans}
        named = {src[0]: src for p in plans if any(e["default"] for e in out[p.name]["buckets"]) for src in p.sources}
        stored = set(s.scalars(select(KernelSource.source_hash).where(KernelSource.source_hash.in_(list(named))))) if named else set()
        misses = [p.key for p in plans if not out[p.name]["tuned"]]
        bundle = {
            "arch": req.arch, "heads": req.heads, "topk": req.topk, "window": req.window,
            "formats": list(req.formats) if req.formats else None, "triton": req.triton, "device": req.device,
            "kernels": out, "misses": [k.slug() for k in misses], "unavailable": skipped,
            "warmup": db_warmup.merge(out),
        }
        unstored = tuple(src for h, src in sorted(named.items()) if h not in stored)
        return Built(bundle, gen, tuple(misses), unstored)

    return db.run(tx, write=False)


def store_sources(db: Database, sources: Sequence[Source]) -> None:
    """Store default sources a read found missing (their own short write; a hash already stored by
    another process in the meantime is left alone)."""
    if sources:
        db.run(lambda s: _store_sources(s, sources))
