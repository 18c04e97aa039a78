"""One module per kernel family: its search space, variant legality per target, default config,
renderer and launcher. `get_family(name)` is the registry the tuner and the CLI use."""

from __future__ import annotations

from importlib import import_module

from tuner.kernels.base import KernelFamily

_MODULES = {"pack": "tuner.kernels.pack", "decode": "tuner.kernels.decode", "logits": "tuner.kernels.logits"}


def family_names() -> tuple[str, ...]:
    return tuple(_MODULES)


def get_family(name: str) -> KernelFamily:
    try:
        mod = import_module(_MODULES[name])
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(_MODULES)}") from None
    return mod.FAMILY
