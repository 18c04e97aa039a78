"""logits: the MQA indexer's catalog face. Its key is (cache record, query dtype) with 64 index
heads of 128 dims; its space picks the dot path (a variant: fp8 or bf16 operands, e2m1 codes by
integer ops or PTX lookups, chunk or key scales, sm_90's wgmma Gluon kernel) and the tile.

The query dtype "mxfp4" is an MXFP4 query (values uint8[T, Hi, 64] + ue8m0 scales uint8[T, Hi, 4],
the mxfp4_68 record per row, as the pack family's query quantiser writes it). Its variants are
named `mxfp4q.<dot path>` and its configs carry `query="mxfp4"` (a render parameter of its space
only), so a config alone says which variant, and which legality, it has."""

from __future__ import annotations

from typing import Any, Sequence

from catalog.codecs import E2M1_BACKENDS, e2m1_backend_legality
from catalog.core import Bucket, Config, ProblemKey
from catalog.families.base import FamilySpec
from catalog.formats import RecordFormat, get_format
from catalog.space import Param, Space
from templates import render as R

# The query dtypes a logits key may name (their torch dtypes: tuner.kernels.logits.Q_DTYPES).
Q_DTYPE_NAMES: tuple[str, ...] = ("bf16", "fp8", "mxfp4")

MXFP4_Q = "mxfp4"
MXFP4Q_PREFIX = "mxfp4q."  # the variant names of the MXFP4-query renders

TEMPLATE = "logits.py.j2"

# The `wgmma` dot path is a Gluon kernel of its own template (templates/logits_wgmma.py.j2).
WGMMA_TEMPLATE = "logits_wgmma.py.j2"

LOGITS_FORMATS: tuple[str, ...] = ("mxfp4_68", "fp8_132")

# fp8lut: fp8 operands like fp8, the e2m1 elements turned into e4m3 codes by byte-permute table
# lookups (PTX prmt) instead of integer arithmetic; NVIDIA only, e2m1 caches only. Faster than fp8
# on NVIDIA (benchmarks/results/logits_fp8lut.md) but not the default: a default must be legal on
# every target, and this one is not on AMD or the interpreter.
# fp8key / fp8keylut (e2m1 caches): one K=128 fp8 dot per tile instead of four K=32 chunk dots,
# each chunk's scale relative to its key's largest folded into the e4m3 exponents (shifts of up to
# 11 binades are exact; a chunk further below, under 2**-11 of the largest, is flushed to zero) and
# one scale per key applied to the scores, as fp8_132's. Codes by integer ops, or by prmt lookups
# (NVIDIA). With descriptor loads fp8keylut is the fastest Triton path on mxfp4_68, decode and
# prefill; fp8key, without the lookups, is slower than fp8 (benchmarks/results/logits.md,
# logits_scale_desc_ab.md).
# wgmma (e2m1 caches, sm_90): fp8keylut's codes and one scale per key, as a Gluon kernel: TMA ring,
# async wgmma, the head sum by a second (bf16) MMA on the relu'd scores. The fastest path on
# mxfp4_68 where it runs (benchmarks/results/logits.md).
DOTS: tuple[str, ...] = ("fp8", "fp8lut", "fp8key", "fp8keylut", "wgmma", "f16", "bf16", "scaled")

# The dot paths that only read e2m1 records (they build e4m3 codes from nibbles).
E2M1_ONLY_DOTS: tuple[str, ...] = ("fp8lut", "fp8key", "fp8keylut", "wgmma")

# The dot paths that take e2m1 records chunk by chunk (a K=32 dot per ue8m0 scale).
CHUNKED_DOTS: tuple[str, ...] = ("fp8", "fp8lut", "f16")

DECODING_DOTS: tuple[str, ...] = ("f16", "bf16")  # the paths that decode e2m1 to floats

# The dot paths an MXFP4 query runs: `scaled` reads it as it is (tl.dot_scaled, e2m1 x e2m1 or
# e4m3: the block-scaled MMA of sm_100 and gfx950); the others take it decoded once to e4m3 codes
# (f16: converted on to fp16, exactly), their key path unchanged. No wgmma (its Gluon kernel reads an
# fp8 query) and no bf16 (it gains nothing over f16 here and cannot run under the interpreter).
MXFP4Q_DOTS: tuple[str, ...] = ("fp8", "fp8lut", "fp8key", "fp8keylut", "f16", "scaled")

# The dot paths that fold the chunk scales into the codes (one scale per key). Only they read the
# scale rows by descriptor too with LOADS=descriptor: it speeds them up, where the same slowed
# fp8_132 and fp8lut (benchmarks/results/logits_scale_desc_ab.md).
KEY_SCALED_DOTS: tuple[str, ...] = ("fp8key", "fp8keylut")

# ... for tiles of at least this many keys: 16-key tiles (64-byte boxes of scale words) at
# num_stages=3 fault with a misaligned address on sm_90 with Triton 3.6, where 32 and 64 keys run
# right (benchmarks/results/logits_desc16_fault_h200.log).
SCALE_DESC_MIN_KEYS = 32

# The wgmma path's tiles: 64 keys (one TMA box, inside one page), one warpgroup's MMA rows.
WGMMA_BLOCK_N = 64

# The shared-memory swizzle (bytes) its TMA copies stage rows with: the template's kernel reads the
# buffers back as 32-bit words in this swizzle.
WGMMA_SWIZZLE = 64

# Its descriptor as Triton types it (signatures, warmup keys): what Triton's specialisation writes
# for `wgmma_descriptor`'s Gluon descriptor (tests/tuner/test_logits.py holds them together).
WGMMA_DESC_TYPE = (f"tensordesc<u8[1, {WGMMA_BLOCK_N}, 64],NVMMASharedLayout(swizzle_byte_width={WGMMA_SWIZZLE}, "
                   "element_bitwidth=8, rank=3, transposed=False, fp4_padded=False, cga_layout=[])>")

HEAD_DIM = 128

SEED_HEADS = 64

SEED_TOPK = 512

SEED_PAGE = 64

_DOT_ILLEGAL: dict[tuple[str, str], str] = {
    ("fp8lut", "interp"): "Triton's interpreter has no inline asm",
    ("fp8lut", "gfx942"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("fp8lut", "gfx950"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("fp8keylut", "interp"): "Triton's interpreter has no inline asm",
    ("fp8keylut", "gfx942"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("fp8keylut", "gfx950"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("wgmma", "interp"): "a Gluon kernel: Triton's interpreter does not run Gluon",
    ("wgmma", "sm_100"): "Hopper's warpgroup MMA (wgmma); sm_100 has tcgen05 in its place",
    ("wgmma", "gfx942"): "a Gluon kernel of NVIDIA Hopper operations (wgmma, TMA, PTX prmt)",
    ("wgmma", "gfx950"): "a Gluon kernel of NVIDIA Hopper operations (wgmma, TMA, PTX prmt)",
    ("scaled", "interp"): "Triton's interpreter has no dot_scaled",
    ("bf16", "interp"): "Triton's interpreter stores bf16 as uint16 and its tl.dot multiplies those bit patterns",
}


def variant_name(dot: str, backend: str = "soft", q_dtype: str | None = None) -> str:
    """A variant is its dot path; the paths that decode e2m1 to floats also name the backend; the
    MXFP4-query renders are prefixed `mxfp4q.`."""
    if dot not in DOTS:
        raise ValueError(f"unknown dot path {dot!r}; known: {list(DOTS)}")
    if q_dtype == MXFP4_Q and dot not in MXFP4Q_DOTS:
        raise ValueError(f"an MXFP4 query runs the {list(MXFP4Q_DOTS)} dot paths, not {dot!r}")
    base = f"{dot}.{backend}" if dot in DECODING_DOTS else dot
    return MXFP4Q_PREFIX + base if q_dtype == MXFP4_Q else base


def parse_variant(variant: str) -> tuple[str, str]:
    """(dot path, e2m1 backend) of a variant name (`variant_query` says whether it is an MXFP4 query's)."""
    q4 = variant.startswith(MXFP4Q_PREFIX)
    dot, _, backend = variant.removeprefix(MXFP4Q_PREFIX).partition(".")
    if dot not in DOTS or (dot in DECODING_DOTS) != bool(backend) or (backend and backend not in E2M1_BACKENDS):
        raise ValueError(f"unknown logits variant {variant!r}")
    if q4 and dot not in MXFP4Q_DOTS:
        raise ValueError(f"unknown logits variant {variant!r} (an MXFP4 query runs {list(MXFP4Q_DOTS)})")
    return dot, backend or "soft"


def variant_query(variant: str) -> str | None:
    """"mxfp4" for the MXFP4-query variants, else None (bf16 and fp8 queries share their renders)."""
    return MXFP4_Q if variant.startswith(MXFP4Q_PREFIX) else None

BASE_VARIANTS: tuple[str, ...] = ("fp8", "fp8lut", "fp8key", "fp8keylut", "wgmma") + tuple(f"{d}.{b}" for d in DECODING_DOTS for b in E2M1_BACKENDS) + ("scaled",)

MXFP4Q_VARIANTS: tuple[str, ...] = tuple(MXFP4Q_PREFIX + v for v in BASE_VARIANTS if v.partition(".")[0] in MXFP4Q_DOTS)

VARIANTS: tuple[str, ...] = BASE_VARIANTS + MXFP4Q_VARIANTS

# Where an MXFP4-query variant cannot run beyond its dot path's own rows (`_DOT_ILLEGAL`). On sm_90
# mxfp4q.scaled compiles (Triton upcasts both e2m1 operands for a bf16 MMA: sm_90 has no fp4 MMA),
# so it stays a candidate there, but the path written for sm_90 is the decode-once one (mxfp4q.fp8
# and the other e4m3 paths, the default). On gfx942 Triton 3.6 has no lowering for an e2m1 x e2m1
# (or e2m1 x e4m3) DotScaleOp ("LLVM ERROR: Unsupported DotScaleOp"): CDNA3 has no scaled MFMA.
_MXFP4Q_ILLEGAL: dict[tuple[str, str], str] = {
    ("scaled", "gfx942"): "no fp4 dot_scaled on gfx942: CDNA3 has no scaled MFMA and Triton has no lowering "
                          "for an e2m1 query's DotScaleOp there (gfx950 has both)",
}


def legality(variant: str, target: str) -> str | None:
    dot, backend = parse_variant(variant)
    q4 = _MXFP4Q_ILLEGAL.get((dot, target)) if variant_query(variant) else None
    return _DOT_ILLEGAL.get((dot, target)) or q4 or e2m1_backend_legality(backend, target)


def config_legality(config: Config, target: str) -> str | None:
    """Why `config` cannot run on `target` (None: it can): its variant's legality, and its loads.
    Descriptor loads are TMA copies on NVIDIA; on AMD Triton lowers them to buffer loads, whose
    32-bit offsets a KV pool over 2 GiB would overflow (they cross-compile there; never run)."""
    if config.get("LOADS", "gather") == "descriptor" and target in ("gfx942", "gfx950"):
        return "LOADS=descriptor (TMA) is NVIDIA's; AMD buffer loads take 32-bit offsets into a pool over 2 GiB"
    return legality(variant_of(config), target)


def _check_fmt(fmt: str | RecordFormat) -> RecordFormat:
    f = get_format(fmt)
    if f.name not in LOGITS_FORMATS:
        raise ValueError(f"logits reads {list(LOGITS_FORMATS)} caches, not {f.name}")
    return f


def _check_q_dtype(q_dtype: str) -> str:
    if q_dtype not in Q_DTYPE_NAMES:
        raise ValueError(f"query dtype must be one of {list(Q_DTYPE_NAMES)}, got {q_dtype!r}")
    return q_dtype


def check_formats(fmt: str, q_dtype: str) -> None:
    """ValueError unless the kernel reads `fmt` caches with `q_dtype` queries (`make_key` checks)."""
    _check_fmt(fmt)
    _check_q_dtype(q_dtype)


def space(fmt: str | RecordFormat, q_dtype: str = "fp8", heads: int = SEED_HEADS) -> Space:
    """The logits search space for one cache format, query dtype and head count.

    `dot`: fp8 needs an fp8 query (a bf16 query would be rounded to e4m3, beyond the tolerance);
    `backend` (the e2m1 decode) only matters to the f16 and bf16 paths of an e2m1 cache. A bf16
    query defaults to the f16 path: as fast as bf16 on tensor cores, exact for the query's normal
    range, and (unlike bf16) right under Triton's interpreter. An MXFP4 query: MXFP4Q_DOTS, fp8 first.
    """
    f = _check_fmt(fmt)
    _check_q_dtype(q_dtype)
    _check_heads(heads)
    dots = DOTS if q_dtype == "fp8" else MXFP4Q_DOTS if q_dtype == MXFP4_Q else ("f16", "bf16", "scaled")
    if f.elem != "e2m1":
        dots = tuple(d for d in dots if d not in E2M1_ONLY_DOTS)  # no nibbles in fp8 records
    backends = E2M1_BACKENDS if f.elem == "e2m1" else ("soft",)

    def _backend_needs_bf16(c: Config) -> str | None:
        if c["backend"] != "soft" and c["dot"] not in DECODING_DOTS:
            return f"the {c['backend']} e2m1 decode is only used by the {'/'.join(DECODING_DOTS)} dot paths"
        return None

    def _fits(c: Config) -> str | None:
        if c["dot"] == "wgmma":
            fixed = wgmma_fixed(heads)
            off = sorted(k for k, v in fixed.items() if c[k] != v)
            if off:
                return f"the wgmma path runs {', '.join(f'{k}={fixed[k]}' for k in off)} (one warpgroup, 64-key tiles by TMA, one token, all heads)"
            return None
        # The [QT * HEADS, BLOCK_N] fp32 scores live in registers: at most ~128 per thread.
        acc = c["QT"] * c["HEADS"] * c["BLOCK_N"]
        if acc > 128 * 32 * c["num_warps"]:
            return f"{acc} fp32 scores per program need more than 128 registers a thread at {c['num_warps']} warps"
        if c["QT"] * c["HEADS"] > 256:
            return "more than 256 dot rows per program"
        if c["LOADS"] == "descriptor" and (c["PAGE_LOOKUP"] != "tile" or c["PREFETCH"]):
            return "LOADS=descriptor loads whole tiles of one page (PAGE_LOOKUP=tile), pipelined by Triton (no PREFETCH)"
        if c["PREFETCH"] and c["dot"] == "scaled" and f.elem == "e2m1":
            # Correct under the interpreter, wrong on sm_90 with Triton 3.6 at every B in both MMA
            # orientations, while fp8_132's scaled path with PREFETCH is right
            # (benchmarks/results/logits_h200.log).
            return "PREFETCH with tl.dot_scaled on e2m1 records miscompiles (wrong results on sm_90)"
        return None

    query = (Param("query", (MXFP4_Q,), MXFP4_Q, render=True),) if q_dtype == MXFP4_Q else ()
    return Space(
        params=(
            Param("dot", dots, "f16" if q_dtype == "bf16" else "fp8", render=True),
            Param("backend", backends, "soft", render=True),
            Param("BLOCK_N", (16, 32, 64, 128, 256), 64),
            Param("TILES", (1, 2, 4, 8, 16), 4),
            Param("QT", (1, 2, 4), 1),
            Param("HEADS", tuple(h for h in (16, 32, 64, 128) if h <= heads), heads),
            Param("PAGE_LOOKUP", ("tile", "key"), "tile"),
            # heads_m: scores[heads, keys] = q K^T, the sum over heads crosses the warps that split M;
            # keys_m: scores^T = K q^T, K feeds the MMA from registers and heads are summed in-thread.
            # keys_m is the fp8-query default: at the default tile it takes about 40% of heads_m's
            # time at the largest decode batch on both formats (benchmarks/results/logits_h200.log).
            # bf16 queries keep heads_m until keys_m is timed on their f16 dot.
            Param("MMA", ("heads_m", "keys_m"), "heads_m" if q_dtype == "bf16" else "keys_m"),
            # 1: the next tile's block-table and record loads are issued before this tile's dots
            # (by hand: Triton's pipeliner does not overlap a tile's record loads with the dots
            # before them). Only matters with TILES > 1. Slower wherever it was timed, with more
            # registers a thread (benchmarks/results/logits_h200.log); hence off by default.
            Param("PREFETCH", (0, 1), 0),
            # How a tile's data rows are read: "gather" (a load per key row, into registers) or
            # "descriptor" (the tile as tensor-descriptor loads of its page's rows, one per 32-dim
            # chunk on the chunked e2m1 paths: TMA copies that Triton's pipeliner stages through
            # shared memory; NVIDIA only, see `config_legality`). Gathered rows leave nothing in
            # flight while a tile's dots run; descriptor loads with num_stages=3 are the faster
            # large-batch loads on both formats (benchmarks/results/logits.md,
            # logits_mxfp4_descriptor.md), but "gather" stays the default: it runs on every target.
            Param("LOADS", ("gather", "descriptor"), "gather"),
            Param("num_warps", (2, 4, 8), 4),
            Param("num_stages", (1, 2, 3), 2),
            # An MXFP4 query's configs say so (its variants' legality differs: `legality`).
            *query,
        ),
        constraints=(_backend_needs_bf16, _fits),
    )


def dot_config(base: Config, dot: str, backend: str = "soft", heads: int = SEED_HEADS) -> Config:
    """`base` switched to a dot path (and e2m1 backend): for wgmma, with the parameters it fixes."""
    cfg = base.replace(dot=dot, backend=backend)
    return cfg.replace(**wgmma_fixed(heads)) if dot == "wgmma" else cfg


def wgmma_fixed(heads: int = SEED_HEADS) -> dict[str, Any]:
    """The parameters the wgmma path fixes: one warpgroup, 64-key tiles by TMA (each inside one
    page), keys on the MMA's M side, one query token and all heads a program. TILES and
    num_stages (the depth of its TMA ring) stay free."""
    return {"BLOCK_N": WGMMA_BLOCK_N, "QT": 1, "HEADS": heads, "MMA": "keys_m", "PAGE_LOOKUP": "tile", "PREFETCH": 0,
            "LOADS": "descriptor", "num_warps": 4}


def _check_heads(heads: int) -> None:
    if heads not in (16, 32, 64, 128):
        raise ValueError(f"index heads must be 16, 32, 64 or 128 (a power of two the dot can tile), got {heads}")


def default_config(fmt: str | RecordFormat, q_dtype: str = "fp8", heads: int = SEED_HEADS) -> Config:
    return space(fmt, q_dtype, heads).default()


def render_variant(fmt: str | RecordFormat, dot: str, backend: str = "soft", q_dtype: str | None = None) -> R.Rendered:
    """The module of one dot path (and e2m1 backend) on one cache format; `q_dtype="mxfp4"` for an
    MXFP4 query's (bf16 and fp8 queries share one render: the kernel's Q_FP8 tells them apart)."""
    f = _check_fmt(fmt)
    variant_name(dot, backend, q_dtype)
    if backend not in E2M1_BACKENDS:
        raise ValueError(f"unknown e2m1 backend {backend!r}")
    if dot in E2M1_ONLY_DOTS and f.elem != "e2m1":
        raise ValueError(f"the {dot} path decodes e2m1 elements; {f.name} has none (use fp8)")
    if f.elem != "e2m1" or dot not in DECODING_DOTS:
        backend = "soft"  # nothing decodes e2m1 to floats: one source per (format, dot)
    if dot == "wgmma":
        # Its layouts are written for mxfp4_68's shape: 128 dims, 4 chunks, 64-byte data rows.
        assert (f.dims, f.tile, f.data_bytes) == (128, 32, 64), f.name
        return R.render(WGMMA_TEMPLATE, {"fmt": f})
    return R.render(TEMPLATE, {"fmt": f, "dot": dot, "e2m1_backend": backend, "chunked": chunked(f, dot),
                               "keyscaled": key_scaled(f, dot), "scale_desc_min_keys": SCALE_DESC_MIN_KEYS,
                               "q_mxfp4": q_dtype == MXFP4_Q})


def chunked(f: RecordFormat, dot: str) -> bool:
    """Whether the `dot` path takes `f`'s records chunk by chunk of 32 dims (e2m1 records only)."""
    return f.elem == "e2m1" and dot in CHUNKED_DOTS


def key_scaled(f: RecordFormat, dot: str) -> bool:
    """Whether the `dot` path folds `f`'s chunk scales into the codes, one scale per key."""
    return f.elem == "e2m1" and dot in KEY_SCALED_DOTS


def scale_desc(f: RecordFormat, dot: str, block_n: int) -> bool:
    """Whether LOADS=descriptor also reads the scale rows by descriptor, for tiles of `block_n`
    keys (see KEY_SCALED_DOTS and SCALE_DESC_MIN_KEYS; the template makes the same test)."""
    return key_scaled(f, dot) and block_n >= SCALE_DESC_MIN_KEYS


def desc_box(f: RecordFormat, dot: str) -> int:
    """Bytes of a data row one descriptor load takes: the whole row, or one 32-dim chunk (16 bytes)
    on the chunked paths."""
    return f.tile // 2 if chunked(f, dot) else f.data_bytes


def kernel_constexprs(config: Config, f: RecordFormat, q_dtype: str, heads: int, page_size: int,
                      page_bytes: int) -> dict[str, Any]:
    """The Triton logits_kernel's constexprs for `config` on pages of `page_size` keys and
    `page_bytes` bytes: what the launcher passes and the cross-compiler builds, from this one place.
    Where a config name becomes another kernel name, the call's shape decides it:
    TILE_LOOKUP (PAGE_LOOKUP="tile": one block-table read a tile) only where tiles do not
    straddle pages; DESC (LOADS="descriptor") only there and on rows of 16-byte multiples (TMA),
    else the same config gathers; KEYS_M is MMA="keys_m"; Q_FP8 tells fp8 from bf16 queries."""
    bn = config["BLOCK_N"]
    tile_lookup = config["PAGE_LOOKUP"] == "tile" and page_size % bn == 0
    return {
        "HI": heads, "PAGE": page_size, "BLOCK_N": bn, "TILES": config["TILES"], "QT": config["QT"],
        "HEADS": config["HEADS"], "TILE_LOOKUP": tile_lookup, "Q_FP8": q_dtype == "fp8",
        "KEYS_M": config["MMA"] == "keys_m", "PREFETCH": bool(config.get("PREFETCH", 0)),
        "DESC": config.get("LOADS", "gather") == "descriptor" and tile_lookup and page_bytes % 16 == 0,
    }


def variant_of(config: Config) -> str:
    return variant_name(config["dot"], config["backend"], config.get("query"))

DECODE_CTX = 65536

PREFILL_CTX = 16384

# Decode: B sequences with one query token each; prefill: T query tokens of one sequence, causal.
LOGITS_BUCKETS: tuple[Bucket, ...] = (
    Bucket("B", 1, 1, DECODE_CTX),
    Bucket("B", 2, 8, DECODE_CTX),
    Bucket("B", 9, 32, DECODE_CTX),
    Bucket("B", 33, 64, DECODE_CTX),
    Bucket("T", 1, 4096, PREFILL_CTX),
)


def logits_key(fmt: str, q_dtype: str = "fp8", arch: str = "sm_90", heads: int = SEED_HEADS, topk: int = SEED_TOPK) -> ProblemKey:
    _check_fmt(fmt)
    _check_q_dtype(q_dtype)
    return ProblemKey(kernel="logits", arch=arch, heads=heads, topk=topk, window=0, formats=(fmt, q_dtype), head_dim=HEAD_DIM)


def _key_parts(key: ProblemKey) -> tuple[RecordFormat, str]:
    if key.kernel != "logits" or len(key.formats) != 2:
        raise ValueError(f"a logits key has formats (cache_fmt, q_dtype), got {key.formats}")
    return _check_fmt(key.formats[0]), _check_q_dtype(key.formats[1])


def live_pairs(bucket: Bucket) -> int:
    """(query token, key) pairs a bucket's inputs score."""
    ctx = bucket.ctx or DECODE_CTX
    if bucket.dim == "B":
        return bucket.rep * ctx
    t = bucket.rep
    return sum(ctx - t + 1 + i for i in range(t))


def logits_flops(key: ProblemKey, bucket: Bucket) -> int:
    return 2 * key.heads * key.head_dim * live_pairs(bucket)


def logits_bytes(key: ProblemKey, bucket: Bucket) -> int:
    """The floor's bytes: every live key's record read once (prefill: the one sequence, shared by
    all its tokens), the query and weights read, the whole output written."""
    f, qdt = _key_parts(key)
    ctx = bucket.ctx or DECODE_CTX
    t = bucket.rep
    keys = t * ctx if bucket.dim == "B" else ctx
    # A query row: 128 fp8 or bf16 values, or an MXFP4 record (64 bytes of e2m1 and 4 scales).
    qrow = get_format("mxfp4_68").bytes_per_token if qdt == MXFP4_Q else key.head_dim * (1 if qdt == "fp8" else 2)
    return keys * f.bytes_per_token + t * key.heads * (qrow + 4) + t * ctx * 4


class LogitsSpec(FamilySpec):
    name = "logits"
    template = TEMPLATE

    def variants(self) -> Sequence[str]:
        return VARIANTS

    def legality(self, variant: str, target: str) -> str | None:
        return legality(variant, target)

    def config_legality(self, config: Config, target: str) -> str | None:
        return config_legality(config, target)

    def space(self, key: ProblemKey) -> Space:
        f, qdt = _key_parts(key)
        return space(f, qdt, key.heads)

    def canonical_config(self, key: ProblemKey, config: Config) -> Config:
        """A wgmma sample runs with the parameters the path fixes (`wgmma_fixed`), whatever it
        drew for them: otherwise a search would almost never draw the one feasible combination."""
        return dot_config(config, "wgmma", heads=key.heads) if config.get("dot") == "wgmma" else config

    def default_config(self, key: ProblemKey) -> Config:
        f, qdt = _key_parts(key)
        return default_config(f, qdt, key.heads)

    def variant_of(self, config: Config) -> str:
        return variant_of(config)

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        return list(LOGITS_BUCKETS)

    def render(self, key: ProblemKey, config: Config) -> R.Rendered:
        f, qdt = _key_parts(key)
        return render_variant(f, config["dot"], config["backend"], qdt)

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        return logits_bytes(key, bucket)


SPEC = LogitsSpec()
