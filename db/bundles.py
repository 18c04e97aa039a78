"""The bundle an engine fetches at startup: for one (arch, heads, topk, window), per kernel and per
bucket, the config to launch, its generated source's hash and where it came from.

A kernel with no tuned config for the key is served its family's default config for each default
bucket, marked `"default": true`, and the lookup is recorded as a miss (the dashboard's list of keys
worth tuning). Buckets a run did not tune keep their default entries too, so coverage is explicit.
"""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy.orm import Session

from db import warmup as db_warmup
from db.configs import active_configs, record_miss, store_sources
from db.models import KernelConfig
from db.session import Database
from catalog.core import Bucket, ProblemKey
from catalog.families import family_names, get_spec
from catalog.keys import make_key



def _overlaps(a: Bucket, b: Bucket) -> bool:
    return a.dim == b.dim and a.ctx == b.ctx and a.lo <= b.hi and b.lo <= a.hi


def _tuned_entry(c: KernelConfig, wk: Any = None) -> dict[str, Any]:
    speedup = c.default_time_us / c.time_us if c.time_us and c.default_time_us else None
    return {
        "warmup": {"target": wk.target, "triton_version": wk.triton_version, "keys": wk.keys} if wk else None,
        "bucket": c.bucket_json,
        "name": c.bucket,
        "default": False,
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


def build_bundle(
    db: Database, *, arch: str, heads: int, topk: int, window: int, formats: Sequence[str] | None = None,
    kernels: Sequence[str] | None = None, record_misses: bool = True,
) -> dict[str, Any]:
    plans: list[tuple[str, ProblemKey, Any]] = []
    skipped: dict[str, str] = {}
    for name in kernels or family_names():
        try:
            family = get_spec(name)
            key = make_key(name, arch, heads, topk, window, formats)
        except (ImportError, ValueError) as e:  # a family not in this build, or formats it cannot take
            skipped[name] = str(e)
            continue
        plans.append((name, key, family))

    def tx(s: Session) -> dict[str, Any]:
        out: dict[str, Any] = {}
        misses: list[str] = []
        for name, key, family in plans:
            tuned = active_configs(s, key.slug())
            stored_keys = db_warmup.load(s, [c.id for c in tuned])
            entries = [_tuned_entry(c, stored_keys.get(c.id)) for c in tuned]
            tuned_buckets = [Bucket.from_json(c.bucket_json) for c in tuned]
            default_cfg = family.default_config(key)
            defaults = [b for b in family.buckets(key) if not any(_overlaps(b, t) for t in tuned_buckets)]
            if defaults:
                rs = family.modules(key, default_cfg)
                rendered = rs[0]
                # The default's sources must be fetchable by hash like any tuned one's.
                store_sources(s, [(r.source_hash, r.template, r.source) for r in rs])
                for b in defaults:
                    entries.append({
                        "bucket": b.to_json(), "name": b.name(), "default": True, "config": default_cfg.as_dict(),
                        "source_hash": rendered.source_hash, "time_us": None, "default_config": default_cfg.as_dict(),
                        "default_time_us": None, "speedup": None, "provenance": None, "warmup": None,
                    })
            if not tuned:
                misses.append(key.slug())
                if record_misses:
                    record_miss(s, key)
            entries.sort(key=lambda e: (e["bucket"]["dim"], e["bucket"]["ctx"], e["bucket"]["lo"]))
            out[name] = {"key": key.to_json(), "key_slug": key.slug(), "tuned": bool(tuned), "buckets": entries}
        return {
            "arch": arch, "heads": heads, "topk": topk, "window": window,
            "formats": list(formats) if formats else None,
            "kernels": out, "misses": misses, "unavailable": skipped,
            "warmup": db_warmup.merge(out),
        }

    return db.run(tx)
