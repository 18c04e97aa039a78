"""logits' cross-compile cases: every variant on the formats it reads at the seed shape, and the
builds of the tile's other axes (prefill, MMA orientation, PREFETCH, descriptor loads). Each
signature is its kernel's own parameter list (`tuner.kernels.signature`), typed by `arg_types`."""

from __future__ import annotations

from catalog.core import Config
from catalog.families.logits import (BASE_VARIANTS, DECODING_DOTS, E2M1_ONLY_DOTS, KEY_SCALED_DOTS, LOGITS_FORMATS,
                                     MXFP4_Q, MXFP4Q_VARIANTS, SEED_HEADS, SEED_PAGE, WGMMA_BLOCK_N, WGMMA_DESC_TYPE,
                                     default_config, desc_box, dot_config, kernel_constexprs, parse_variant,
                                     render_variant, scale_desc, variant_name)
from catalog.formats import get_format, page_bytes
from tuner.kernels.base import XCompileCase
from tuner.kernels.signature import kernel_signature

# Triton's pointer type of each query dtype (an MXFP4 query's values; its scales are qs_ptr's).
Q_TYPES: dict[str, str] = {"bf16": "*bf16", "fp8": "*fp8e4nv", "mxfp4": "*u8"}

# Page bytes are a multiple of 16 at every page size (16 to 256 records of 68 or 132 B); so are the
# seed's context (64K), page count and batch.
ALIGNED_INTS: tuple[str, ...] = ("page_bytes", "max_len", "max_pages", "n_tokens")


def arg_types(q_dtype: str, k_desc: str = "*u8", s_desc: str = "*u8") -> dict[str, str]:
    """Triton's type of each runtime parameter of logits_kernel and logits_wgmma_kernel, by name:
    the query's by its dtype, the descriptors' as the launch passes them (the cache again where it
    loads no tile by descriptor)."""
    return {
        "q_ptr": Q_TYPES[q_dtype], "qs_ptr": "*u8", "w_ptr": "*fp32", "cache_ptr": "*u8", "k_desc": k_desc, "s_desc": s_desc,
        "bt_ptr": "*i32", "seq_ptr": "*i32", "ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32",
        "n_tokens": "i32", "max_len": "i32", "max_pages": "i32", "page_bytes": "i32",
    }


def _wgmma_xcompile_case(cfg: Config, detail: str) -> XCompileCase:
    """The wgmma path (mxfp4_68, fp8 query) at the seed shape."""
    rendered = render_variant("mxfp4_68", "wgmma")
    return XCompileCase(
        variant="wgmma",
        rendered=rendered,
        kernel_name="logits_wgmma_kernel",
        signature=kernel_signature(rendered, "logits_wgmma_kernel", arg_types("fp8", k_desc=WGMMA_DESC_TYPE)),
        constexprs={"HI": SEED_HEADS, "PAGE": SEED_PAGE, "BLOCK_N": WGMMA_BLOCK_N, "TILES": cfg["TILES"],
                    "NBUF": cfg["num_stages"], "num_warps": 4},
        num_warps=4,
        num_stages=cfg["num_stages"],
        detail=detail,
        aligned_ints=ALIGNED_INTS,
    )


def _xcompile_case(fmt: str, dot: str, backend: str, q_dtype: str, cfg: Config, detail: str) -> XCompileCase:
    """One build of a config at the seed shape (the wgmma path's where `dot` is wgmma)."""
    if dot == "wgmma":
        return _wgmma_xcompile_case(cfg, detail)
    f = get_format(fmt)
    consts = kernel_constexprs(cfg, f, q_dtype, SEED_HEADS, SEED_PAGE, page_bytes(f, SEED_PAGE))
    desc = consts["DESC"]
    k_desc = f"tensordesc<u8[1, {cfg['BLOCK_N']}, {desc_box(f, dot)}]>" if desc else "*u8"
    s_desc = f"tensordesc<i32[1, {cfg['BLOCK_N']}]>" if desc and scale_desc(f, dot, cfg["BLOCK_N"]) else "*u8"
    rendered = render_variant(fmt, dot, backend, q_dtype)
    return XCompileCase(
        variant=variant_name(dot, backend, q_dtype),
        rendered=rendered,
        kernel_name="logits_kernel",
        signature=kernel_signature(rendered, "logits_kernel", arg_types(q_dtype, k_desc, s_desc)),
        constexprs=consts,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        detail=detail,
        aligned_ints=ALIGNED_INTS,
    )


def xcompile_cases() -> list[XCompileCase]:
    """Every variant on the formats it reads, at the seed shape: the fp8 and scaled paths with an
    fp8 query, the bf16 path with a bf16 query; plus a prefill config (QT=2, 32 heads per dot),
    the heads-on-M orientation and PREFETCH of the fp8 and scaled paths, and descriptor loads on
    both formats (on the key-scaled paths, of the scale rows too); and every MXFP4-query variant on
    the formats it reads (`_mxfp4q_cases`)."""
    cases = []
    for fmt in LOGITS_FORMATS:
        for variant in BASE_VARIANTS:
            dot, backend = parse_variant(variant)
            if (backend != "soft" or dot in E2M1_ONLY_DOTS) and get_format(fmt).elem != "e2m1":
                continue
            qdt = "bf16" if dot in DECODING_DOTS else "fp8"
            cfg = dot_config(default_config(fmt, qdt), dot, backend)
            if dot == "wgmma":
                cfg = cfg.replace(TILES=16)  # the large batches' tile count (benchmarks/results/logits_wgmma.md)
            cases.append(_xcompile_case(fmt, dot, backend, qdt, cfg, f"{fmt} q={qdt}"))
    prefill = default_config("mxfp4_68", "fp8").replace(QT=2, HEADS=32, BLOCK_N=128, PAGE_LOOKUP="key")
    cases.append(_xcompile_case("mxfp4_68", "fp8", "soft", "fp8", prefill, "mxfp4_68 q=fp8 QT=2 HEADS=32"))
    # The chunked fp8 path (mxfp4_68) and dot_scaled (fp8_132) in the other MMA orientation
    # than their default (keys on M for fp8 queries), and with PREFETCH.
    for fmt, dot in (("mxfp4_68", "fp8"), ("fp8_132", "scaled")):
        cfg = default_config(fmt, "fp8").replace(dot=dot)
        cases.append(_xcompile_case(fmt, dot, "soft", "fp8", cfg.replace(MMA="heads_m"), f"{fmt} q=fp8 heads_m"))
        cases.append(_xcompile_case(fmt, dot, "soft", "fp8", cfg.replace(PREFETCH=1), f"{fmt} q=fp8 prefetch"))
    # Tiles by tensor-descriptor loads (TMA on NVIDIA): whole rows (fp8_132, its fastest loads:
    # benchmarks/results/logits.md) and 32-dim chunks (mxfp4_68's chunked paths).
    cfg = default_config("fp8_132", "fp8").replace(LOADS="descriptor", TILES=16, num_stages=3)
    cases.append(_xcompile_case("fp8_132", "fp8", "soft", "fp8", cfg, "fp8_132 q=fp8 descriptor"))
    cfg = default_config("mxfp4_68", "fp8").replace(LOADS="descriptor", TILES=16, num_stages=3)
    cases.append(_xcompile_case("mxfp4_68", "fp8", "soft", "fp8", cfg, "mxfp4_68 q=fp8 descriptor"))
    # The key-scaled paths' descriptor loads take the scale rows too (a second descriptor).
    for dot in KEY_SCALED_DOTS:
        cases.append(_xcompile_case("mxfp4_68", dot, "soft", "fp8", cfg.replace(dot=dot),
                                    "mxfp4_68 q=fp8 descriptor, scale rows too"))
    return cases + _mxfp4q_cases()


def _mxfp4q_cases() -> list[XCompileCase]:
    """The MXFP4-query variants at the seed shape, each on the cache formats it reads (the e2m1-only
    dot paths and the e2m1 decode backends on mxfp4_68 only), and the prefill tile of the default."""
    cases = []
    for fmt in LOGITS_FORMATS:
        for variant in MXFP4Q_VARIANTS:
            dot, backend = parse_variant(variant)
            if (backend != "soft" or dot in E2M1_ONLY_DOTS) and get_format(fmt).elem != "e2m1":
                continue
            cfg = dot_config(default_config(fmt, MXFP4_Q), dot, backend)
            cases.append(_xcompile_case(fmt, dot, backend, MXFP4_Q, cfg, f"{fmt} q={MXFP4_Q}"))
    prefill = default_config("mxfp4_68", MXFP4_Q).replace(QT=2, HEADS=32, BLOCK_N=128, PAGE_LOOKUP="key")
    cases.append(_xcompile_case("mxfp4_68", "fp8", "soft", MXFP4_Q, prefill, f"mxfp4_68 q={MXFP4_Q} QT=2 HEADS=32"))
    return cases
