"""Coverage of a bundle: the default buckets, split around the tuned ones.

A bundle serves tuned buckets where a job tuned them and the family's default config elsewhere.
A default bucket that overlaps a tuned one is cut to the parts the tuned ones leave (N=1-64 with
N=1-4 tuned leaves N=5-64), never dropped, so every batch size a default bucket covered stays
covered, by exactly one entry. Buckets compare per (dim, ctx): a tuned T=1-8@4096 does not cut a
default T=1-64@16384.
"""

from __future__ import annotations

from typing import Sequence

from catalog.core import Bucket


def fill_coverage(defaults: Sequence[Bucket], tuned: Sequence[Bucket]) -> list[Bucket]:
    """The parts of `defaults` no `tuned` bucket covers, as buckets of their (dim, ctx), sorted by
    (dim, ctx, lo). With the tuned buckets they cover every n a default covered, without overlap
    among themselves or with a tuned one (defaults that overlap each other are merged first)."""
    out: list[Bucket] = []
    for dim, ctx in sorted({(b.dim, b.ctx) for b in defaults}):
        cuts = sorted((t.lo, t.hi) for t in tuned if t.dim == dim and t.ctx == ctx)
        for lo, hi in _merged(sorted((b.lo, b.hi) for b in defaults if b.dim == dim and b.ctx == ctx)):
            out.extend(Bucket(dim, a, b, ctx) for a, b in _subtract(lo, hi, cuts))
    return out


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted closed ranges with overlapping ones joined (adjacent ones stay apart: their buckets)."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _subtract(lo: int, hi: int, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[lo, hi] minus the closed ranges `cuts` (sorted by lo)."""
    out: list[tuple[int, int]] = []
    start = lo
    for a, b in cuts:
        if b < start or a > hi:
            continue
        if a > start:
            out.append((start, a - 1))
        start = max(start, b + 1)
        if start > hi:
            break
    if start <= hi:
        out.append((start, hi))
    return out
