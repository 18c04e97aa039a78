"""decode's cross-compile cases: decode_kernel per backend on the issue's record pairs and in its
split, separate, fused and prefetch builds, the wgmma path's decode_wgmma_kernel (and its
heads-on-M builds, decode_wgmma_hm_kernel..., and the 2-CTA cluster build of the QK / PV split), and
the merge decode_combine. Each signature is its
kernel's own parameter list (`tuner.kernels.signature`), typed by ARG_TYPES."""

from __future__ import annotations

from typing import Mapping

from catalog.core import Config
from catalog.families.decode import (ISSUE_PAIRS, MAX_SPLITS, PDL_TARGETS, cfg_backends, config_constexprs,
                                     default_config, render_variant, render_wgmma)
from catalog.families.decode_wgmma import (WGMMA_CLUSTER_CTAS, WGMMA_HEADS, WGMMA_HEADS_2WG, WGMMA_HM_HEADS,
                                           WGMMA_HM_WARPS, wgmma_reads)
from catalog.formats import RecordFormat, get_format
from tuner.kernels.base import XCompileCase
from tuner.kernels.decode.buffers import MERGE_MAX_PARTS
from tuner.kernels.decode.launch import combine_tile
from tuner.kernels.signature import kernel_signature

# Triton's type of each runtime parameter of the family's kernels (decode_kernel, decode_combine,
# decode_wgmma_kernel), by name; constexprs are the kernels' own.
ARG_TYPES: dict[str, str] = {
    "q_ptr": "*bf16", "comp_ptr": "*u8", "topk_ptr": "*i32", "win_ptr": "*u8", "widx_ptr": "*i32",
    "sink_ptr": "*fp32", "o_ptr": "*bf16", "lse_ptr": "*fp32", "part_o_ptr": "*fp32", "part_ml_ptr": "*fp32",
    "cnt_ptr": "*i32", "n_heads": "i32", "topk": "i32", "window": "i32", "comp_page_size": "i32",
    "comp_page_bytes": "i32", "win_page_size": "i32", "win_page_bytes": "i32", "stride_qt": "i32",
    "stride_qh": "i32", "stride_kt": "i32", "stride_wt": "i32", "comp_chunk": "i32", "win_chunk": "i32",
    "comp_splits": "i32", "tiles_per_prog": "i32", "n_split": "i32", "scale_log2": "fp32",
    "comp_len_ptr": "*i32", "win_len_ptr": "*i32", "comp_len_div": "i32", "win_len_div": "i32",
    "share_ws": "*bf16", "share_cnt": "*i32", "share_rdy": "*i32", "merge_cnt_ptr": "*i32",
}

CLUSTER_KERNEL = "decode_wgmma_hmpv_kernel"  # the cluster build's kernel (its own render)

# Multiples of 16 at the seed shape (16 heads, top-k 512, window 128, 64-record pages, contiguous q
# and index lists); the chunks depend on the split count.
ALIGNED_INTS: tuple[str, ...] = ("n_heads", "topk", "window", "comp_page_size", "comp_page_bytes", "win_page_size",
                                 "win_page_bytes", "stride_qt", "stride_qh", "stride_kt", "stride_wt")


def xcompile_cases() -> list[XCompileCase]:
    """Each backend on the issue's pairs (only `soft` where no side is e2m1), the split variant
    of the main kernel once, the two launches of LISTS=separate with COMBINE=fused (one list
    each, the arrival atomic and the in-kernel merge), PREFETCH on every record reader, the
    wgmma path on every issue pair it reads (and its split build once), and the combine kernel
    once."""
    cases: list[XCompileCase] = []
    for comp, win in ISSUE_PAIRS:
        cf, wf = get_format(comp), get_format(win)
        cfg = default_config(cf, wf)
        for backend in cfg_backends(cf, wf):
            cases.append(main_case(cf, wf, backend, cfg, split=False))
    cf, wf = get_format(ISSUE_PAIRS[0][0]), get_format(ISSUE_PAIRS[0][1])
    cfg = default_config(cf, wf)
    cases.append(main_case(cf, wf, "soft", cfg, split=True))
    for only in (1, 2):  # LISTS=separate with COMBINE=fused: each list's launch, the arrival atomic, the merge
        cases.append(main_case(cf, wf, "soft", cfg, split=True, apart=True, fused=True, only=only))
    # PREFETCH on the three record readers: nvfp4_288 and fp8_528, then fp8_584's bf16 tail.
    cases.append(main_case(cf, wf, "soft", cfg.replace(PREFETCH=1), split=True))
    f584 = get_format("fp8_584")
    cases.append(main_case(f584, f584, "soft", default_config(f584, f584).replace(PREFETCH=1), split=False))
    for comp, win in ISSUE_PAIRS:
        if wgmma_reads(comp, win):
            cases.append(wgmma_case(get_format(comp), get_format(win), split=False))
    cases.append(wgmma_case(cf, wf, split=True))
    cases.append(wgmma_case(cf, wf, split=True, heads=WGMMA_HEADS_2WG, warps=8))  # two warpgroups, 32 heads
    # COMBINE=fused on the heads-on-N builds: the token's programs merge their partials (atomics, the spin).
    cases.append(wgmma_case(cf, wf, split=True, merge=True))
    cases.append(wgmma_case(cf, wf, split=True, heads=WGMMA_HEADS_2WG, warps=8, merge=True))
    # The heads-on-M build (MMA=wgmma_hm: 64 heads a program, two warpgroups) on both of issue 28's
    # pairs (the V4.1 pair's lists in one stage region).
    cases.append(wgmma_case(f584, f584, split=True, heads=WGMMA_HM_HEADS, warps=WGMMA_HM_WARPS, heads_on_m=True))
    # ... and unsplit (NUM_SPLITS=1: o and lse straight from the kernel, its own epilogue branch).
    cases.append(wgmma_case(f584, f584, split=False, heads=WGMMA_HM_HEADS, warps=WGMMA_HM_WARPS, heads_on_m=True))
    cases.append(wgmma_case(cf, wf, split=True, heads=WGMMA_HM_HEADS, warps=WGMMA_HM_WARPS, heads_on_m=True))
    # The warp-specialised build (MMA=wgmma_ws: producer warps beside the consumer warpgroup) on it too.
    cases.append(wgmma_case(f584, f584, split=True, build="ws"))
    cases.append(wgmma_case(cf, wf, split=True, build="ws"))  # two formats: one region of stage rows
    cases.append(wgmma_case(cf, wf, split=True, build="ws", prefetch=True))  # its L2 prefetch (PREFETCH=1)
    cases.append(wgmma_case(cf, wf, split=True, build="ws", merge=True))
    # The heads-on-M warp-specialised build (MMA=wgmma_hmws: a producer warpgroup beside the
    # heads-on-M consumer), both pairs.
    cases.append(wgmma_case(f584, f584, split=True, heads=WGMMA_HM_HEADS, warps=WGMMA_HM_WARPS, heads_on_m=True,
                            build="ws"))
    cases.append(wgmma_case(cf, wf, split=True, heads=WGMMA_HM_HEADS, warps=WGMMA_HM_WARPS, heads_on_m=True, build="ws"))
    # Its QK / PV split (MMA=wgmma_hmpv), both pairs; and both builds with the producer's L2
    # prefetch of the next tile (PREFETCH=1), one pair each.
    for a, b in ((f584, f584), (cf, wf)):
        cases.append(wgmma_case(a, b, split=True, heads=WGMMA_HM_HEADS, warps=4, heads_on_m=True, build="pv"))
    cases.append(wgmma_case(f584, f584, split=True, heads=WGMMA_HM_HEADS, warps=WGMMA_HM_WARPS, heads_on_m=True,
                            build="ws", prefetch=True))
    cases.append(wgmma_case(cf, wf, split=True, heads=WGMMA_HM_HEADS, warps=4, heads_on_m=True, build="pv",
                            prefetch=True))
    # The builds sharing each tile between the head groups (MMA=wgmma_hmpvs, wgmma_wss), the V4 pair.
    cases.append(wgmma_case(f584, f584, split=True, heads=WGMMA_HM_HEADS, warps=4, heads_on_m=True, build="pv",
                            prefetch=True, share=True))
    cases.append(wgmma_case(f584, f584, split=True, build="ws", share=True))
    # The 2-CTA cluster build of the QK / PV split (MMA=wgmma_hmpvc, num_ctas=2), both pairs.
    for a, b in ((f584, f584), (cf, wf)):
        cases.append(cluster_case(a, b, split=True))
    # The merge: as every split launch has it, and as the wgmma path's programmatic dependent
    # (griddepcontrol.wait: NVIDIA sm_90 and later only).
    for pdl in (False, True):
        cases.append(combine_case(cf, wf, pdl))
    return cases


def combine_case(cf: RecordFormat, wf: RecordFormat, pdl: bool) -> XCompileCase:
    """decode_combine at MAX_SPLITS partials of 16 heads, as a split launch merges them."""
    rendered = render_variant(cf, wf, "soft")
    block_d, warps = combine_tile(MAX_SPLITS, 16)
    return XCompileCase(
        variant="soft", rendered=rendered, kernel_name="decode_combine",
        signature=kernel_signature(rendered, "decode_combine", ARG_TYPES),
        constexprs={"BLOCK_H": 16, "BLOCK_S": MAX_SPLITS, "BLOCK_D": block_d, "HAS_SINK": True, "PDL": pdl},
        num_warps=warps, num_stages=1, detail="combine" + (" pdl" if pdl else ""),
        only_targets=PDL_TARGETS if pdl else (),
    )


def wgmma_case(cf: RecordFormat, wf: RecordFormat, split: bool, heads: int = WGMMA_HEADS, warps: int = 4,
               heads_on_m: bool = False, build: str = "", prefetch: bool = False, trace: bool = False,
               share: bool = False, merge: bool = False) -> XCompileCase:
    """A kernel of the wgmma template: `heads_on_m` the heads-on-M build, `build="ws"` the
    warp-specialised one (16 heads, the consumer's 4 warps), `build="ws"` with `heads_on_m` the
    heads-on-M warp-specialised one (64 heads, the consumer's 8 warps), `build="wsr"` the
    warp-specialised one with two register-loading producers and three K buffers (16 heads), `build="pv"` with
    `heads_on_m` the one whose consumer splits into a QK and a PV warpgroup (64 heads, 4 warps);
    `prefetch` (the warp-specialised builds) their producer's L2 prefetch of the tiles ahead;
    `trace`: the template's trace build (benchmarks/decode_timeline.py), with its last argument;
    `merge` (heads on N, split): the token's programs merging their 16 partials themselves (MERGE)."""
    rendered = render_wgmma(cf, wf, trace=trace)
    name = {(True, "ws"): "decode_wgmma_hmws_kernel", (True, ""): "decode_wgmma_hm_kernel",
            (True, "pv"): "decode_wgmma_hmpv_kernel",
            (False, "ws"): "decode_wgmma_ws_kernel", (False, "wsr"): "decode_wgmma_wsr_kernel",
            (False, ""): "decode_wgmma_kernel"}[(heads_on_m, build)]
    return XCompileCase(
        variant="wgmma",
        rendered=rendered,
        kernel_name=name,
        signature=kernel_signature(rendered, name, {**ARG_TYPES, "trace_ptr": "*i64"} if trace else ARG_TYPES),
        constexprs={"HB": heads, "COMP_SHIFT": 6, "WIN_SHIFT": 6, "SPLIT": split, "HAS_SINK": True, "num_warps": warps,
                    **({"PREFETCH": prefetch} if build and build != "wsr" else {}),
                    **({"SHARE": share} if build == "pv" or (build == "ws" and not heads_on_m) else {}),
                    **({} if heads_on_m or build == "wsr" else {"MERGE": merge, "MERGE_S": MERGE_MAX_PARTS if merge else 1})},
        num_warps=warps,
        num_stages=1,
        detail=f"{cf.name}+{wf.name}" + (" split" if split else "") + (f" {heads} heads {warps} warps" if warps != 4 else "")
        + (" heads on M" if heads_on_m else "") + (" warp-specialised" if build == "ws" else "")
        + (" warp-specialised, register producers" if build == "wsr" else "")
        + (" warp-specialised QK/PV" if build == "pv" else "")
        + (" prefetch" if prefetch else "")
        + (" merged in kernel" if merge else "")
        + (" shared tiles" if share else "")
        + (" trace" if trace else ""),
        aligned_ints=ALIGNED_INTS,
    )


def cluster_case(cf: RecordFormat, wf: RecordFormat, split: bool, prefetch: bool = True, has_sink: bool = True,
                 comp_shift: int = 6, win_shift: int = 6, offsets: Mapping[str, Mapping[str, int]] | None = None,
                 trace: bool = False) -> XCompileCase:
    """The 2-CTA cluster build of the QK / PV split (MMA=wgmma_hmpvc, num_ctas=2; see
    tuner/kernels/decode/cluster.py): `offsets` the catalog's unless given (cluster.ZERO_OFFSETS to
    place the buffers: `cluster.placed_offsets`); `trace`: the trace build (decode_timeline.py)."""
    rendered = render_wgmma(cf, wf, trace=trace, cluster=True, offsets=offsets)
    return XCompileCase(
        variant="wgmma", rendered=rendered, kernel_name=CLUSTER_KERNEL,
        signature=kernel_signature(rendered, CLUSTER_KERNEL, {**ARG_TYPES, "trace_ptr": "*i64"} if trace else ARG_TYPES),
        constexprs={"HB": WGMMA_HM_HEADS, "COMP_SHIFT": comp_shift, "WIN_SHIFT": win_shift, "SPLIT": split,
                    "HAS_SINK": has_sink, "num_warps": 4, "PREFETCH": prefetch, "SHARE": False},
        num_warps=4, num_stages=1, num_ctas=WGMMA_CLUSTER_CTAS,
        detail=f"{cf.name}+{wf.name}" + (" split" if split else "") + " 2-CTA cluster QK/PV"
        + (" prefetch" if prefetch else "") + (" trace" if trace else ""),
        aligned_ints=ALIGNED_INTS,
    )


def main_case(cf: RecordFormat, wf: RecordFormat, backend: str, cfg: Config, split: bool,
              apart: bool = False, fused: bool = False, only: int = 0) -> XCompileCase:
    splits = 8 if split else 1  # only names the case: split counts are runtime ints
    detail = f"{cf.name}+{wf.name}" + (f" split{splits}" if split and not (apart or fused) else "")
    detail += (" apart" if apart else "") + (" fused" if fused else "")
    detail += {0: "", 1: " separate comp", 2: " separate win"}[only] + (" prefetch" if cfg.get("PREFETCH") else "")
    rendered = render_variant(cf, wf, backend)
    return XCompileCase(
        variant=backend,
        rendered=rendered,
        kernel_name="decode_kernel",
        signature=kernel_signature(rendered, "decode_kernel", ARG_TYPES),
        constexprs={"BLOCK_H": 16, "BLOCK_S": MAX_SPLITS, "SPLIT": split,
                    "APART": apart, "ONLY": only, "FUSED": fused, "HAS_SINK": True,
                    "STATIC_TRIPS": False, "COMP_CHUNK": 0, "WIN_CHUNK": 0, "N_PARTS": 0, "UPCAST": False,
                    **config_constexprs(cfg)},
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        detail=detail,
        aligned_ints=ALIGNED_INTS,
    )
