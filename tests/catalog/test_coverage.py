"""fill_coverage: default buckets split around tuned ones, so a bundle covers its whole domain
(issue 24: after a pack job tuned only N=1-4, N=5-64 had no config)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from catalog.core import Bucket
from catalog.coverage import fill_coverage
from catalog.families import get_spec
from catalog.keys import make_key


def test_pack_tuned_at_n1_4_keeps_n5_64_covered() -> None:
    key = make_key("pack", "interp", formats=["fp8_528"])
    defaults = get_spec("pack").buckets(key)
    tuned = [Bucket("N", 1, 4)]
    filled = fill_coverage(defaults, tuned)
    assert filled == [Bucket("N", 5, 64), *defaults[1:]]
    for n in (1, 4, 5, 10, 64, 65, 1024, 16385, 1 << 20):  # an engine call at N=10 finds a config
        assert sum(b.covers(n) for b in [*tuned, *filled]) == 1, n


def test_split_in_the_middle_and_other_contexts_untouched() -> None:
    defaults = [Bucket("T", 1, 64, 4096), Bucket("T", 1, 64, 16384), Bucket("B", 1, 8)]
    filled = fill_coverage(defaults, [Bucket("T", 9, 16, 4096), Bucket("N", 1, 100)])
    assert filled == [Bucket("B", 1, 8), Bucket("T", 1, 8, 4096), Bucket("T", 17, 64, 4096), Bucket("T", 1, 64, 16384)]
    assert fill_coverage(defaults, []) == sorted(defaults, key=lambda b: (b.dim, b.ctx, b.lo))
    assert fill_coverage([Bucket("N", 1, 4)], [Bucket("N", 1, 8)]) == []


DIMS = st.sampled_from(["N", "T"])
CTXS = st.sampled_from([0, 4096])


@st.composite
def partitions(draw: st.DrawFn) -> list[Bucket]:
    """Default buckets as families make them: consecutive ranges per (dim, ctx), with gaps."""
    out = []
    for dim in ("N", "T"):
        for ctx in draw(st.sets(CTXS, min_size=1)):
            lo = draw(st.integers(1, 5))
            for _ in range(draw(st.integers(1, 5))):
                hi = lo + draw(st.integers(0, 20))
                out.append(Bucket(dim, lo, hi, ctx))
                lo = hi + 1 + draw(st.sampled_from([0, 0, 0, 3]))
    return out


@st.composite
def buckets(draw: st.DrawFn) -> Bucket:
    lo = draw(st.integers(1, 110))
    return Bucket(draw(DIMS), lo, lo + draw(st.integers(0, 30)), draw(CTXS))


@st.composite
def disjoint_tuned(draw: st.DrawFn) -> list[Bucket]:
    """Tuned buckets as a job stores them: no two of a (dim, ctx) overlap."""
    out: list[Bucket] = []
    for b in draw(st.lists(buckets(), max_size=8)):
        if not any(b.dim == t.dim and b.ctx == t.ctx and b.lo <= t.hi and t.lo <= b.hi for t in out):
            out.append(b)
    return out


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(partitions(), disjoint_tuned())
def test_tuned_plus_filled_cover_each_default_size_exactly_once(defaults: list[Bucket], tuned: list[Bucket]) -> None:
    filled = fill_coverage(defaults, tuned)
    for dim in ("N", "T"):
        for ctx in (0, 4096):
            def cover(bs: list[Bucket], n: int) -> int:
                return sum(1 for b in bs if b.dim == dim and b.ctx == ctx and b.covers(n))

            for n in range(1, 150):
                in_default = cover(defaults, n) > 0
                assert cover(filled, n) + cover(tuned, n) >= in_default  # nothing a default covered is lost
                assert cover(filled, n) <= (in_default and not cover(tuned, n))  # no overlap, nothing new
    # A filled bucket is a part of one default bucket: the defaults' boundaries stay.
    for f in filled:
        assert any(d.dim == f.dim and d.ctx == f.ctx and d.lo <= f.lo and f.hi <= d.hi for d in defaults)
    assert filled == sorted(filled, key=lambda b: (b.dim, b.ctx, b.lo))
