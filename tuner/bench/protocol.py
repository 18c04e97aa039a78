"""What the benchmark parent and its child both speak: the candidate to measure, how it ended, how it
is timed, and the runner interface the search drives (`runner.BenchRunner` on a device,
`simulation.SimulatedRunner` on a recorded table). Torch-free: the child imports torch, not this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from catalog.core import Bucket, Config, ProblemKey, TrialStatus

ERROR_LIMIT = 2000  # characters of error text kept per trial


@dataclass(frozen=True)
class Candidate:
    """One thing to measure: a config of a family for one key at one bucket's size."""

    family: str  # a registered name or a dotted path ("tests.tuner.fault_family:FAMILY")
    key: ProblemKey
    bucket: Bucket
    config: Config
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "key": self.key.to_json(), "bucket": self.bucket.to_json(),
                "config": self.config.as_dict(), "seed": self.seed}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Candidate:
        return cls(family=str(d["family"]), key=ProblemKey.from_json(d["key"]), bucket=Bucket.from_json(d["bucket"]),
                   config=Config.from_dict(d["config"]), seed=int(d.get("seed", 0)))


@dataclass(frozen=True)
class Measurement:
    """How one candidate ended. `time_us` (per launch, median) only when `status` is ok."""

    status: TrialStatus
    time_us: float | None = None
    error: str | None = None
    source_hash: str = ""
    compile_stats: dict[str, Any] = field(default_factory=dict)
    timing: str = ""
    seconds: float = 0.0  # wall time spent on the candidate, all phases

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "time_us": self.time_us, "error": self.error,
                "source_hash": self.source_hash, "compile_stats": self.compile_stats, "timing": self.timing,
                "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Measurement:
        return cls(status=TrialStatus(d["status"]), time_us=d.get("time_us"), error=d.get("error"),
                   source_hash=d.get("source_hash", ""), compile_stats=dict(d.get("compile_stats") or {}),
                   timing=d.get("timing", ""), seconds=float(d.get("seconds", 0.0)))


class Runner(Protocol):
    """What the search needs from something that measures candidates."""

    @property
    def target(self) -> str: ...

    def info(self) -> dict[str, str]:
        """device_name, torch, triton, timing: the provenance stored with results."""
        ...

    def evaluate(self, candidate: Candidate) -> Measurement: ...

    def close(self) -> None: ...


TIMING_SEED0 = 1_000_003  # seeds of the timing input sets: TIMING_SEED0 + i (verification uses the trial's)


@dataclass(frozen=True)
class TimingOptions:
    """How a GPU candidate is timed (sent to the child with every request)."""

    l2_factor: float = 3.0  # rotate input sets touching at least this many times the L2 size
    max_sets: int = 256
    max_sets_bytes: int = 4 << 30  # never hold more than this in timing inputs (nor 25% of free memory)
    graph_ms: float = 2.0  # one graph replay lasts at least this long (replay launch cost amortised)
    rep_ms: float = 100.0  # total timed replays per candidate, roughly
    min_reps: int = 10
    max_reps: int = 200
    interp_budget_s: float = 0.5  # the interpreter: time each candidate for about this long
    interp_sets: int = 2

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class BenchUnavailable(RuntimeError):
    """The benchmark child cannot be started at all (not a candidate's fault)."""


def clip_error(text: str) -> str:
    """At most ERROR_LIMIT characters of error text: its head and its tail."""
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT // 2] + "\n...\n" + text[-ERROR_LIMIT // 2:]
