"""The CTA barriers a tile costs in the wgmma decode builds, compiled for sm_90 on the CPU.

Triton's barrier pass (membar) tells shared-memory accesses apart by allocation only: accesses to
two subviews of one allocation take a `bar.sync` between them whether or not they overlap. K's
four 128-dim chunks and the stage rows' four are therefore allocations of their own, and the ws
producer loads its slots in its copies' layout (a layout conversion through scratch memory costs
two barriers). Landed 2026-12-07 (results/decode_chunk_allocs_ab_h100.md): the warp-specialised
picks 3-8% faster on an H100 (16 heads T=64, V4.1 pair, 18.64 -> 17.53 us; 128 heads T=64 96.92
-> 89.55). Then (decode_ws_barriers, results/decode_ws_barriers_ab_h100.md): the ws consumers
start a tile without a fence and barrier (their mbarrier wait and the previous tile's end barrier
order it) and the producer holds the scale rows' slots in their copies' layout too; 128 heads T=8
and T=64 on the fp8_584 pair 2.2-2.4% faster. Then (decode_hm_chunk_allocs,
results/decode_hm_chunk_allocs_prefetch_ab_h100.md): the heads-on-M builds' K chunks as
allocations of their own and the split's producer slots by shuffles (a warp's runs of 8 keys);
the 64/128-head T=64 picks (the split with PREFETCH=1) 0.2-2.8% faster. These bounds are the
landed counts: a change that folds the chunks back into one allocation, converts the slots again
or fences every consumer tile fails here before it costs a device call.
"""

from __future__ import annotations

import pytest

from tests.tuner.static_sm90 import loop_barriers, static_profile

# (pair, build, role of the loops bounded, their barriers a trip at most in address order, spilled bytes at most)
BOUNDS = [
    ("nvfp4_288,fp8_528", "MMA=wgmma", None, [6, 6], 0),  # was 12 + 12
    ("nvfp4_288,fp8_528", "MMA=wgmma_ws", "producer", [6, 4], 0),  # was 17 + 11, then 8 + 5
    ("nvfp4_288,fp8_528", "MMA=wgmma_ws", "mma", [5, 5, 10], 0),  # were 6; 10: a span into the epilogue
    ("nvfp4_288,fp8_528", "MMA=wgmma_hmws", "mma", [8, 8, 9], 0),  # was 9
    ("nvfp4_288,fp8_528", "MMA=wgmma_hmpv", "producer", [2, 2], 0),  # was 6 + 6
    ("fp8_584,fp8_584", "MMA=wgmma", None, [14, 10], 0),  # was 21 + 15
    ("fp8_584,fp8_584", "MMA=wgmma_ws", "producer", [11, 7], 0),  # was 22 + 14, then 13 + 8
    # The split spills in its QK warpgroup: 24 bytes with the slots by shuffles (0 before); with
    # PREFETCH=1 none since fp8_584's record bytes are loaded unmasked (50 before; 2026-12-07).
    ("fp8_584,fp8_584", "MMA=wgmma_hmpv", "producer", [3, 3], 24),  # was 9 + 9
    ("fp8_584,fp8_584", "MMA=wgmma_hmpv,PREFETCH=1", "producer", [10, 8], 0),  # was 13 + 11
]


@pytest.mark.parametrize("fmt,cfg,role,most,spills", BOUNDS, ids=[f"{f}-{c}-{r}" for f, c, r, _, _ in BOUNDS])
def test_tile_loops_take_no_barrier_between_chunks(fmt: str, cfg: str, role: str | None, most: list[int],
                                                   spills: int) -> None:
    got = static_profile(fmt, cfg)
    assert got["spills"] <= spills, got
    barriers = loop_barriers(got, role)
    assert len(barriers) == len(most), (barriers, got["loops"])
    assert all(b <= m for b, m in zip(barriers, most)), f"{cfg} {fmt}: {barriers} barriers a tile, at most {most}"


@pytest.mark.parametrize("fmt", ["nvfp4_288,fp8_528", "fp8_584,fp8_584"])
def test_ws_consumer_waits_for_its_mmas_once_a_tile(fmt: str) -> None:
    # decode_ws_pv_in_flight (2026-12-07): the warp-specialised consumer leaves a tile's PV MMAs in
    # flight and waits for them with the next tile's S, one wgmma wait a trip of each list's loop
    # (two before), with every wgmma still pipelined: a wait before each HGMMA would be ptxas
    # serializing them (C7514, which waiting for the PV MMAs alone with wait_group 4 brings).
    got = static_profile(fmt, "MMA=wgmma_ws")
    waits = [lp["ops"].get("wgmma wait", 0) for lp in got["loops"] if lp["role"] == "mma"][:2]
    assert waits == [1, 1], got["loops"]
    assert got["ops"]["wgmma wait"] < got["ops"]["wgmma"] // 8 and got["spills"] == 0, got["ops"]
