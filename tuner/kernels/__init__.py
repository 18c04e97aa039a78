"""One module per kernel family: its launcher, inputs, verification and cross-compile cases, on top
of its catalog spec (`catalog.families`). `get_family(name)` is the registry the tuner and the CLI use."""

from __future__ import annotations

from importlib import import_module

from catalog.families import family_names  # noqa: F401  (the same names as the catalog's)
from tuner.kernels.base import KernelFamily

_MODULES = {"pack": "tuner.kernels.pack", "decode": "tuner.kernels.decode", "logits": "tuner.kernels.logits"}


def get_family(name: str) -> KernelFamily:
    """A registered family by name, or any family by dotted path: `"package.module:ATTR"` (or
    `"package.module"` for its `FAMILY`). The dotted form is what the benchmark child receives, so a
    family defined outside `tuner.kernels` (a test's fault family) loads in the child exactly as in
    the parent, with no registration call to replay."""
    if name in _MODULES:
        return import_module(_MODULES[name]).FAMILY
    if ":" in name or "." in name:
        mod_name, _, attr = name.partition(":")
        try:
            mod = import_module(mod_name)
        except ImportError as e:
            raise ValueError(f"cannot import kernel family module {mod_name!r}: {e}") from None
        try:
            return getattr(mod, attr or "FAMILY")
        except AttributeError:
            raise ValueError(f"module {mod_name!r} has no kernel family {attr or 'FAMILY'!r}") from None
    raise ValueError(f"unknown kernel {name!r}; known: {sorted(_MODULES)} (or a dotted path 'module:ATTR')")
