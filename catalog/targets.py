"""Compilation targets: the four GPU architectures kvtune builds for, plus Triton's interpreter.

Torch- and triton-free: the API validates arch names here. The tuner turns a target into Triton's
`GPUTarget` (`tuner.targets.gpu_target`), so any variant can be cross-compiled for any architecture
on a machine without a GPU, and names the local one (`tuner.targets.detect()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Backend = Literal["cuda", "hip", "interp"]


@dataclass(frozen=True)
class Target:
    name: str
    backend: Backend
    arch: int | str | None  # compute capability for cuda, gfx name for hip
    warp_size: int

    @property
    def is_gpu(self) -> bool:
        return self.backend != "interp"


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("sm_90", "cuda", 90, 32),
        Target("sm_100", "cuda", 100, 32),
        Target("gfx942", "hip", "gfx942", 64),
        Target("gfx950", "hip", "gfx950", 64),
        Target("interp", "interp", None, 1),
    )
}
GPU_TARGETS: tuple[str, ...] = ("sm_90", "sm_100", "gfx942", "gfx950")


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {sorted(TARGETS)}") from None
