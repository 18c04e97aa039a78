"""Engine caches seen as kvtune's launchers take them, in place.

Engines hand FlashMLA and DeepGEMM a paged cache as `(blocks, P, 1, bytes_per_token)` bytes (or
fp8 elements). FORMATS.md lays a page out as its P data rows, then its P scale rows, so the 4-D
shape says nothing about where a token's bytes are: what matters is that each page is one run
of `page_bytes(fmt, P)` bytes, pages one after another. `as_pages` checks exactly that and
returns the `(blocks, page_bytes)` view the launchers take, over the same storage.

Where `page_bytes` rounds a page up (FORMATS.md page_align: fp8_528 at P = 16, fp8_584 at most
P), a tightly packed `(blocks, P, 1, bytes)` tensor has shorter pages than the kernels read, and
no view can fix that: allocate with `alloc_paged_cache`, whose 4-D view has the padded page
stride the engine then keeps using.
"""

from __future__ import annotations

import torch

from catalog.formats import FORMATS, RecordFormat, get_format, page_bytes

BYTES_TO_FORMAT: dict[int, str] = {f.bytes_per_token: f.name for f in FORMATS.values()}


def format_of(cache: torch.Tensor, allowed: tuple[str, ...], what: str) -> RecordFormat:
    """The record format a 4-D cache's last dim names (584 -> fp8_584, 132 -> fp8_132, ...)."""
    if cache.dim() != 4:
        raise ValueError(f"{what} must be (blocks, page_size, 1, bytes_per_token), got {tuple(cache.shape)}")
    name = BYTES_TO_FORMAT.get(int(cache.shape[-1]))
    if name not in allowed:
        raise ValueError(f"{what}: {cache.shape[-1]} bytes per token is none of "
                         f"{ {get_format(a).bytes_per_token: a for a in allowed} }")
    return get_format(name)


def as_pages(cache: torch.Tensor, fmt: str | RecordFormat, what: str = "cache") -> tuple[torch.Tensor, int]:
    """`(view uint8[blocks, page_bytes], page_size)` of a `(blocks, P, 1, bytes)` cache, over its
    storage (no copy). A 1-byte dtype other than uint8 (fp8 elements) is reinterpreted."""
    f = get_format(fmt)
    if cache.dim() != 4 or cache.shape[2] != 1 or cache.shape[3] != f.bytes_per_token:
        raise ValueError(f"{what} must be (blocks, P, 1, {f.bytes_per_token}) for {f.name}, got {tuple(cache.shape)}")
    if cache.element_size() != 1:
        raise ValueError(f"{what} must have a 1-byte dtype (uint8 or fp8), got {cache.dtype}")
    u8 = cache if cache.dtype == torch.uint8 else cache.view(torch.uint8)
    blocks, p = int(u8.shape[0]), int(u8.shape[1])
    pb = page_bytes(f, p)
    short = u8.untyped_storage().nbytes() < u8.storage_offset() + blocks * pb
    if short or u8.stride(3) != 1 or (p > 1 and u8.stride(1) != f.bytes_per_token) or (blocks > 1 and u8.stride(0) != pb):
        raise ValueError(
            f"{what}: pages of {f.name} at P={p} are {pb} contiguous bytes each (FORMATS.md: data rows, then "
            f"scale rows, rounded up to {f.page_align}); got strides {tuple(u8.stride())}. "
            f"Allocate it with tuner.runtime.alloc_paged_cache({f.name!r}, blocks, {p})")
    flat = u8.as_strided((blocks, pb), (pb, 1), u8.storage_offset())
    return flat, p


def pages_of_2d(cache: torch.Tensor, fmt: str | RecordFormat, page_size: int | None, what: str = "cache") -> int:
    """The page size of a `(blocks, page_bytes)` cache: `page_size` if given, else the only P whose
    page_bytes is the cache's row (rounding can make several P share a row size)."""
    f = get_format(fmt)
    pb = int(cache.shape[1])
    if page_size is not None:
        return page_size
    cands = [p for p in range(1, 4097) if page_bytes(f, p) == pb]
    if len(cands) != 1:
        raise ValueError(f"{what}: rows of {pb} bytes are {f.name} pages of P in {cands or 'none'}: pass page_size=")
    return cands[0]


def alloc_paged_cache(fmt: str | RecordFormat, blocks: int, page_size: int, device: str | torch.device = "cpu",
                      fill: int | None = None) -> torch.Tensor:
    """A `(blocks, P, 1, bytes_per_token)` uint8 view over `blocks` pages of `page_bytes(fmt, P)`
    bytes: the engine-shaped cache every kvtune kernel reads in place."""
    f = get_format(fmt)
    pb = page_bytes(f, page_size)
    if fill is None:
        flat = torch.empty((blocks, pb), dtype=torch.uint8, device=device)
    else:
        flat = torch.full((blocks, pb), fill, dtype=torch.uint8, device=device)
    return paged_view(flat, f, page_size)


def paged_view(flat: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> torch.Tensor:
    """The `(blocks, P, 1, bytes_per_token)` view of a `(blocks, page_bytes)` kvtune cache."""
    f = get_format(fmt)
    pb = page_bytes(f, page_size)
    if flat.dtype != torch.uint8 or flat.dim() != 2 or flat.shape[1] != pb or not flat.is_contiguous():
        raise ValueError(f"expected a contiguous uint8[blocks, {pb}] {f.name} cache at P={page_size}")
    bpt = f.bytes_per_token
    return flat.as_strided((flat.shape[0], page_size, 1, bpt), (pb, bpt, bpt, 1), flat.storage_offset())
