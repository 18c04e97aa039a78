"""decode: the sparse attention decode tile's catalog face. Its key is (compressed record, window
record) at a head count, top-k and window; its space covers the Triton tile (heads or keys on the
MMA's M side, splits, the two lists' layouts, prefetch) and sm_90's wgmma path (a Gluon kernel of
its own template that fixes most of the tile)."""

from __future__ import annotations

from typing import Any, Sequence

from catalog.codecs import E2M1_READ_BACKENDS, e2m1_backend_legality
from catalog.core import Bucket, Config, ProblemKey
from catalog.families.base import FamilySpec
from catalog.formats import RecordFormat, get_format
from catalog.space import Param, Space
from templates import render as R

TEMPLATE = "decode_tile.py.j2"

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
# MMA=wgmma_hmpvs: it with each tile converted once for both 64-head groups of 65-128 heads (the template's
# `_share_put` / `_share_get`: the other copies it through L2). CPU-compiled only so far: not seeded.

# The warp-specialised builds take PREFETCH (0 elsewhere on the wgmma path): 1 prefetches records
# into L2 a tile further ahead than the producer loads them (benchmarks/README.md, "L2 prefetch").
# On the H200 (2026-12-05) 3-7% faster at T = 64, 0-1 us slower at T <= 8: searched (the QK / PV
# split's seed takes it).
WGMMA_PREFETCH_MMAS: tuple[str, ...] = ("wgmma_ws", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmpvs")

# The MMA values of the wgmma path, all above: "wgmma" (keys on the MMAs' M, 16 or 32 heads a program
# on N), "wgmma_hm" (64 heads a program on M, each tile dequantized once per 64 heads; every pair whose
# buffers fit: `wgmma_hm_reads`), "wgmma_ws", "wgmma_hmws", "wgmma_hmpv" and "wgmma_hmpvs". One
# template renders their five kernels.
WGMMA_MMAS: tuple[str, ...] = ("wgmma", "wgmma_hm", "wgmma_ws", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmpvs")
# The builds with 64 heads a program on the MMAs' M.
WGMMA_HM_MMAS: tuple[str, ...] = ("wgmma_hm", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmpvs")
# Each build's warps (the consumer's, or the QK warpgroup's); "wgmma" keeps its own 4 or 8.
WGMMA_BUILD_WARPS: dict[str, int] = {"wgmma_hm": WGMMA_HM_WARPS, "wgmma_ws": WGMMA_WS_WARPS, "wgmma_hmws": WGMMA_HMWS_WARPS,
                                     "wgmma_hmpv": WGMMA_HMPV_WARPS, "wgmma_hmpvs": WGMMA_HMPV_WARPS}


def is_wgmma(cfg: Config | dict[str, Any]) -> bool:
    """Whether `cfg` runs on the wgmma path (either of its builds)."""
    return cfg.get("MMA") in WGMMA_MMAS


WGMMA_ILLEGAL: dict[str, str] = {
    "interp": "a Gluon kernel: Triton's interpreter does not run Gluon",
    "sm_100": "Hopper's warpgroup MMA (wgmma); sm_100 has tcgen05 in its place",
    "gfx942": "a Gluon kernel of NVIDIA Hopper operations (wgmma, PTX prmt)",
    "gfx950": "a Gluon kernel of NVIDIA Hopper operations (wgmma, PTX prmt)",
}

# Targets with programmatic dependent launch (griddepcontrol; NVIDIA sm_90 and later): the wgmma
# path launches its merge as a dependent grid.
PDL_TARGETS: tuple[str, ...] = ("sm_90", "sm_100")

DECODE_FORMATS: tuple[str, ...] = ("nvfp4_288", "fp8_528", "fp8_584")

# The record pairs the issue names (compressed, window); the cross-compile table covers these.
ISSUE_PAIRS: tuple[tuple[str, str], ...] = (("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584"), ("fp8_528", "nvfp4_288"))

MAX_HEADS = 64  # the Triton tile: its accumulator is [heads, 512] fp32 a program; more would not fit in registers
# sm_90's wgmma path takes its heads in groups (`wgmma_heads`), so any count; keys go up to this.
WGMMA_MAX_HEADS = 128

MAX_SPLITS = 32

AUTO = 0  # NUM_SPLITS = 0: the launcher picks the split count from T and the SM count


def _fmt512(fmt: str | RecordFormat) -> RecordFormat:
    f = get_format(fmt)
    if f.name not in DECODE_FORMATS:
        raise ValueError(f"the decode tile reads 512-dim records {list(DECODE_FORMATS)}, not {f.name}")
    return f


def check_formats(comp_fmt: str, win_fmt: str) -> None:
    """ValueError unless the tile reads both records (what `catalog.keys.make_key` checks)."""
    _fmt512(comp_fmt)
    _fmt512(win_fmt)


def check_heads(heads: int, arch: str | None = None, formats: Sequence[str] | None = None) -> None:
    """ValueError unless a kernel takes `heads` local heads on `arch` for the record pair `formats`
    (what `catalog.keys.make_key` checks): a key no kernel can launch would be tuned only to fail
    every trial. Up to MAX_HEADS everywhere (the Triton tile); up to WGMMA_MAX_HEADS where the
    wgmma path runs (sm_90, the pairs it reads), whose space then holds that path alone."""
    if 1 <= heads <= MAX_HEADS:
        return
    if heads <= WGMMA_MAX_HEADS and arch is not None and formats is not None and wgmma_legality(arch) is None \
            and wgmma_reads(*formats):
        return
    raise ValueError(f"decode takes 1..{MAX_HEADS} local heads (the Triton tile keeps a [heads, 512] fp32 "
                     f"accumulator a program), and up to {WGMMA_MAX_HEADS} on sm_90's wgmma path for "
                     f"{' / '.join(WGMMA_FORMATS)} records, got {heads}")


def has_e2m1(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> bool:
    return get_format(comp_fmt).elem == "e2m1" or get_format(win_fmt).elem == "e2m1"


def _wgmma_fits(c: Config, comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, heads: int) -> str | None:
    """Why the wgmma path cannot run `c` for this pair at `heads` (None: it can)."""
    if not wgmma_reads(comp_fmt, win_fmt):
        return f"the wgmma path reads {list(WGMMA_FORMATS)} records (no bf16 dims)"
    if c["MMA"] == "wgmma_hm" and not wgmma_hm_reads(comp_fmt, win_fmt):
        return (f"the heads-on-M build's buffers for {get_format(comp_fmt).name} + "
                f"{get_format(win_fmt).name} exceed sm_90's shared memory")
    if c["MMA"] == "wgmma_hmws" and wgmma_hmws_shared_bytes() + WGMMA_SHARED_SLACK > SM90_SHARED_MAX:
        return "the heads-on-M warp-specialised build's buffers exceed sm_90's shared memory"
    if c["MMA"] in ("wgmma_hmpv", "wgmma_hmpvs") and wgmma_hmpv_shared_bytes() + WGMMA_SHARED_SLACK > SM90_SHARED_MAX:
        return "the QK / PV split build's buffers exceed sm_90's shared memory"
    if c["MMA"] == "wgmma_hmpvs" and not WGMMA_HM_HEADS < heads <= 2 * WGMMA_HM_HEADS:
        return f"tiles are shared between two 64-head groups: 65-128 heads, not {heads}"
    if c["MMA"] == "wgmma_ws" and not wgmma_ws_reads(comp_fmt, win_fmt):
        return (f"the warp-specialised build's buffers for {get_format(comp_fmt).name} + "
                f"{get_format(win_fmt).name} exceed sm_90's shared memory")
    want = wgmma_config(c)
    off = [k for k, v in want.as_dict().items() if c[k] != v]
    return f"the wgmma path runs {', '.join(f'{k}={want[k]}' for k in off)}" if off else None


def space(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, heads: int = 16) -> Space:
    """The decode search space for one record pair at `heads` local heads. The e2m1 backend is an
    axis only where a side has e2m1 elements (elsewhere the rendered module has no e2m1 code).
    Past MAX_HEADS only the wgmma path runs (`check_heads`): it is the default, and the Triton
    tile's configs are infeasible."""
    backends = E2M1_READ_BACKENDS if has_e2m1(comp_fmt, win_fmt) else ("soft",)
    wide = heads > MAX_HEADS
    if wide and not wgmma_reads(comp_fmt, win_fmt):
        raise ValueError(f"{heads} heads run on the wgmma path only, which reads {list(WGMMA_FORMATS)} records")

    def _fits(c: Config) -> str | None:
        if wide and not is_wgmma(c):
            return f"the Triton tile takes at most {MAX_HEADS} heads ({heads} here): MMA=wgmma or wgmma_hm"
        if is_wgmma(c):
            return _wgmma_fits(c, comp_fmt, win_fmt, heads)
        # fp32 K tiles double the shared memory and registers of the dot operands.
        if c["DOT"] == "fp32" and c["BLOCK_N"] > 32:
            return "fp32 dot operands with BLOCK_N > 32 exceed shared memory"
        if c["BLOCK_N"] == 64 and c["num_warps"] < 8:
            return "a 64-key block of 512 dims needs 8 warps (it spills heavily at 4)"
        if c["BLOCK_N"] == 16 and c["MMA"] == "heads_m" and has_e2m1(comp_fmt, win_fmt):
            # Wrong on sm_90 with Triton 3.6, right under the interpreter: relative errors of
            # 0.1-0.9 at every DOT, num_warps and split with e2m1 records, while BLOCK_N 32 and the
            # keys-on-M product are exact to bf16 (benchmarks/results/diag_decode.log).
            return "BLOCK_N=16 with heads on M miscompiles with e2m1 records (wrong results on sm_90)"
        return None

    return Space(
        params=(
            Param("backend", backends, "soft", render=True),
            Param("BLOCK_N", (16, 32, 64), WGMMA_BLOCK_N if wide else 32),
            Param("NUM_SPLITS", (AUTO, 1, 2, 4, 8, 16, 32), AUTO),
            # How grid axis 1 covers the two key lists (see split_plan): "both" = every program
            # walks a share of each list, one after the other; "apart" = each program walks a chunk
            # of one list, so the window list's gather rounds run beside the compressed list's.
            # "apart" always writes partials, even at one split. "separate": the chunks of "apart",
            # but one launch per list, each kernel compiled for its list alone (the two readers in
            # one kernel share one register allocation: on sm_90 the nvfp4_288 + fp8_528 default
            # spills ~1 KB that way, and neither list's kernel spills alone; static ptxas counts).
            Param("LISTS", ("both", "apart", "separate"), "both"),
            # Who merges the partials: a second launch (decode_combine) or, "fused", the token's
            # last program to finish (an int32 arrival counter per token; see `decode`'s counters).
            # No constraint ties COMBINE to the split count: where a launch writes no partials
            # (LISTS=both with one split, given or AUTO) the launcher ignores it. That leaves one
            # duplicate slice in the grid (NUM_SPLITS=1, LISTS=both, COMBINE=fused), but keeps every
            # config valid at every T, which AUTO needs anyway (it resolves to one split at large T).
            Param("COMBINE", ("kernel", "fused"), "kernel"),
            Param("DOT", ("bf16", "fp32"), "bf16"),
            # keys_m puts the keys on tl.dot's M side; wgmma is the Gluon kernel of sm_90 (keys on
            # M, query and P from shared memory, async warpgroup MMAs; WGMMA_FIXED), wgmma_hm its
            # heads-on-M build (64 heads a program: ahead where many heads share each tile, as 128
            # heads at T=64 on the H200: benchmarks/results/decode_hm_h200.md).
            Param("MMA", ("heads_m", "keys_m") + WGMMA_MMAS, "wgmma" if wide else "heads_m"),
            # 1: each block's slots and records are loaded one block early, before the previous
            # block's dots (the slot -> record -> dot chain of a block is otherwise serial: Triton
            # does not pipeline loads whose addresses come from other loads); WGMMA_PREFETCH_MMAS above.
            Param("PREFETCH", (0, 1), 0),
            # The defaults (BLOCK_N 32, heads on M, 8 warps, 1 stage, automatic splits) are those
            # the recorded decode table (tables/decode.json) was measured with, and a table's space
            # must keep its default. Tuned configs carry what beats them: PREFETCH=1 at every T,
            # with LISTS=apart at small T and 64-key blocks at large T (benchmarks/results/decode.md).
            Param("num_warps", (4, 8), 8),
            Param("num_stages", (1, 2, 3), 1),
        ),
        constraints=(_fits,),
    )


def default_config(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> Config:
    return space(comp_fmt, win_fmt).default()


def config_constexprs(config: Config) -> dict[str, Any]:
    """The Triton decode_kernel's constexprs that come from a config, under the kernel's names: what
    the launcher passes and the cross-compiler builds, from this one place. MMA="keys_m" is SWAP
    (keys on the MMA's M side: the transposed product), DOT="fp32" is DOT_FP32. The rest of the
    kernel's constexprs follow the call (heads, the split plan, sinks), not the config."""
    return {"BLOCK_N": config["BLOCK_N"], "DOT_FP32": config["DOT"] == "fp32", "SWAP": config["MMA"] == "keys_m",
            "PREFETCH": bool(config.get("PREFETCH", 0))}


def render_variant(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, backend: str) -> R.Rendered:
    c, w = _fmt512(comp_fmt), _fmt512(win_fmt)
    if backend not in E2M1_READ_BACKENDS:
        raise ValueError(f"unknown e2m1 backend {backend!r}; known: {list(E2M1_READ_BACKENDS)}")
    if not has_e2m1(c, w):
        backend = "soft"  # nothing to decode: every backend renders the same module
    return R.render(TEMPLATE, {"comp": c, "win": w, "e2m1_backend": backend})


def wgmma_config(cfg: Config) -> Config:
    """`cfg` on the wgmma path: its build (MMA=wgmma, or wgmma_hm if it is one already) with the
    parameters the path fixes (WGMMA_FIXED; the backend axis at its default, "soft": the kernel's
    e2m1 lookups are its own). It keeps its split count (NUM_SPLITS, see `wgmma_plan`) and, if it
    is already a wgmma config, its warps (4 or 8: one warpgroup or two; the heads-on-M build runs
    WGMMA_HM_WARPS, the warp-specialised one WGMMA_WS_WARPS); another config comes onto the path
    with the seed's 4. The builds of WGMMA_PREFETCH_MMAS keep its PREFETCH too."""
    mma = cfg["MMA"] if is_wgmma(cfg) else "wgmma"
    warps = WGMMA_BUILD_WARPS.get(mma, cfg["num_warps"] if is_wgmma(cfg) else WGMMA_WARPS)
    fixed = {k: v for k, v in WGMMA_FIXED.items() if not (k == "PREFETCH" and mma in WGMMA_PREFETCH_MMAS)}
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


def render_wgmma(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, trace: bool = False) -> R.Rendered:
    """The wgmma path's module; `trace`: with timeline probes (benchmarks/decode_timeline.py)."""
    c, w = _fmt512(comp_fmt), _fmt512(win_fmt)
    if not wgmma_reads(c, w):
        raise ValueError(f"the wgmma path reads {list(WGMMA_FORMATS)} records, not {c.name} + {w.name}")
    return R.render(WGMMA_TEMPLATE, {"comp": c, "win": w, "trace": trace})


def wgmma_legality(target: str) -> str | None:
    """Why the wgmma path cannot run on `target` (None: it can)."""
    if target == "sm_90":
        return None
    return WGMMA_ILLEGAL.get(target, "a Gluon kernel of Hopper operations: sm_90 only")


def decode_bytes(comp_fmt: str, win_fmt: str, n_tokens: int, heads: int, topk: int, window: int) -> int:
    """Bytes one launch must move with full key lists: records, slot lists, q, o, lse, sink."""
    cf, wf = get_format(comp_fmt), get_format(win_fmt)
    per_token = topk * (cf.bytes_per_token + 4) + window * (wf.bytes_per_token + 4) + heads * (512 * 2 * 2 + 4)
    return n_tokens * per_token + heads * 4

DECODE_BUCKETS = tuple(Bucket("T", lo, hi) for lo, hi in ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64)))

DECODE_PAGE_SIZE = 64


def decode_key(comp_fmt: str, win_fmt: str, arch: str, heads: int = 16, topk: int = 512, window: int = 128) -> ProblemKey:
    return ProblemKey(kernel="decode", arch=arch, heads=heads, topk=topk, window=window,
                      formats=(comp_fmt, win_fmt), head_dim=512)


def cfg_backends(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat) -> tuple[str, ...]:
    """The e2m1 backends the pair's space searches (its `backend` axis)."""
    return tuple(space(comp_fmt, win_fmt).params[0].choices)


class DecodeSpec(FamilySpec):
    name = "decode"
    template = TEMPLATE

    def variants(self) -> Sequence[str]:
        return E2M1_READ_BACKENDS + ("wgmma",)

    def legality(self, variant: str, target: str) -> str | None:
        # The fp8 readers use Triton's fp8e4nv conversion, which every GPU target lowers; the only
        # target-specific code is the e2m1 decode backend, and the wgmma path (sm_90's Gluon kernel).
        if variant == "wgmma":
            return wgmma_legality(target)
        return e2m1_backend_legality(variant, target)

    def variant_of(self, config: Config) -> str:
        return "wgmma" if is_wgmma(config) else str(config["backend"])

    def space(self, key: ProblemKey) -> Space:
        return space(*key.formats, heads=key.heads)

    def canonical_config(self, key: ProblemKey, config: Config) -> Config:
        """A wgmma sample runs with the parameters the path fixes (`wgmma_config`), whatever it drew
        for them: otherwise a search would almost never draw the one feasible combination."""
        return wgmma_config(config) if is_wgmma(config) else config

    def seed_configs(self, key: ProblemKey, target: str) -> list[Config]:
        """The wgmma path where it runs (sm_90, records it reads): a search measures it second (and,
        above 16 heads, its two-warpgroup build third; above 32 the heads-on-M build, its warp-specialised
        one and the QK / PV split with PREFETCH=1 next; where its buffers fit, the warp-specialised build
        last), since a few TPE trials may not draw it (8 of a T=1 tune did not: tune_decode_wgmma_h200.log)."""
        if wgmma_legality(target) or not wgmma_reads(*key.formats):
            return []
        seed = wgmma_config(default_config(*key.formats))
        # More heads than one warpgroup's 16: two warpgroups of 32 heads as well.
        seeds = [seed] + ([seed.replace(num_warps=8)] if key.heads > WGMMA_HEADS else [])
        # More than a two-warpgroup program's 32: 64 heads a program on M, its warp-specialised build
        # and its QK / PV split, with PREFETCH=1 (3-7% faster at T = 64: decode_hm_prefetch2_h200.md).
        if key.heads > WGMMA_HEADS_2WG and wgmma_hm_reads(*key.formats):
            seeds += [wgmma_config(seed.replace(MMA=m)) for m in ("wgmma_hm", "wgmma_hmws")]
            seeds.append(wgmma_config(seed.replace(MMA="wgmma_hmpv", PREFETCH=1)))
        # The warp-specialised build, last (it wins on programs of several tiles, and loses at
        # one: the search sees both).
        if wgmma_ws_reads(*key.formats):
            seeds.append(wgmma_config(seed.replace(MMA="wgmma_ws")))
        return seeds

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        return list(DECODE_BUCKETS)

    def render(self, key: ProblemKey, config: Config) -> R.Rendered:
        if is_wgmma(config):
            return render_wgmma(key.formats[0], key.formats[1])
        return render_variant(key.formats[0], key.formats[1], config["backend"])

    def modules(self, key: ProblemKey, config: Config) -> list[R.Rendered]:
        """The wgmma kernel's module and the Triton module whose decode_combine merges its splits."""
        if is_wgmma(config):
            return [render_wgmma(*key.formats), render_variant(*key.formats, WGMMA_MERGE_BACKEND)]
        return [self.render(key, config)]

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        return decode_bytes(key.formats[0], key.formats[1], bucket.rep, key.heads, key.topk, key.window)


SPEC = DecodeSpec()
