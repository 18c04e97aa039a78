"""decode: the sparse attention decode tile's catalog face. Its key is (compressed record, window
record) at a head count, top-k and window; its space covers the Triton tile (heads or keys on the
MMA's M side, splits, the two lists' layouts, prefetch) and sm_90's wgmma path (Gluon kernels of
their own template that fix most of the tile; its builds and their limits: `decode_wgmma`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from catalog.codecs import E2M1_READ_BACKENDS, e2m1_backend_legality
from catalog.core import Bucket, Config, ProblemKey
from catalog.families.base import FamilySpec
from catalog.families.decode_wgmma import (WGMMA_BLOCK_N, WGMMA_CLUSTER_MMAS, WGMMA_CLUSTER_OFFSETS, WGMMA_FORMATS,
                                           WGMMA_HEADS, WGMMA_HEADS_2WG, WGMMA_MERGE_BACKEND, WGMMA_MMAS, WGMMA_TEMPLATE, is_wgmma, wgmma_config,
                                           wgmma_fits, wgmma_hm_reads, wgmma_legality, wgmma_reads, wgmma_ws_reads)
from catalog.formats import RecordFormat, get_format
from catalog.space import Param, Space
from templates import render as R

TEMPLATE = "decode_tile.py.j2"

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
            return wgmma_fits(c, comp_fmt, win_fmt, heads)
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


def render_wgmma(comp_fmt: str | RecordFormat, win_fmt: str | RecordFormat, trace: bool = False,
                 cluster: bool = False, offsets: Mapping[str, Mapping[str, int]] | None = None) -> R.Rendered:
    """The wgmma path's module; `trace`: with timeline probes (benchmarks/decode_timeline.py);
    `cluster`: the module of the 2-CTA cluster build (MMA=wgmma_hmpvc; every layout replicated on
    both CTAs, its kernels compile and launch with num_ctas=2 only), reaching the peer's buffers at
    `offsets` ({"whole": {"kv", "ready", "pfree"}, "split": ...}, without SPLIT and with it; the
    catalog's WGMMA_CLUSTER_OFFSETS unless given)."""
    c, w = _fmt512(comp_fmt), _fmt512(win_fmt)
    if not wgmma_reads(c, w):
        raise ValueError(f"the wgmma path reads {list(WGMMA_FORMATS)} records, not {c.name} + {w.name}")
    placed = {k: dict(v) for k, v in (offsets or WGMMA_CLUSTER_OFFSETS).items()} if cluster else False
    return R.render(WGMMA_TEMPLATE, {"comp": c, "win": w, "trace": trace, "cluster": placed})


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
        """The wgmma path where it runs (sm_90, records it reads), since a few TPE trials may not
        draw it (8 of a T=1 tune did not: tune_decode_wgmma_h200.log). A search measures these
        right after the default, in the order the recorded tunes picked them (benchmarks/results/
        tune_decode_h*.json, 8-128 heads): the one-warpgroup build (T=1-4), the warp-specialised
        one (T=2-64 at 16-64 heads, T=2-16 above), above 32 heads the QK / PV split with PREFETCH=1
        (T=17-64), above 16 the two-warpgroup build and the merge in the kernel (a bucket or two
        each). A tune cut short by its time budget then still measures the likely winners."""
        if wgmma_legality(target) or not wgmma_reads(*key.formats):
            return []
        seed = wgmma_config(default_config(*key.formats))
        seeds = [seed]
        if wgmma_ws_reads(*key.formats):
            seeds.append(wgmma_config(seed.replace(MMA="wgmma_ws")))
        # 64 heads a program on M, PV split from QK, records into L2 a tile ahead (3-7% faster at
        # T = 64: decode_hm_prefetch2_h200.md). Its siblings wgmma_hm and wgmma_hmws stay in the
        # space unseeded: no tune since the split landed picked either.
        if key.heads > WGMMA_HEADS_2WG and wgmma_hm_reads(*key.formats):
            seeds.append(wgmma_config(seed.replace(MMA="wgmma_hmpv", PREFETCH=1)))
        # More heads than one warpgroup's 16: two warpgroups of 32 heads, and the token's programs
        # merging their partials themselves (COMBINE=fused: the 128-head H200 tune's T=3-4 pick
        # before decode_combine's 16-dim slices, 0.3-0.5 us ahead at T=8 after them on an H100;
        # benchmarks/results/merge_in_kernel/).
        if key.heads > WGMMA_HEADS:
            seeds += [seed.replace(num_warps=8), seed.replace(COMBINE="fused")]
        return seeds

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        return list(DECODE_BUCKETS)

    def render(self, key: ProblemKey, config: Config) -> R.Rendered:
        if is_wgmma(config):
            return render_wgmma(key.formats[0], key.formats[1], cluster=config["MMA"] in WGMMA_CLUSTER_MMAS)
        return render_variant(key.formats[0], key.formats[1], config["backend"])

    def modules(self, key: ProblemKey, config: Config) -> list[R.Rendered]:
        """The wgmma kernel's module and the Triton module whose decode_combine merges its splits."""
        if is_wgmma(config):
            return [self.render(key, config), render_variant(*key.formats, WGMMA_MERGE_BACKEND)]
        return [self.render(key, config)]

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        return decode_bytes(key.formats[0], key.formats[1], bucket.rep, key.heads, key.topk, key.window)


SPEC = DecodeSpec()
