"""The core types of kvtune, defined once and used by the tuner, the database and the API.

Every key that crosses a boundary (a database row, a URL, a cache file name) is serialised with an
explicit `to_json`/`from_json` pair, never with `repr`, so renaming a field is a visible change.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Mapping


class TrialStatus(str, enum.Enum):
    """How one candidate ended. Failures are data: they end a trial, never a study or a worker."""

    OK = "ok"
    WRONG_RESULT = "wrong_result"
    COMPILE_ERROR = "compile_error"
    ILLEGAL_ON_ARCH = "illegal_on_arch"
    OUT_OF_RESOURCES = "out_of_resources"
    TIMEOUT = "timeout"
    CRASHED = "crashed"


@dataclass(frozen=True)
class ProblemKey:
    """What a tuned config is stored and served under."""

    kernel: str
    arch: str
    heads: int
    topk: int
    window: int
    formats: tuple[str, ...] = ()
    head_dim: int = 512

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "arch": self.arch,
            "heads": self.heads,
            "topk": self.topk,
            "window": self.window,
            "formats": list(self.formats),
            "head_dim": self.head_dim,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProblemKey:
        return cls(
            kernel=str(d["kernel"]),
            arch=str(d["arch"]),
            heads=int(d["heads"]),
            topk=int(d["topk"]),
            window=int(d["window"]),
            formats=tuple(str(f) for f in d.get("formats", ())),
            head_dim=int(d.get("head_dim", 512)),
        )

    def slug(self) -> str:
        """A stable, file-name-safe identifier (used for study names and cache paths)."""
        fmts = "+".join(self.formats) or "-"
        return f"{self.kernel}.{self.arch}.h{self.heads}.k{self.topk}.w{self.window}.d{self.head_dim}.{fmts}"


@dataclass(frozen=True)
class Bucket:
    """The closed range of a batch dimension a config covers: `lo <= n <= hi`.

    `dim` names the dimension (decode tokens `T`, pack tokens `N`, logits `T`); `ctx` is the context
    length the bucket was measured at where the kernel has one (logits), 0 otherwise.
    """

    dim: str
    lo: int
    hi: int
    ctx: int = 0

    def __post_init__(self) -> None:
        if not (1 <= self.lo <= self.hi):
            raise ValueError(f"bucket range must satisfy 1 <= lo <= hi, got {self.lo}..{self.hi}")

    def covers(self, n: int) -> bool:
        return self.lo <= n <= self.hi

    @property
    def rep(self) -> int:
        """The size a bucket is timed at: its upper end, the worst case it must serve."""
        return self.hi

    def name(self) -> str:
        base = f"{self.dim}{self.lo}-{self.hi}"
        return f"{base}@{self.ctx}" if self.ctx else base

    def to_json(self) -> dict[str, Any]:
        return {"dim": self.dim, "lo": self.lo, "hi": self.hi, "ctx": self.ctx}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Bucket:
        return cls(dim=str(d["dim"]), lo=int(d["lo"]), hi=int(d["hi"]), ctx=int(d.get("ctx", 0)))


@dataclass(frozen=True)
class Config:
    """One point of a kernel's search space: variant choices, tile params, num_warps/num_stages.

    `params` is kept as a sorted tuple of pairs so the config is hashable and its JSON is canonical.
    """

    params: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, **params: Any) -> Config:
        return cls(tuple(sorted(params.items())))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Config:
        return cls(tuple(sorted(d.items())))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.as_dict().get(name, default)

    def replace(self, **changes: Any) -> Config:
        d = self.as_dict()
        d.update(changes)
        return Config.from_dict(d)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
