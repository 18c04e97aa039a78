"""The local device's target: `detect()` names it (ROCm's `gcnArchName` included), `resolve()` reads
`auto`. The targets themselves are data in `catalog.targets`."""

from __future__ import annotations

import os

from catalog.targets import GPU_TARGETS, TARGETS, Target, get_target  # noqa: F401  (re-exported)


def gpu_target(target: Target):  # -> triton.backends.compiler.GPUTarget
    """Triton's `GPUTarget` for `target`, what `triton.compile` cross-compiles for (no GPU needed)."""
    if not target.is_gpu:
        raise ValueError("the interpreter has no GPUTarget: it runs Triton's Python semantics on the CPU")
    from triton.backends.compiler import GPUTarget

    return GPUTarget(target.backend, target.arch, target.warp_size)


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
