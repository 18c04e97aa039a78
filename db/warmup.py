"""Warmup keys stored with the configs they belong to.

A worker enumerates the keys of each winner on its own GPU at publish time (tuner.warmup.keys_for:
launchers size some launches from the device, so keys belong to a device model), and they are
written in the same transaction as the config. Bundles serve them per bucket and merged; a default
(untuned) entry has none stored, and the bundle says so instead of guessing.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterable, Mapping

from sqlalchemy import ForeignKey, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from db.clock import utcnow
from db.models import Base


class ConfigWarmupKeys(Base):
    __tablename__ = "config_warmup_keys"

    config_id: Mapped[int] = mapped_column(ForeignKey("configs.id", ondelete="CASCADE"), primary_key=True)
    target: Mapped[str] = mapped_column(String(32))
    triton_version: Mapped[str] = mapped_column(String(64))
    keys: Mapped[list[Any]]  # tuner.warmup.WarmupKey.to_json() of every binary of this config
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


def store(s: Session, config_id: int, keys: list[dict[str, Any]], target: str, triton_version: str) -> None:
    s.add(ConfigWarmupKeys(config_id=config_id, target=target, triton_version=triton_version, keys=keys))


def load(s: Session, config_ids: Iterable[int]) -> dict[int, ConfigWarmupKeys]:
    ids = list(config_ids)
    if not ids:
        return {}
    rows = s.scalars(select(ConfigWarmupKeys).where(ConfigWarmupKeys.config_id.in_(ids)))
    return {r.config_id: r for r in rows}


def merge(bundle_kernels: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The bundle's keys in one list (each binary once), the Triton versions they were made for,
    the sources they need, and the buckets that have no stored keys (an engine enumerates those
    itself with tuner.warmup.keys_for on its own device, or accepts compiling them at first use)."""
    seen: dict[str, dict[str, Any]] = {}
    versions: set[str] = set()
    missing: list[str] = []
    for name, k in bundle_kernels.items():
        for e in k["buckets"]:
            wk = e.get("warmup")
            if not wk:
                missing.append(f"{name}/{e['name']}")
                continue
            versions.add(wk["triton_version"])
            for key in wk["keys"]:
                seen.setdefault(json.dumps(key, sort_keys=True), key)
    keys = list(seen.values())
    return {
        "keys": keys,
        "triton_versions": sorted(versions),
        "sources": sorted({k["source_hash"] for k in keys}),
        "missing": missing,
    }
