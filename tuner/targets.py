"""Compilation targets: the four GPU architectures kvtune builds for, plus Triton's interpreter.

A `Target` knows its Triton `GPUTarget`, so any variant can be cross-compiled for any architecture
on a machine without a GPU; `detect()` names the local one (ROCm's `gcnArchName` included).
"""

from __future__ import annotations

import os
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

    def gpu_target(self):  # -> triton.backends.compiler.GPUTarget
        if not self.is_gpu:
            raise ValueError("the interpreter has no GPUTarget: it runs Triton's Python semantics on the CPU")
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


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


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def detect(device_index: int = 0) -> Target:
    """The target of the local device: the GPU torch sees, else the interpreter.

    Under `TRITON_INTERPRET=1` the answer is `interp` even on a GPU machine, since that is what
    Triton will actually run.
    """
    if interpreting():
        return TARGETS["interp"]
    import torch

    if not torch.cuda.is_available():
        return TARGETS["interp"]
    props = torch.cuda.get_device_properties(device_index)
    if getattr(torch.version, "hip", None):
        gcn = str(getattr(props, "gcnArchName", "")).split(":")[0]  # 'gfx950:sramecc+:xnack-'
        if gcn in TARGETS:
            return TARGETS[gcn]
        return Target(gcn, "hip", gcn, 64)
    cc = props.major * 10 + props.minor
    name = f"sm_{cc}"
    if name in TARGETS:
        return TARGETS[name]
    # An architecture kvtune has no legality rows for yet (sm_80, sm_120...): build it anyway, the
    # portable variants are legal everywhere.
    return Target(name, "cuda", cc, 32)


def resolve(name: str) -> Target:
    """`auto` -> `detect()`, otherwise a named target."""
    return detect() if name == "auto" else get_target(name)
