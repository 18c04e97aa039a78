"""A bundle as the runtime reads it: per kernel and key a table of buckets, each with the config to
launch, and the checks of a bundle against the process that is about to serve with it.

Torch-free: a table is built from the JSON `GET /v1/configs` serves (or `export.read_export`
rebuilds), and `lookup` is a bisection over the buckets' lower ends, so a call's dispatch costs
a few hundred nanoseconds of host time and touches no device.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from catalog.core import Bucket, Config, ProblemKey
from catalog.families import family_names, get_spec
from catalog.keys import make_key

from tuner.runtime.export import FormatsArg, formats_for


@dataclass(frozen=True)
class Entry:
    """One bucket of a kernel's table: what a call of that size launches."""

    bucket: Bucket
    config: Config
    source_hash: str
    default: bool  # the family's default config (nothing tuned for this bucket)
    provenance: Mapping[str, Any] | None = None  # where the timing came from (device, versions, job)
    warmup: Mapping[str, Any] | None = None  # {"target", "triton_version", "keys": [WarmupKey JSON]}
    speedup: float | None = None

    @property
    def keys(self) -> list[dict[str, Any]]:
        return list((self.warmup or {}).get("keys", ()))


@dataclass
class KernelTable:
    """One kernel's buckets for one ProblemKey, sorted, with the lookup calls use."""

    name: str
    key: ProblemKey
    entries: tuple[Entry, ...]
    default_config: Config
    tuned: bool = False
    _by_dim: dict[str, tuple[list[int], list[Entry]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for dim in sorted({e.bucket.dim for e in self.entries}):
            es = sorted((e for e in self.entries if e.bucket.dim == dim), key=lambda e: (e.bucket.lo, e.bucket.ctx))
            self._by_dim[dim] = ([e.bucket.lo for e in es], es)

    def lookup(self, dim: str, n: int, ctx: int = 0) -> Entry | None:
        """The entry whose bucket covers size n along `dim`, or None. Where buckets of several
        contexts cover n (logits), the smallest context >= `ctx`, else the largest."""
        got = self._by_dim.get(dim)
        if got is None:
            return None
        los, es = got
        i = bisect_right(los, n) - 1
        if i < 0:
            return None
        e = es[i]
        if n > e.bucket.hi:
            return None
        if i == 0 or los[i - 1] != e.bucket.lo:
            return e  # the common case: one bucket per range
        same = [x for x in es if x.bucket.lo == e.bucket.lo and x.bucket.covers(n)]
        above = [x for x in same if x.bucket.ctx >= ctx]
        return min(above, key=lambda x: x.bucket.ctx) if above else max(same, key=lambda x: x.bucket.ctx)

    def shape_matches(self, heads: int, topk: int, window: int) -> bool:
        k = self.key
        return (k.heads, k.topk, k.window) == (heads, topk, window)


def _entry(d: Mapping[str, Any]) -> Entry:
    return Entry(bucket=Bucket.from_json(d["bucket"]), config=Config.from_dict(d["config"]),
                 source_hash=str(d["source_hash"]), default=bool(d.get("default")), provenance=d.get("provenance"),
                 warmup=d.get("warmup"), speedup=d.get("speedup"))


def tables_from_bundle(bundle: Mapping[str, Any]) -> dict[tuple[str, tuple[str, ...]], KernelTable]:
    """(kernel, formats) -> table for every kernel of a bundle."""
    out: dict[tuple[str, tuple[str, ...]], KernelTable] = {}
    for name, k in (bundle.get("kernels") or {}).items():
        key = ProblemKey.from_json(k["key"])
        spec = get_spec(name)
        out[(name, key.formats)] = KernelTable(name=name, key=key, entries=tuple(_entry(e) for e in k["buckets"]),
                                               default_config=spec.default_config(key), tuned=bool(k.get("tuned")))
    return out


def defaults_bundle(arch: str, heads: int, topk: int, window: int, formats: FormatsArg = None,
                    kernels: Sequence[str] | None = None) -> dict[str, Any]:
    """A bundle of every family's default config on its default buckets, built here (no server):
    the shape of `GET /v1/configs` for a key nothing was tuned for, without warmup keys (the
    runtime enumerates them on its own device)."""
    out: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    for name in kernels or family_names():
        spec = get_spec(name)
        try:
            key = make_key(name, arch, heads, topk, window, formats_for(name, formats))
            cfg = spec.default_config(key)
        except ValueError as e:
            unavailable[name] = str(e)
            continue
        h = spec.render(key, cfg).source_hash
        entries = [{"bucket": b.to_json(), "name": b.name(), "default": True, "config": cfg.as_dict(),
                    "source_hash": h, "time_us": None, "default_config": cfg.as_dict(), "default_time_us": None,
                    "speedup": None, "provenance": None, "warmup": None} for b in spec.buckets(key)]
        out[name] = {"key": key.to_json(), "key_slug": key.slug(), "tuned": False, "buckets": entries}
    return {"arch": arch, "heads": heads, "topk": topk, "window": window, "formats": None, "kernels": out,
            "misses": [], "unavailable": unavailable, "source": "defaults"}


@dataclass(frozen=True)
class Process:
    """What a bundle is checked against: this process's target, GPU and Triton."""

    arch: str
    device_name: str
    triton: str


def check(tables: Mapping[tuple[str, tuple[str, ...]], KernelTable], arch: str, process: Process,
          local_hashes: Mapping[tuple[str, tuple[str, ...], Config], tuple[str, ...]]) -> list[str]:
    """What differs between a bundle and this process, one line per difference: the arch it was
    asked for, and per tuned bucket the GPU and Triton version its config was measured with, the
    Triton version of its warmup keys, and whether this kvtune renders the source it names
    (`local_hashes`: (kernel, formats, config) -> the hashes this process renders for it)."""
    out: list[str] = []
    if arch != process.arch:
        out.append(f"bundle for arch {arch}, this process runs {process.arch}")
    for (name, fm), t in sorted(tables.items()):
        for e in t.entries:
            where = f"{name} {'+'.join(fm)} {e.bucket.name()}"
            p = e.provenance or {}
            dev, trit = p.get("device_name"), p.get("triton_version")
            if not e.default and dev and dev != process.device_name:
                out.append(f"{where}: measured on {dev}, this GPU is {process.device_name}")
            if not e.default and trit and trit != process.triton:
                out.append(f"{where}: measured with Triton {trit}, this process has {process.triton}")
            wk = e.warmup or {}
            if wk.get("triton_version") and wk["triton_version"] != process.triton and wk["triton_version"] != trit:
                out.append(f"{where}: warmup keys made for Triton {wk['triton_version']}, this process has {process.triton}")
            local = local_hashes.get((name, fm, e.config), ())
            if local and e.source_hash not in local:
                out.append(f"{where}: its source {e.source_hash} is not what this kvtune generates for its config "
                           f"({local[0]}): the local module runs")
    return out
