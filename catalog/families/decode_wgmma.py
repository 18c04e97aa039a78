"""The decode family's wgmma path (sm_90's Gluon kernels, templates/decode_wgmma.py.j2): its builds
(the MMA values), what each fixes of the Triton tile's space, which record pairs each reads (its
shared memory within sm_90's limit) and where it runs. The family's space (`catalog.families.decode`)
admits a wgmma config where `wgmma_fits` says it fits."""

from __future__ import annotations

from typing import Any

from catalog.core import Config
from catalog.formats import RecordFormat, get_format

# The `wgmma` MMA path is a Gluon kernel of its own template (sm_90 only; see templates/decode_wgmma.py.j2).
WGMMA_TEMPLATE = "decode_wgmma.py.j2"

# The records the wgmma path reads (a pair of them where its shared memory fits: `wgmma_reads`).
WGMMA_FORMATS: tuple[str, ...] = ("nvfp4_288", "fp8_528", "fp8_584")

WGMMA_BLOCK_N = 64  # keys a tile: one warpgroup MMA's rows

# Heads a wgmma program takes (the MMAs' N), by its warps: one warpgroup holds 16 heads' [512]
# fp32 accumulators in 64 registers a thread, two warpgroups 32 heads' in as many (176 registers
# a thread in all, no spills; 32 heads in one warpgroup spill: static sm_90 counts). More heads
# than that run in groups, grid axis 2 (`wgmma_heads`).
WGMMA_HEADS = 16
WGMMA_HEADS_2WG = 32
WGMMA_WARPS = 4  # the path's seed: one warpgroup (measured at the seed shape, 16 heads)
# The heads-on-M build (MMA=wgmma_hm, decode_wgmma_hm_kernel): 64 heads a program on the MMAs' M,
# two warpgroups splitting S's keys and O's dims, each tile read and dequantized once per 64 heads;
# both lists' stage rows in one region (the warp-specialised build's), so pairs of two formats fit
# beside the 64-head query (since 2026-12-04; V4.1 pair 128 heads T=64 57.8 us against 78.8 for two
# warpgroups on the H200: benchmarks/results/decode_hm_pairs_h200.md).
WGMMA_HM_HEADS = 64
WGMMA_HM_WARPS = 8

# The Triton module whose decode_combine merges the wgmma path's splits (every backend renders the
# same decode_combine).
WGMMA_MERGE_BACKEND = "soft"

# What the wgmma path fixes (64-key tiles, bf16 dots, its own e2m1 lookups and split plan; its
# warps, 4 or 8, are searched; PREFETCH too on WGMMA_PREFETCH_MMAS): every other value of these
# axes would be the same kernel under another name.
WGMMA_FIXED: dict[str, Any] = {"BLOCK_N": WGMMA_BLOCK_N, "DOT": "bf16", "LISTS": "both", "COMBINE": "kernel",
                               "PREFETCH": 0, "num_stages": 1}

# The warp-specialised build (MMA=wgmma_ws, decode_wgmma_ws_kernel): "wgmma"'s one warpgroup of 16
# heads as the consumer (MMAs, softmax), beside 8 producer warps that gather each tile by cp.async
# and dequantize it into the other of two K buffers, so the next tile's conversion runs under this
# tile's MMAs. Every pair whose buffers fit (`wgmma_ws_reads`: the second K buffer takes the room of
# a second list's stage rows, so both lists share one region; GPU tests on five pairs, 2026-12-04).
# A program of one tile has nothing to overlap (T=1: the one-warpgroup build stays ahead); past a
# few tiles it wins: H200, 16 heads T=64, V4.1 pair 18.6 us against 21.1, fp8_584 pair 20.2 against
# 22.5 (benchmarks/results/decode_ws_pairs_h200.md). Its producer: the template's WS_PRODUCER_*.
WGMMA_WS_WARPS = 4  # the consumer's; the producer's come with the warp-specialised region
# Its ping-pong form (two consumer warpgroups taking a program's tiles in turn, each K buffer its
# own) was correct and slower at every T on an H100 (2026-12-07: 16 heads T=64 18.89 against 17.30
# us; the tile period stayed 1.77 us, both sides slowed by what they share:
# benchmarks/results/decode_wsp_h100.md) and is gone (`git show 6b41688`).
# Its register-producer form (MMA=wgmma_wsr, decode_wgmma_wsr_kernel, 2026-12-07): three K buffers,
# two producer warpgroups loading each tile's records into registers (the heads-on-M producer's
# way) and two consumer warpgroups, each pair taking the tiles in turn; no stage buffers (the third
# K buffer takes their room), so any pair the wgmma path reads fits (`wgmma_wsr_shared_bytes`).
# Each consumer writes a partial, so a program writes two, takes two tiles at least (`wgmma_plan`)
# and never merges in the kernel. Its form with one consumer was correct and slower than ws
# (H100, benchmarks/results/decode_wsr_h100.md); this one is compiled on the CPU only: not seeded.
# The builds whose programs write two partials each (a consumer warpgroup's each).
WGMMA_TWO_PARTIAL_MMAS: tuple[str, ...] = ("wgmma_wsr",)

# The heads-on-M warp-specialised build (MMA=wgmma_hmws, decode_wgmma_hmws_kernel), FlashMLA's
# layout of the work: "wgmma_hm"'s two warpgroups (64 heads on M) consume two bf16 K tiles that a
# producer warpgroup fills, reading each tile's records from global memory straight into its
# registers (two K tiles beside the 64-head query leave no room for stage buffers), so the
# dequantization of the next tile runs under this tile's MMAs. Every pair the wgmma path reads.
# H200, 128 heads T=64 (2026-12-04): V4.1 pair 53.7 us against 57.8 for "wgmma_hm", V4 pair 57.9
# against 60.7; behind two warpgroups at T <= 8 and at 64 heads
# (benchmarks/results/decode_hmws_h200.md). Seeded after "wgmma_hm".
WGMMA_HMWS_WARPS = WGMMA_HM_WARPS  # the consumer's

# Its successor (MMA=wgmma_hmpv, decode_wgmma_hmpv_kernel), FlashMLA's split of the consumer: one
# warpgroup computes S[64 heads, 64 keys] alone, the softmax and O's dims 0-255, a second O's dims
# 256-511 from the P it leaves in shared memory; the same producer warpgroup. Less operand traffic
# in shared memory a tile than "wgmma_hm"'s symmetric warpgroups (S at N = 64, not two halves of
# 32; O at N = 128, not 64). GPU tests pass (H200, 2026-12-05); seeded past 32 heads, PREFETCH=1.
WGMMA_HMPV_WARPS = 4  # the QK warpgroup's; the PV and producer warpgroups come with the region
# The builds that convert each tile once for all head groups of a launch (the template's `_share_claim`,
# `_share_put`, `_share_get`: the other groups copy it through L2): "wgmma_hmpvs", the QK / PV split's
# (65-128 heads: two 64-head groups), and "wgmma_wss", the warp-specialised build's (past 16 heads).
# CPU-compiled only so far (2026-12-05): not seeded.
WGMMA_SHARE_MMAS: tuple[str, ...] = ("wgmma_hmpvs", "wgmma_wss")

# The 2-CTA cluster build of the QK / PV split (MMA=wgmma_hmpvc: the module rendered with
# `cluster`, its kernel launched with num_ctas=2): a cluster's two CTAs take a token's two 64-head
# groups, and each converts two of a tile's four K chunks into both CTAs' K buffers (a bulk copy
# into the peer's shared memory), so each tile is dequantized once for 128 heads, FlashMLA's sm90
# split of the work (tuner/kernels/decode/cluster.py). 65-128 heads: one cluster a token and split.
WGMMA_CLUSTER_MMAS: tuple[str, ...] = ("wgmma_hmpvc",)
WGMMA_CLUSTER_CTAS = 2
# Byte offsets into Triton's dynamic shared memory of the buffers the peer CTA reaches (its K
# buffers, its ready barriers, its pfree words), where Triton 3.6's allocator places them for every
# specialisation of the build (tests/tuner/test_decode_cluster.py; the launcher checks each
# specialisation's before its first launch).
# Without SPLIT and with it (the barriers lie 16 bytes apart).
WGMMA_CLUSTER_OFFSETS: dict[str, dict[str, int]] = {
    "whole": {"kv": 0, "ready": 214032, "pfree": 214096},
    "split": {"kv": 0, "ready": 214016, "pfree": 214080},
}

# The warp-specialised builds take PREFETCH (0 elsewhere on the wgmma path): 1 prefetches records
# into L2 a tile further ahead than the producer loads them (benchmarks/README.md, "L2 prefetch").
# On the H200 (2026-12-05) 3-7% faster at T = 64, 0-1 us slower at T <= 8: searched (the QK / PV
# split's seed takes it).
WGMMA_PREFETCH_MMAS: tuple[str, ...] = ("wgmma_ws", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmpvs", "wgmma_wss",
                                        "wgmma_hmpvc")

# The builds whose programs can merge a token's partials themselves (COMBINE=fused: the template's
# _merge_slices, each program a slice of D, where the launch's grid fits the SMs) instead of by
# decode_combine, a second kernel (COMBINE=kernel); the heads-on-N builds, 16 or 32 heads a program.
WGMMA_MERGE_MMAS: tuple[str, ...] = ("wgmma", "wgmma_ws")

# The MMA values of the wgmma path, all above: "wgmma" (keys on the MMAs' M, 16 or 32 heads a program
# on N), "wgmma_hm" (64 heads a program on M, each tile dequantized once per 64 heads; every pair whose
# buffers fit: `wgmma_hm_reads`), "wgmma_ws", "wgmma_wsr", "wgmma_hmws", "wgmma_hmpv", and "wgmma_hmpvs" /
# "wgmma_wss" (WGMMA_SHARE_MMAS) and "wgmma_hmpvc" (WGMMA_CLUSTER_MMAS). One template
# renders their six kernels (the cluster build's from its own render).
WGMMA_MMAS: tuple[str, ...] = ("wgmma", "wgmma_hm", "wgmma_ws", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmpvs", "wgmma_wss",
                               "wgmma_hmpvc", "wgmma_wsr")
# The builds with 64 heads a program on the MMAs' M.
WGMMA_HM_MMAS: tuple[str, ...] = ("wgmma_hm", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmpvs", "wgmma_hmpvc")
# Each build's warps (the consumer's, or the QK warpgroup's); "wgmma" keeps its own 4 or 8.
WGMMA_BUILD_WARPS: dict[str, int] = {"wgmma_hm": WGMMA_HM_WARPS, "wgmma_ws": WGMMA_WS_WARPS, "wgmma_hmws": WGMMA_HMWS_WARPS,
                                     "wgmma_hmpv": WGMMA_HMPV_WARPS, "wgmma_hmpvs": WGMMA_HMPV_WARPS, "wgmma_wss": WGMMA_WS_WARPS,
                                     "wgmma_hmpvc": WGMMA_HMPV_WARPS, "wgmma_wsr": WGMMA_WS_WARPS}


def is_wgmma(cfg: Config | dict[str, Any]) -> bool:
    """Whether `cfg` runs on the wgmma path (either of its builds)."""
    return cfg.get("MMA") in WGMMA_MMAS


WGMMA_ILLEGAL: dict[str, str] = {
    "interp": "a Gluon kernel: Triton's interpreter does not run Gluon",
    "sm_100": "Hopper's warpgroup MMA (wgmma); sm_100 has tcgen05 in its place",
    "gfx942": "a Gluon kernel of NVIDIA Hopper operations (wgmma, PTX prmt)",
    "gfx950": "a Gluon kernel of NVIDIA Hopper operations (wgmma, PTX prmt)",
}


def wgmma_fits(c: Config, comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, heads: int) -> str | None:
    """Why the wgmma path cannot run `c` for this pair at `heads` (None: it can)."""
    if not wgmma_reads(comp_fmt, win_fmt):
        return f"the wgmma path reads {list(WGMMA_FORMATS)} records (no bf16 dims)"
    if c["MMA"] == "wgmma_hm" and not wgmma_hm_reads(comp_fmt, win_fmt):
        return (f"the heads-on-M build's buffers for {get_format(comp_fmt).name} + "
                f"{get_format(win_fmt).name} exceed sm_90's shared memory")
    if c["MMA"] == "wgmma_hmws" and wgmma_hmws_shared_bytes() + WGMMA_SHARED_SLACK > SM90_SHARED_MAX:
        return "the heads-on-M warp-specialised build's buffers exceed sm_90's shared memory"
    if c["MMA"] in ("wgmma_hmpv", "wgmma_hmpvs", "wgmma_hmpvc") and \
            wgmma_hmpv_shared_bytes() + WGMMA_SHARED_SLACK > SM90_SHARED_MAX:
        return "the QK / PV split build's buffers exceed sm_90's shared memory"
    if c["MMA"] in WGMMA_CLUSTER_MMAS and not WGMMA_HM_HEADS < heads <= 2 * WGMMA_HM_HEADS:
        return f"a 2-CTA cluster takes two 64-head groups: 65-128 heads, not {heads}"
    if c["MMA"] == "wgmma_hmpvs" and not WGMMA_HM_HEADS < heads <= 2 * WGMMA_HM_HEADS:
        return f"tiles are shared between two 64-head groups: 65-128 heads, not {heads}"
    if c["MMA"] == "wgmma_wss" and heads <= WGMMA_HEADS:
        return f"tiles are shared between head groups of {WGMMA_HEADS}: more than {WGMMA_HEADS} heads, not {heads}"
    if c["MMA"] == "wgmma_wsr" and wgmma_wsr_shared_bytes() + WGMMA_SHARED_SLACK > SM90_SHARED_MAX:
        return "the register-producer warp-specialised build's buffers exceed sm_90's shared memory"
    if c["MMA"] in ("wgmma_ws", "wgmma_wss") and not wgmma_ws_reads(comp_fmt, win_fmt):
        return (f"the warp-specialised build's buffers for {get_format(comp_fmt).name} + "
                f"{get_format(win_fmt).name} exceed sm_90's shared memory")
    want = wgmma_config(c)
    off = [k for k, v in want.as_dict().items() if c[k] != v]
    return f"the wgmma path runs {', '.join(f'{k}={want[k]}' for k in off)}" if off else None


def wgmma_config(cfg: Config) -> Config:
    """`cfg` on the wgmma path: its build (MMA=wgmma, or wgmma_hm if it is one already) with the
    parameters the path fixes (WGMMA_FIXED; the backend axis at its default, "soft": the kernel's
    e2m1 lookups are its own). It keeps its split count (NUM_SPLITS, see `wgmma_plan`) and, if it
    is already a wgmma config, its warps (4 or 8: one warpgroup or two; the heads-on-M build runs
    WGMMA_HM_WARPS, the warp-specialised one WGMMA_WS_WARPS); another config comes onto the path
    with the seed's 4. The builds of WGMMA_PREFETCH_MMAS keep its PREFETCH too, those of
    WGMMA_MERGE_MMAS its COMBINE."""
    mma = cfg["MMA"] if is_wgmma(cfg) else "wgmma"
    warps = WGMMA_BUILD_WARPS.get(mma, cfg["num_warps"] if is_wgmma(cfg) else WGMMA_WARPS)
    fixed = {k: v for k, v in WGMMA_FIXED.items() if not (k == "PREFETCH" and mma in WGMMA_PREFETCH_MMAS)
             and not (k == "COMBINE" and mma in WGMMA_MERGE_MMAS)}
    return cfg.replace(MMA=mma, backend="soft", num_warps=warps, **fixed)


# The most shared memory a block may opt into on sm_90 (227 KiB; cudaDevAttrMaxSharedMemoryPerBlockOptin).
SM90_SHARED_MAX = 232448
WGMMA_SHARED_SLACK = 512  # the compiler's own shared scratch beyond the buffers, at most (sm_90 builds)


def _stage_rows(f: RecordFormat) -> tuple[int, int]:
    """A key's bytes in a stage buffer of the wgmma template: a chunk's data row (64 bytes of e2m1
    pairs or 128 of e4m3) and its side row (the scales; fp8_584: its last 64 e4m3 bytes, then
    its scales, padded to 128: shared shapes are powers of two)."""
    row = 64 if f.elem == "e2m1" else 128
    tail = f.elem_bytes % row  # e4m3 bytes past the last whole chunk (fp8_584: 64)
    return row, 128 if tail else f.scale_bytes


def _mma_bytes(hb: int, k_tiles: int) -> int:
    """The MMAs' operands in shared memory for `hb` heads: `k_tiles` tiles of four bf16 K chunks
    [64 keys, 128 dims], P^T [64 keys, hb] and the query's four chunks [hb, 128], all bf16."""
    return k_tiles * 4 * WGMMA_BLOCK_N * 128 * 2 + hb * WGMMA_BLOCK_N * 2 + 4 * hb * 128 * 2


def wgmma_shared_bytes(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, hb: int) -> int:
    """Shared memory of a wgmma program taking `hb` heads (what the compiler reports, less its own
    scratch of 256-512 bytes: WGMMA_SHARED_SLACK): the four bf16 K chunks of a tile, P^T, the
    query's four chunks, and the stage buffers (two tiles of raw data rows and side rows: scales,
    and fp8_584's last 64 e4m3 bytes a key) of each list, or of both lists in turn where they hold
    one record format (see templates/decode_wgmma.py.j2)."""
    def stage(f: RecordFormat) -> int:
        row, side = _stage_rows(f)
        return 2 * WGMMA_BLOCK_N * (4 * row + side)
    c, w = get_format(comp_fmt), get_format(win_fmt)
    return _mma_bytes(hb, k_tiles=1) + stage(c) + (0 if c.name == w.name else stage(w))


def wgmma_heads(cfg: Config, heads: int, comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> int:
    """Heads a program of the wgmma path takes (its HB) for a launch of `heads`: 32 with two
    warpgroups where there are more than 16 and shared memory holds their query beside the
    pair's stage buffers (every pair `wgmma_reads` takes), else 16; the launch runs
    ceil(heads / HB) groups."""
    if cfg["num_warps"] == 8 and heads > WGMMA_HEADS and \
            wgmma_shared_bytes(comp_fmt, win_fmt, WGMMA_HEADS_2WG) + WGMMA_SHARED_SLACK <= SM90_SHARED_MAX:
        return WGMMA_HEADS_2WG
    return WGMMA_HEADS


def _region_bytes(c: RecordFormat, w: RecordFormat) -> int:
    """Both lists' stage buffers as the heads-on-M and warp-specialised builds hold them: one region
    of stage data rows (two tiles of the wider rows: a list of 64-byte e2m1 rows beside one of
    128-byte e4m3 rows takes every other half of it, its stage index doubled, so the hand-over
    tile's two stages never overlap) and each list's side rows (as many stages as its index
    reaches; one set for a pair of one format)."""
    (c_row, c_side), (w_row, w_side) = _stage_rows(c), _stage_rows(w)
    top = max(c_row, w_row)
    side = 2 * WGMMA_BLOCK_N * ((top // c_row) * c_side + (0 if c.name == w.name else (top // w_row) * w_side))
    return 8 * WGMMA_BLOCK_N * top + side


def wgmma_hm_shared_bytes(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> int:
    """Shared memory of a heads-on-M program: one tile's four bf16 K chunks, P[64 heads, 64 keys],
    the 64-head query and the stage region (`_region_bytes`; for a pair of one format the same
    bytes as the wgmma path's stage buffers)."""
    c, w = get_format(comp_fmt), get_format(win_fmt)
    return _mma_bytes(WGMMA_HM_HEADS, k_tiles=1) + _region_bytes(c, w)


def wgmma_hm_reads(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> bool:
    """Whether the heads-on-M build reads this pair: both lists' records on the wgmma path and its
    shared memory within sm_90's limit (the lists take the stage region in turn; two lists'
    buffers apart beside a 64-head query would not fit)."""
    c, w = get_format(comp_fmt), get_format(win_fmt)
    return wgmma_reads(c, w) and wgmma_hm_shared_bytes(c, w) + WGMMA_SHARED_SLACK <= SM90_SHARED_MAX


def wgmma_ws_shared_bytes(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> int:
    """Shared memory of a warp-specialised program (16 heads): two tiles' four bf16 K chunks, P^T,
    the query, the stage region (`_region_bytes`), and 64 bytes of the four mbarriers and the
    region's own (the compiler's count beyond the buffers: 488 bytes, fp8_584 and nvfp4_288 +
    fp8_528 alike, 2026-12-04)."""
    c, w = get_format(comp_fmt), get_format(win_fmt)
    return _mma_bytes(WGMMA_HEADS, k_tiles=2) + _region_bytes(c, w) + 64


def wgmma_ws_reads(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> bool:
    """Whether the warp-specialised build reads this pair: both lists' records on the wgmma path
    and its shared memory within sm_90's limit (nvfp4_288 + fp8_528 in either order: 225344 bytes;
    the V4 pair: 231488)."""
    c, w = get_format(comp_fmt), get_format(win_fmt)
    return wgmma_reads(c, w) and wgmma_ws_shared_bytes(c, w) + WGMMA_SHARED_SLACK <= SM90_SHARED_MAX


def wgmma_wsr_shared_bytes() -> int:
    """Shared memory of a register-producer warp-specialised program (16 heads), any pair: three
    tiles' four bf16 K chunks, each consumer warpgroup's P^T, the query (no stage buffers: its
    producers load the records into registers), and 1144 bytes of its thirteen mbarriers and the
    region's own state (the compiler's count beyond the buffers, both of issue 28's pairs,
    2026-12-08: 218232 bytes)."""
    return _mma_bytes(WGMMA_HEADS, k_tiles=3) + WGMMA_HEADS * WGMMA_BLOCK_N * 2 + 1144


def wgmma_hmws_shared_bytes() -> int:
    """Shared memory of a heads-on-M warp-specialised program, any pair: two tiles' four bf16 K
    chunks, P[64 heads, 64 keys], the 64-head query (no stage buffers: its producer loads the
    records into registers), and 804 bytes of its four mbarriers and the warp-specialised region's
    own state (what the compiler reported beyond the buffers for both of issue 28's pairs,
    2026-12-04: 205604 bytes)."""
    return _mma_bytes(WGMMA_HM_HEADS, k_tiles=2) + 804


def wgmma_hmpv_shared_bytes() -> int:
    """Shared memory of a program of the QK / PV split, any pair: `wgmma_hmws_shared_bytes`'s
    buffers with P double-buffered (the QK warpgroup writes the next tile's while the PV one
    reads this one's), the rescale factors of two tiles and O's final ones (fp32 a head), and 336
    bytes of the compiler's own (214096 bytes, 2026-12-05: O's stores go through the K tiles')."""
    return _mma_bytes(WGMMA_HM_HEADS, k_tiles=2) + WGMMA_HM_HEADS * WGMMA_BLOCK_N * 2 + 3 * WGMMA_HM_HEADS * 4 + 336


def wgmma_reads(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> bool:
    """Whether the wgmma path reads this record pair: both sides WGMMA_FORMATS, and a 16-head
    program's shared memory within sm_90's limit (not fp8_584 beside fp8_528: two lists' stage
    buffers of those)."""
    c, w = get_format(comp_fmt), get_format(win_fmt)
    return c.name in WGMMA_FORMATS and w.name in WGMMA_FORMATS and \
        wgmma_shared_bytes(c, w, WGMMA_HEADS) + WGMMA_SHARED_SLACK <= SM90_SHARED_MAX


def wgmma_legality(target: str) -> str | None:
    """Why the wgmma path cannot run on `target` (None: it can)."""
    if target == "sm_90":
        return None
    return WGMMA_ILLEGAL.get(target, "a Gluon kernel of Hopper operations: sm_90 only")
