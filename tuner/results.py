"""What a tuning run produces: trials, per-bucket outcomes, the whole result. Shared by the tuner
(`tuner.search`), the CLI, the worker and the database, so it is defined once here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.core import Bucket, Config, ProblemKey, TrialStatus


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


@dataclass(frozen=True)
class TuneResult:
    key: ProblemKey
    target: str
    buckets: tuple[BucketResult, ...]
    device_name: str = ""
    triton_version: str = ""
    torch_version: str = ""
