"""benchmarks/record_table.py's CPU-side planning: how entries are shared out for precompiling."""

from __future__ import annotations

from benchmarks.record_table import precompile_shares
from tuner.core import Bucket
from tuner.kernels.pack import space as pack_space


def test_precompile_keeps_every_bucket_of_a_config_in_one_process() -> None:
    # The buckets of a config mostly launch one binary: split across processes, each of them
    # compiles it at the same time. Each entry is compiled exactly once, and the shares stay even.
    configs = list(pack_space("nvfp4_288").restrict({"BLOCK_T": (2, 4), "num_warps": (1, 2, 4)}).grid())
    buckets = [Bucket("N", 1, 64), Bucket("N", 65, 1024), Bucket("N", 1025, 16384)]
    items = [(b, c) for c in configs for b in buckets] + [(Bucket("N", 16385, 1 << 20), configs[0])]
    shares = precompile_shares(items, 5)
    assert len(shares) == 5
    flat = [it for share in shares for it in share]
    assert sorted(map(repr, flat)) == sorted(map(repr, items))
    owners: dict[str, set[int]] = {}
    for i, share in enumerate(shares):
        for _, c in share:
            owners.setdefault(c.to_json(), set()).add(i)
    assert len(owners) == len(configs) and all(len(o) == 1 for o in owners.values())
    sizes = sorted(len(s) for s in shares)
    assert sizes[-1] - sizes[0] <= len(buckets) + 1
