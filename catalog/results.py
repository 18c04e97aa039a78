"""What a tuning run produces: trials, per-bucket outcomes, the whole result. Shared by the tuner
(`tuner.search`), the CLI, the worker and the database, so it is defined once here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from catalog.core import Bucket, Config, ProblemKey, TrialStatus


@dataclass(frozen=True)
class TrialRecord:
    """One candidate's outcome. `time_us` is set only for `ok` trials (median of many replays);
    `timing` says what clock it came from ("cuda-graph", "hip-graph", "cpu-interpreter")."""

    number: int
    bucket: Bucket
    config: Config
    status: TrialStatus
    time_us: float | None = None
    error: str | None = None
    source_hash: str = ""
    compile_stats: dict[str, Any] = field(default_factory=dict)
    timing: str = ""

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK and self.time_us is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "bucket": self.bucket.to_json(),
            "config": self.config.as_dict(),
            "status": self.status.value,
            "time_us": self.time_us,
            "error": self.error,
            "source_hash": self.source_hash,
            "compile_stats": self.compile_stats,
            "timing": self.timing,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrialRecord:
        return cls(
            number=int(d["number"]),
            bucket=Bucket.from_json(d["bucket"]),
            config=Config.from_dict(d["config"]),
            status=TrialStatus(d["status"]),
            time_us=d.get("time_us"),
            error=d.get("error"),
            source_hash=d.get("source_hash", ""),
            compile_stats=dict(d.get("compile_stats") or {}),
            timing=d.get("timing", ""),
        )


@dataclass(frozen=True)
class BucketResult:
    """A study's outcome for one bucket. `best` is always a verified (`ok`) trial or None: a config
    that failed verification can never be a winner. `default` is trial 0, measured in the same run."""

    bucket: Bucket
    default: TrialRecord
    best: TrialRecord | None
    trials: tuple[TrialRecord, ...]
    pruned: int = 0  # samples dropped before compile: infeasible in the space or illegal on the target

    def __post_init__(self) -> None:
        # The invariant the whole service relies on, checked where it is built and where it is read.
        if self.best is not None and not self.best.ok:
            raise ValueError(f"trial {self.best.number} ({self.best.status.value}) cannot be a bucket's best")

    @property
    def speedup(self) -> float | None:
        if self.best is None or not self.default.ok:
            return None
        assert self.best.time_us and self.default.time_us
        return self.default.time_us / self.best.time_us

    def failed_by_status(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.trials:
            if not t.ok:
                out[t.status.value] = out.get(t.status.value, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket.to_json(),
            "default": self.default.to_json(),
            "best": self.best.to_json() if self.best is not None else None,
            "trials": [t.to_json() for t in self.trials],
            "pruned": self.pruned,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BucketResult:
        return cls(
            bucket=Bucket.from_json(d["bucket"]),
            default=TrialRecord.from_json(d["default"]),
            best=TrialRecord.from_json(d["best"]) if d.get("best") else None,
            trials=tuple(TrialRecord.from_json(t) for t in d.get("trials", ())),
            pruned=int(d.get("pruned", 0)),
        )


@dataclass(frozen=True)
class TuneResult:
    key: ProblemKey
    target: str
    buckets: tuple[BucketResult, ...]
    device_name: str = ""
    triton_version: str = ""
    torch_version: str = ""
    search: str = ""  # "tpe" | "random" | "grid"
    seed: int = 0
    timing: str = ""  # the clock every time_us came from ("cuda-graph", "cpu-interpreter", "simulated:...")

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key.to_json(),
            "target": self.target,
            "device_name": self.device_name,
            "triton_version": self.triton_version,
            "torch_version": self.torch_version,
            "search": self.search,
            "seed": self.seed,
            "timing": self.timing,
            "buckets": [b.to_json() for b in self.buckets],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TuneResult:
        return cls(
            key=ProblemKey.from_json(d["key"]),
            target=str(d["target"]),
            buckets=tuple(BucketResult.from_json(b) for b in d.get("buckets", ())),
            device_name=d.get("device_name", ""),
            triton_version=d.get("triton_version", ""),
            torch_version=d.get("torch_version", ""),
            search=d.get("search", ""),
            seed=int(d.get("seed", 0)),
            timing=d.get("timing", ""),
        )


def format_tune_table(result: TuneResult) -> str:
    """The per-bucket summary `kvtune tune` prints: default vs tuned time, speedup, trials run and
    failed by status, and the winning config."""
    rows = [("bucket", "default us", "tuned us", "speedup", "trials", "failed", "pruned", "best config")]
    for b in result.buckets:
        fails = b.failed_by_status()
        rows.append((
            b.bucket.name(),
            f"{b.default.time_us:.2f}" if b.default.ok else b.default.status.value,
            f"{b.best.time_us:.2f}" if b.best is not None and b.best.time_us is not None else "-",
            f"{b.speedup:.2f}x" if b.speedup is not None else "-",
            str(len(b.trials)),
            ", ".join(f"{k} {v}" for k, v in sorted(fails.items())) or "0",
            str(b.pruned),
            b.best.config.to_json() if b.best is not None else "-",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
