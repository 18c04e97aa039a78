"""The kernel families' catalog specs by name: what the API and the database may know of a family
without torch (see `base.FamilySpec`). `tuner.kernels.get_family` gives the whole family."""

from __future__ import annotations

from importlib import import_module

from catalog.families.base import FamilySpec

_MODULES = {"pack": "catalog.families.pack", "decode": "catalog.families.decode", "logits": "catalog.families.logits"}


def family_names() -> tuple[str, ...]:
    return tuple(_MODULES)


def get_spec(name: str) -> FamilySpec:
    """A registered family's spec by name (only registered names: requests reach this)."""
    try:
        return import_module(_MODULES[name]).SPEC
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known: {list(_MODULES)}") from None
