"""Issue 24: after a pack job tuned only N=1-4, the bundle listed N1-4 and N65-1024 and nothing for
N=5-64 (a default bucket overlapping a tuned one was dropped, not split). Every bundle covers the
whole of its family's default domain, each size by exactly one entry."""

from __future__ import annotations

from catalog.core import Bucket
from catalog.families import get_spec
from catalog.keys import make_key
from db import migrate
from db.bundles import BundleRequest, read_bundle
from db.session import Database
from tests.dashboard import seed


def _covering(entries: list[dict], n: int) -> list[str]:
    return [e["name"] for e in entries if Bucket.from_json(e["bucket"]).covers(n)]


def test_a_tuned_subset_leaves_no_size_uncovered(db_url: str) -> None:
    db = Database(db_url)
    migrate.upgrade(db)
    key = make_key("pack", "sm_90")
    seed.publish(db, key, [seed.Row(Bucket("N", 1, 4), 10.0, 9.0), seed.Row(Bucket("N", 900, 2000), 30.0, 20.0)])
    entries = read_bundle(db, BundleRequest("sm_90", 16, 512, 128)).bundle["kernels"]["pack"]["buckets"]
    db.dispose()
    domain = get_spec("pack").buckets(key)
    lo, hi = min(b.lo for b in domain), max(b.hi for b in domain)
    probes = sorted({lo, hi, *(x for e in entries for b in [Bucket.from_json(e["bucket"])] for x in (b.lo, b.hi,
                                                                                              b.lo - 1, b.hi + 1))})
    for n in (p for p in probes if lo <= p <= hi):
        assert len(_covering(entries, n)) == 1, (n, _covering(entries, n))
    names = {e["name"]: e["default"] for e in entries}
    assert names["N1-4"] is False and names["N5-64"] is True and names["N900-2000"] is False
    assert names["N65-899"] is True and names["N2001-16384"] is True
