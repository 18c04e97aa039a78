"""The dashboard's data: tuned against default per (arch, key, bucket), the roofline fraction, trial
counts, provenance with staleness, chart series, lookup misses and a job's study progress.

Everything here returns plain dicts and lists (no ORM objects), so the templates and the page's
JavaScript see exactly what this module computed, and nothing lazy-loads after the session closed.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from db.errors import NotFound
from db.models import Job, KernelConfig, LookupMiss, TrialResult
from db.session import Database
from catalog.core import Bucket, ProblemKey
from catalog.families import family_names, get_spec

# Measured device-to-device copy bandwidth per arch, in bytes/s: the denominator of the roofline
# floor (bytes_moved / bandwidth). Only what we measured ourselves is listed; an arch not here (and
# `interp`, whose timings are CPU timings) shows "-" rather than a guess.
#   sm_90: NVIDIA H200, torch copy of a large buffer, benchmarks/results/pack_h200.json `copy_bw_Bps`
#          (decode.json and logits.json measured the same 4.27 TB/s). An H100 would read lower.
COPY_BANDWIDTH_BPS: dict[str, float] = {
    "sm_90": 4.272e12,
}

# What a tune request needs for a key whose kernel ignores heads/topk/window (pack keys store 0s,
# which POST /v1/tune rejects): the seed shape, which make_key normalises away again.
_SEED_SHAPE = {"heads": 16, "topk": 512, "window": 128}


def copy_bandwidth(arch: str) -> float | None:
    return COPY_BANDWIDTH_BPS.get(arch)


@lru_cache(maxsize=4096)
def _bytes_moved(key: ProblemKey, bucket: Bucket) -> int | None:
    """The family's bytes model, or None when it has none or cannot size this key (a key written by
    an older build, an unknown format): the page then shows "-" instead of failing."""
    try:
        if key.kernel not in family_names():
            return None
        n = get_spec(key.kernel).bytes_moved(key, bucket)
        return int(n) if n and n > 0 else None
    except Exception:  # noqa: BLE001 - a bytes model that cannot size a stored key is "unknown", not a 500
        return None


def roofline_floor_us(key: ProblemKey, bucket: Bucket) -> float | None:
    """The time one launch would take moving its bytes at the arch's copy bandwidth."""
    bw = copy_bandwidth(key.arch)
    if bw is None:
        return None
    n = _bytes_moved(key, bucket)
    return None if n is None else n / bw * 1e6


def _fraction(floor_us: float | None, time_us: float | None) -> float | None:
    if floor_us is None or not time_us or time_us <= 0:
        return None
    return floor_us / time_us


def version_key(v: str) -> tuple[int, ...] | None:
    """`3.6.0`, `3.6.0+git1a2b`, `3.7.0rc1` -> (3, 6, 0) / (3, 7, 0); None when it has no release
    number (a stand-in tuner's "fake", an empty string)."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", v or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def newest_versions(versions_by_arch: dict[str, set[str]]) -> dict[str, str]:
    """Per arch, the highest Triton version among every config ever published for it."""
    out: dict[str, str] = {}
    for arch, versions in versions_by_arch.items():
        ranked = [(k, v) for v in versions if (k := version_key(v)) is not None]
        if ranked:
            out[arch] = max(ranked)[1]
    return out


def _bucket_order(b: dict[str, Any]) -> tuple[str, int, int, int]:
    return (str(b.get("dim", "")), int(b.get("ctx", 0) or 0), int(b.get("lo", 0) or 0), int(b.get("hi", 0) or 0))


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _iso(t: Any) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def _config_row(c: KernelConfig, newest: dict[str, str]) -> dict[str, Any]:
    key = ProblemKey.from_json(c.key_json)
    try:
        bucket: Bucket | None = Bucket.from_json(c.bucket_json)
    except (KeyError, TypeError, ValueError):
        bucket = None
    floor = roofline_floor_us(key, bucket) if bucket is not None else None
    speedup = c.default_time_us / c.time_us if c.time_us and c.default_time_us else None
    newest_v = newest.get(c.arch)
    failed = {str(k): int(v) for k, v in sorted((c.trials_failed or {}).items())}
    return {
        "bucket": c.bucket,
        "bucket_json": c.bucket_json,
        "default_us": c.default_time_us,
        "tuned_us": c.time_us,
        "speedup": speedup,
        "floor_us": floor,
        "frac_default": _fraction(floor, c.default_time_us),
        "frac_tuned": _fraction(floor, c.time_us),
        "trials_run": c.trials_run,
        "trials_failed": failed,
        "trials_failed_total": sum(failed.values()),
        "params": c.params,
        "source_hash": c.source_hash,
        "job_id": c.job_id,
        "created_at": _iso(c.created_at),
        "device": c.device_name,
        "timing": c.timing,
        "triton_version": c.triton_version,
        "torch_version": c.torch_version,
        "newest_triton": newest_v,
        "stale": bool(newest_v and c.triton_version != newest_v),
    }


def overview(db: Database, *, arch: str | None = None, kernel: str | None = None, limit: int = 200) -> dict[str, Any]:
    """The main page: active configs grouped arch -> key -> bucket rows (at most `limit` keys), the
    speedup-by-bucket series per kernel, and the filter choices."""

    def tx(s: Session) -> dict[str, Any]:
        versions: dict[str, set[str]] = {}
        for a, v in s.execute(select(KernelConfig.arch, KernelConfig.triton_version).distinct()):
            versions.setdefault(a, set()).add(v)
        newest = newest_versions(versions)
        all_archs = sorted(s.scalars(select(KernelConfig.arch).where(KernelConfig.active.is_(True)).distinct()))
        all_kernels = sorted(s.scalars(select(KernelConfig.kernel).where(KernelConfig.active.is_(True)).distinct()))

        keys_q = select(KernelConfig.arch, KernelConfig.kernel, KernelConfig.key_slug).where(KernelConfig.active.is_(True))
        if arch:
            keys_q = keys_q.where(KernelConfig.arch == arch)
        if kernel:
            keys_q = keys_q.where(KernelConfig.kernel == kernel)
        keys = s.execute(keys_q.distinct().order_by(KernelConfig.arch, KernelConfig.kernel, KernelConfig.key_slug)).all()
        shown = [k.key_slug for k in keys[:limit]]
        rows = list(s.scalars(select(KernelConfig).where(KernelConfig.active.is_(True), KernelConfig.key_slug.in_(shown))))
        return {"newest": newest, "all_archs": all_archs, "all_kernels": all_kernels, "rows": rows,
                "order": shown, "keys_total": len(keys)}

    raw = db.run(tx, write=False)
    by_slug: dict[str, list[KernelConfig]] = {}
    for c in raw["rows"]:
        by_slug.setdefault(c.key_slug, []).append(c)

    archs: dict[str, list[dict[str, Any]]] = {}
    speedups: dict[str, dict[str, dict[str, Any]]] = {}  # kernel -> bucket -> {bucket_json, values}
    for slug in raw["order"]:
        cs = sorted(by_slug.get(slug, []), key=lambda c: _bucket_order(c.bucket_json))
        if not cs:
            continue
        first = cs[0]
        bucket_rows = [_config_row(c, raw["newest"]) for c in cs]
        archs.setdefault(first.arch, []).append({
            "slug": slug, "kernel": first.kernel, "arch": first.arch, "key": first.key_json, "rows": bucket_rows,
            "geomean_speedup": _geomean([r["speedup"] for r in bucket_rows if r["speedup"]]),
        })
        for r in bucket_rows:
            entry = speedups.setdefault(first.kernel, {}).setdefault(r["bucket"], {"bucket_json": r["bucket_json"], "values": []})
            if r["speedup"]:
                entry["values"].append(r["speedup"])

    charts = []
    for k in sorted(speedups):
        buckets = sorted(speedups[k].items(), key=lambda kv: _bucket_order(kv[1]["bucket_json"]))
        charts.append({
            "kernel": k,
            "labels": [name for name, _ in buckets],
            "values": [_geomean(e["values"]) for _, e in buckets],
            "counts": [len(e["values"]) for _, e in buckets],
        })
    n_keys = sum(len(v) for v in archs.values())
    return {
        "archs": [{"arch": a, "bandwidth": copy_bandwidth(a), "newest_triton": raw["newest"].get(a), "tables": archs[a]}
                  for a in sorted(archs)],
        "speedup_charts": charts,
        "all_archs": raw["all_archs"],
        "all_kernels": raw["all_kernels"],
        "keys_shown": n_keys,
        "keys_total": raw["keys_total"],
        "configs_shown": sum(len(k["rows"]) for v in archs.values() for k in v),
    }


def tune_body(key_json: dict[str, Any]) -> dict[str, Any]:
    """The `POST /v1/tune` body that tunes a stored key (the miss list's button sends it)."""
    body: dict[str, Any] = {"kernel": key_json.get("kernel"), "arch": key_json.get("arch")}
    for name, seed in _SEED_SHAPE.items():
        v = key_json.get(name)
        body[name] = v if isinstance(v, int) and v >= (0 if name == "window" else 1) else seed
    if key_json.get("formats"):
        body["formats"] = list(key_json["formats"])
    return body


def misses(db: Database, *, arch: str | None = None, kernel: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Keys engines asked for with no tuned config, most asked first."""

    def tx(s: Session) -> list[dict[str, Any]]:
        q = select(LookupMiss).order_by(LookupMiss.count.desc(), LookupMiss.key_slug).limit(limit)
        if arch:
            q = q.where(LookupMiss.arch == arch)
        if kernel:
            q = q.where(LookupMiss.kernel == kernel)
        return [{"slug": m.key_slug, "kernel": m.kernel, "arch": m.arch, "count": m.count,
                 "first_seen": _iso(m.first_seen), "last_seen": _iso(m.last_seen), "tune": tune_body(m.key_json)}
                for m in s.scalars(q)]

    return db.run(tx, write=False)


def _job_row(j: Job) -> dict[str, Any]:
    p = j.progress or {}
    return {"id": j.id, "status": j.status, "kernel": j.kernel, "arch": j.arch, "slug": j.key_slug,
            "trials": j.trials, "attempt": j.attempt, "trials_done": p.get("trials_done", 0),
            "trials_total": p.get("trials_total"), "created_at": _iso(j.created_at), "finished_at": _iso(j.finished_at),
            "error": j.error, "key": j.key_json}


def recent_jobs(db: Database, *, arch: str | None = None, kernel: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    def tx(s: Session) -> list[dict[str, Any]]:
        q = select(Job).order_by(Job.id.desc()).limit(limit)
        if arch:
            q = q.where(Job.arch == arch)
        if kernel:
            q = q.where(Job.kernel == kernel)
        return [_job_row(j) for j in s.scalars(q)]

    return db.run(tx, write=False)


def latest_job_with_trials(db: Database) -> int | None:
    """The study the main page shows by default: the newest job that recorded any trial."""
    return db.run(lambda s: s.scalar(select(func.max(TrialResult.job_id))), write=False)


def _progress_series(s: Session, job: Job) -> list[dict[str, Any]]:
    """Per bucket, the best verified time so far against the trials measured (x = how many of the
    bucket's trials had ended by then: Optuna's trial numbers also count the pruned duplicates a
    sampler drew, which were never run), for the job's current attempt (an earlier attempt's trials
    were superseded). Only the trials that improved the best are points, plus the last trial, so a
    long study stays a small payload and the line still spans the whole study."""
    trials = s.execute(
        select(TrialResult.bucket, TrialResult.bucket_json, TrialResult.number, TrialResult.status, TrialResult.time_us)
        .where(TrialResult.job_id == job.id, TrialResult.attempt == job.attempt)
        .order_by(TrialResult.bucket, TrialResult.number, TrialResult.id)
    ).all()
    series: dict[str, dict[str, Any]] = {}
    for t in trials:
        e = series.setdefault(t.bucket, {"bucket": t.bucket, "bucket_json": t.bucket_json, "best": [], "trials": 0,
                                         "failed": 0, "best_us": None, "best_number": None, "last_number": None})
        e["trials"] += 1
        e["last_number"] = e["trials"]
        if t.status != "ok" or t.time_us is None:
            e["failed"] += 1
        elif e["best_us"] is None or t.time_us < e["best_us"]:
            e["best_us"], e["best_number"] = t.time_us, t.number
            e["best"].append([e["trials"], t.time_us])
    for e in series.values():
        if e["best"] and e["best"][-1][0] != e["last_number"]:
            e["best"].append([e["last_number"], e["best_us"]])
    return sorted(series.values(), key=lambda e: _bucket_order(e["bucket_json"] or {}))


def study_progress(db: Database, job_id: int) -> dict[str, Any]:
    """A job's status and study progress (what the job page polls to redraw its chart)."""

    def tx(s: Session) -> dict[str, Any]:
        job = s.get(Job, job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        return {"job": _job_row(job), "series": _progress_series(s, job)}

    return db.run(tx, write=False)


def job_detail(db: Database, job_id: int) -> dict[str, Any]:
    """The job page: the job, its trials by status (current attempt), its study progress and the
    configs it published."""

    def tx(s: Session) -> dict[str, Any]:
        job = s.get(Job, job_id)
        if job is None:
            raise NotFound(f"no job {job_id}")
        counts = dict(s.execute(
            select(TrialResult.status, func.count())
            .where(TrialResult.job_id == job_id, TrialResult.attempt == job.attempt)
            .group_by(TrialResult.status)
        ).all())
        versions: dict[str, set[str]] = {}
        for v in s.scalars(select(KernelConfig.triton_version).where(KernelConfig.arch == job.arch).distinct()):
            versions.setdefault(job.arch, set()).add(v)
        newest = newest_versions(versions)
        published = sorted(s.scalars(select(KernelConfig).where(KernelConfig.job_id == job_id)),
                           key=lambda c: _bucket_order(c.bucket_json))
        return {
            "job": _job_row(job),
            "key": job.key_json,
            "buckets": job.buckets,
            "search": job.search,
            "lease_owner": job.lease_owner,
            "started_at": _iso(job.started_at),
            "trials_by_status": {str(k): int(v) for k, v in sorted(counts.items())},
            "series": _progress_series(s, job),
            "published": [dict(_config_row(c, newest), active=c.active) for c in published],
        }

    return db.run(tx, write=False)


def summary_counts(db: Database) -> dict[str, int]:
    def tx(s: Session) -> dict[str, int]:
        active = KernelConfig.active.is_(True)
        return {
            "archs": int(s.scalar(select(func.count(distinct(KernelConfig.arch))).where(active)) or 0),
            "tuned_keys": int(s.scalar(select(func.count(distinct(KernelConfig.key_slug))).where(active)) or 0),
            "configs": int(s.scalar(select(func.count()).select_from(KernelConfig).where(active)) or 0),
            "miss_keys": int(s.scalar(select(func.count()).select_from(LookupMiss)) or 0),
            "jobs": int(s.scalar(select(func.count()).select_from(Job)) or 0),
        }

    return db.run(tx, write=False)
