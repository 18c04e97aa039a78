"""Recorded timing tables and the simulated runner: `SimulatedRunner` has `BenchRunner`'s interface
and replays a recorded table (Kernel Tuner's simulation mode), so search tests run deterministically
on a CPU. `benchmarks/record_table.py` records real tables; `synthetic_table` makes labelled fake ones.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from catalog.core import Bucket, Config, ProblemKey, TrialStatus
from tuner.bench.protocol import Candidate, Measurement

if TYPE_CHECKING:
    from catalog.space import Space

TABLE_FORMAT = "kvtune-timing-table/1"


def new_table(key: ProblemKey, family: str, target: str, info: Mapping[str, str], *, synthetic: bool = False,
              space: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An empty table: metadata (where and with what it was measured) and no entries yet.

    Entries live under `buckets[<Bucket.name()>]["entries"][<Config.to_json()>]` as
    `{"status": "ok", "time_us": 12.3}` or `{"status": "<failure>", "error": "..."}`."""
    return {
        "format": TABLE_FORMAT,
        "meta": {
            "family": family, "key": key.to_json(), "target": target,
            "device_name": info.get("device_name", ""), "torch": info.get("torch", ""),
            "triton": info.get("triton", ""), "timing": info.get("timing", ""),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "synthetic": synthetic, "space": space or [], "complete": False,
        },
        "buckets": {},
    }


def table_put(table: dict[str, Any], bucket: Bucket, config: Config, m: Measurement) -> None:
    b = table["buckets"].setdefault(bucket.name(), {"bucket": bucket.to_json(), "entries": {}})
    e: dict[str, Any] = {"status": m.status.value}
    if m.status is TrialStatus.OK:
        e["time_us"] = m.time_us
    else:
        e["error"] = (m.error or "")[:300]
    if m.compile_stats:
        e["stats"] = m.compile_stats
    b["entries"][config.to_json()] = e


def save_table(table: Mapping[str, Any], path: str | Path) -> None:
    from templates.render import write_atomic

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, json.dumps(table, indent=1, sort_keys=False) + "\n")


def load_table(path: str | Path) -> dict[str, Any]:
    t = json.loads(Path(path).read_text())
    if t.get("format") != TABLE_FORMAT:
        raise ValueError(f"{path}: not a {TABLE_FORMAT} table")
    return t


def synthetic_table(family: str, key: ProblemKey, buckets: list[Bucket], *, seed: int = 0,
                    fail_rate: float = 0.05) -> dict[str, Any]:
    """A SYNTHETIC timing table (labelled so in its metadata) over every feasible config of the
    family's space that is legal on `key.arch`: for tests and for trying the efficiency benchmark
    before real tables exist. Times follow a made-up multiplicative model (a factor per parameter
    value, one pairwise interaction, a bucket-dependent part and 3% per-config noise), so searches
    have structure to find; about `fail_rate` of configs fail (compile errors, a few wrong results)."""
    import random

    from tuner.kernels import get_family

    fam = get_family(family)
    space = fam.space(key)
    rng = random.Random(seed)
    factor = {(p.name, repr(v)): rng.lognormvariate(0, 0.35) for p in space.params for v in p.choices}
    pairs = [(a.name, b.name) for a, b in zip(space.params, space.params[1:])]
    table = new_table(key, family, key.arch, {"device_name": "synthetic", "timing": "synthetic"}, synthetic=True,
                      space=space.to_json())
    configs = [c for c in space.grid() if fam.config_legality(c, key.arch) is None]
    for b in buckets:
        brng = random.Random(f"{seed}/{b.name()}")
        bfac = {k: v * brng.lognormvariate(0, 0.15) for k, v in factor.items()}
        for c in configs:
            d = c.as_dict()
            t = 10.0 * math.log2(2 + b.rep)
            for k, v in d.items():
                t *= bfac[(k, repr(v))]
            for a, bn in pairs:  # neighbouring parameters interact (a tile size and its warps)
                t *= random.Random(f"{seed}/{a}={d[a]!r}/{bn}={d[bn]!r}").lognormvariate(0, 0.25)
            crng = random.Random(f"{seed}/{b.name()}/{c.to_json()}")
            t *= crng.lognormvariate(0, 0.03)
            r = crng.random()
            if c != fam.default_config(key) and r < fail_rate:
                st = TrialStatus.WRONG_RESULT if r < fail_rate / 4 else TrialStatus.COMPILE_ERROR
                table_put(table, b, c, Measurement(st, error="synthetic failure"))
            else:
                table_put(table, b, c, Measurement(TrialStatus.OK, time_us=round(t, 4)))
    table["meta"]["complete"] = True
    return table


def table_space(table: Mapping[str, Any]) -> "Space":
    """The search space a table was recorded over: the parameters and choices of its metadata,
    feasible exactly where the table has an entry (the recorder measured every feasible, legal
    config of that grid). Searching it in simulation prunes what the real space would prune,
    without the family's current code, which may have grown parameters since."""
    from catalog.space import Param, Space

    params = tuple(Param(p["name"], tuple(p["choices"]), p["default"], bool(p.get("render")))
                   for p in table["meta"]["space"])
    if not params:
        raise ValueError("the table's metadata records no space")
    recorded = {k for b in table["buckets"].values() for k in b["entries"]}

    def _recorded(c: Config) -> str | None:
        return None if c.to_json() in recorded else "not in the recorded grid"

    return Space(params=params, constraints=(_recorded,))


class SimulatedRunner:
    """Replays a recorded timing table instead of running anything: same interface as
    `BenchRunner`, deterministic, instant, no GPU. A config missing from the table raises
    `LookupError` (a table that does not match the space is a bug to see), unless `missing` names
    the status to report for it (for tables recorded under a time limit)."""

    def __init__(self, table: Mapping[str, Any] | str | Path, *, missing: TrialStatus | None = None) -> None:
        self.table = load_table(table) if isinstance(table, (str, Path)) else dict(table)
        self.meta = self.table["meta"]
        self.missing = missing
        self.calls = 0

    @property
    def target(self) -> str:
        return str(self.meta["target"])

    @property
    def key(self) -> ProblemKey:
        return ProblemKey.from_json(self.meta["key"])

    def buckets(self) -> list[Bucket]:
        return [Bucket.from_json(b["bucket"]) for b in self.table["buckets"].values()]

    def info(self) -> dict[str, str]:
        dev = self.meta.get("device_name", "")
        return {"device_name": f"{dev} (simulated{', synthetic' if self.meta.get('synthetic') else ''})",
                "torch": str(self.meta.get("torch", "")), "triton": str(self.meta.get("triton", "")),
                "timing": f"simulated:{self.meta.get('timing', '')}"}

    def evaluate(self, candidate: Candidate) -> Measurement:
        self.calls += 1
        if candidate.key != self.key:
            raise ValueError(f"table was recorded for {self.key.slug()}, asked about {candidate.key.slug()}")
        b = self.table["buckets"].get(candidate.bucket.name())
        e = None if b is None else b["entries"].get(candidate.config.to_json())
        timing = f"simulated:{self.meta.get('timing', '')}"
        if e is None:
            if self.missing is None:
                raise LookupError(f"{candidate.bucket.name()} {candidate.config.to_json()} is not in the table")
            return Measurement(self.missing, error="not in the recorded table", timing=timing)
        st = TrialStatus(e["status"])
        return Measurement(st, time_us=float(e["time_us"]) if st is TrialStatus.OK else None, error=e.get("error"),
                           compile_stats=dict(e.get("stats") or {}), timing=timing)

    def close(self) -> None:
        pass
