"""The runtime an engine links: `TunedKernels` (built once at startup from a kvtune server, an
export folder or the defaults; then FlashMLA's and DeepGEMM's call conventions, and pack, with
the tuned config of each call's bucket), the export folder format, and the cache views.

`tuner.runtime.export` is torch-free (the CLI writes exports from the database); the rest needs
torch and Triton. See docs/engine.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.runtime.export import ExportError, export_file_name, read_export, write_export  # noqa: F401

if TYPE_CHECKING:
    from tuner.runtime.kernels import BundleMismatch, TunedKernels  # noqa: F401
    from tuner.runtime.views import alloc_paged_cache, as_pages, paged_view  # noqa: F401

_LAZY = {
    "TunedKernels": "tuner.runtime.kernels", "BundleMismatch": "tuner.runtime.kernels",
    "alloc_paged_cache": "tuner.runtime.views", "as_pages": "tuner.runtime.views", "paged_view": "tuner.runtime.views",
}

__all__ = ["TunedKernels", "BundleMismatch", "alloc_paged_cache", "as_pages", "paged_view", "write_export",
           "read_export", "export_file_name", "ExportError"]


def __getattr__(name: str) -> Any:
    # torch and Triton load on first use, so `from tuner.runtime.export import ...` stays torch-free.
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tuner.runtime' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(mod), name)
