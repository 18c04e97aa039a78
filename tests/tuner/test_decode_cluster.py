"""The 2-CTA cluster build of the QK / PV split (MMA=wgmma_hmpvc) on the CPU: where it is legal, its
seed, its render, and the shared-memory offsets its inline PTX takes, held to where Triton's own
allocator places the buffers. (Its GPU test: test_decode_wgmma.py, `cluster_build_matches`.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.families.decode import SPEC, decode_key, default_config, render_wgmma, space
from catalog.families.decode_wgmma import WGMMA_CLUSTER_OFFSETS, wgmma_config
from templates import render as R

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")]


def _cluster(pair: tuple[str, str]) -> object:
    return wgmma_config(default_config(*pair).replace(MMA="wgmma_hmpvc", PREFETCH=1))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "+".join(p))
def test_the_cluster_build_takes_two_64_head_groups(pair: tuple[str, str]) -> None:
    cfg = _cluster(pair)
    assert cfg["num_warps"] == 4 and cfg["PREFETCH"] == 1
    for heads in (65, 96, 128):
        assert space(*pair, heads).infeasible(cfg) is None, heads
    for heads in (8, 16, 64):
        assert "2-CTA cluster takes two 64-head groups" in (space(*pair, heads).infeasible(cfg) or ""), heads
    # Not seeded before a GPU has run it (the search may still draw it).
    assert all(c["MMA"] != "wgmma_hmpvc" for c in SPEC.seed_configs(decode_key(*pair, "sm_90", 128), "sm_90"))
    # Its module is the cluster render (what a bundle exports and the launcher loads).
    key = decode_key(*pair, "sm_90", 128)
    assert SPEC.render(key, cfg).source == render_wgmma(*pair, cluster=True).source
    assert SPEC.modules(key, cfg)[0].source == render_wgmma(*pair, cluster=True).source


def test_the_served_module_holds_no_cluster_code() -> None:
    # The other builds' module is rendered without `cluster`: none of the cross-CTA code, and its
    # layouts without CTA layouts (CLUSTER off); the cluster render reaches the catalog's offsets.
    for pair in PAIRS:
        served, cluster = render_wgmma(*pair).source, render_wgmma(*pair, cluster=True).source
        assert "CLUSTER = False" in served and "_bulk_to_peer" not in served and "%cluster_ctarank" not in served
        assert "CLUSTER = True" in cluster and "_bulk_to_peer(kv_off" in cluster
        for placed in WGMMA_CLUSTER_OFFSETS.values():
            assert f"ready_off = {placed['ready']}" in cluster and f"pfree_off = {placed['pfree']}" in cluster
        # What the launcher checks a compile's placement against: the offsets the module was rendered with.
        assert R.load(render_wgmma(*pair, cluster=True)).PEER_OFFSETS == WGMMA_CLUSTER_OFFSETS


_PLACE = """
import json, sys
from catalog.formats import get_format
from tuner.compile import _request, compile_with_stats
from catalog.families.decode_wgmma import WGMMA_CLUSTER_OFFSETS
from tuner.kernels.decode.cluster import ZERO_OFFSETS, check_offsets, placed_offsets
from tuner.kernels.decode.xcompile import cluster_case
out = []
for comp, win, split, prefetch, sink, shift in json.loads(sys.argv[1]):
    cf, wf = get_format(comp), get_format(win)
    kw = dict(prefetch=prefetch, has_sink=sink, comp_shift=shift, win_shift=shift)
    placed = placed_offsets(cluster_case(cf, wf, split, offsets=ZERO_OFFSETS, **kw))
    k, stats = compile_with_stats(_request(cluster_case(cf, wf, split, **kw), "sm_90"))
    check_offsets(k, split, WGMMA_CLUSTER_OFFSETS)  # raises if the build with them placed them elsewhere
    out.append({"placed": placed, "ptx": k.asm["ptx"].count(".reqnctapercluster 2"), **stats})
print(json.dumps(out))
"""


def test_the_catalogs_offsets_are_where_triton_places_the_buffers_in_every_specialisation() -> None:
    # The constexprs the launcher varies (SPLIT, HAS_SINK, PREFETCH, pages by a shift or not: their
    # 16 combinations on the V4 pair placed the buffers alike but for SPLIT, 2026-12-06), both pairs:
    # the buffers the peer reaches (its K buffers, ready barriers and pfree words) lie at the
    # catalog's offsets for that SPLIT, in a render with zeros and in the real one alike; the PTX is
    # a 2-CTA cluster's within sm_90's shared memory.
    import json

    cases = [("fp8_584", "fp8_584", split, True, True, 6) for split in (False, True)]
    cases += [("nvfp4_288", "fp8_528", True, True, True, 6), ("fp8_584", "fp8_584", True, False, False, -1)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    got = subprocess.run([sys.executable, "-c", _PLACE, json.dumps(cases)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    rows = json.loads(got.stdout.strip().splitlines()[-1])
    for case, row in zip(cases, rows):
        assert row["placed"] == WGMMA_CLUSTER_OFFSETS["split" if case[2] else "whole"], (case, row)
        assert row["ptx"] == 1 and row["shared_bytes"] <= 227 * 1024, (case, row)
