"""The MQA indexer logits family: `sum_h w[t,h] * relu(q[t,h] . K_j)` over a paged mxfp4_68 or
fp8_132 K cache (FORMATS.md "logits").

A program takes QT query tokens (of one sequence) against TILES tiles of BLOCK_N consecutive keys:
it loads the query once, reads each tile's records through the block table (gathered row by row,
or with LOADS=descriptor as tensor-descriptor loads: TMA copies on NVIDIA, which Triton pipelines
through shared memory), turns them into dot
operands (the `dot` variant axis: e4m3 codes for an fp8 tensor-core dot with per-32-dim scales
applied to the partial products, built with integer ops (fp8) or byte-permute table lookups
(fp8lut, NVIDIA); e4m3 codes with each chunk's scale relative to its key's largest folded into
their exponents, for one dot and one scale per key (fp8key, fp8keylut); bf16 values for a bf16
dot, or the raw nibbles and scales for `tl.dot_scaled`),
applies relu, weights by w and reduces over heads. Every output element is written.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from catalog.codecs import E2M1_BACKENDS, e2m1_backend_legality
from catalog.core import Bucket, Config, ProblemKey
from catalog.families.logits import (DECODE_CTX, DECODING_DOTS, E2M1_ONLY_DOTS, HEAD_DIM, KEY_SCALED_DOTS,
                                     LOGITS_FORMATS, LogitsSpec, SEED_HEADS, SEED_PAGE, VARIANTS, WGMMA_BLOCK_N,
                                     WGMMA_DESC_TYPE, WGMMA_SWIZZLE, _check_fmt, _check_heads, _key_parts,
                                     config_legality, default_config, desc_box, dot_config, parse_variant,
                                     render_variant, scale_desc, space, variant_name)
from catalog.formats import RecordFormat, get_format, page_bytes
from templates import render as R
from tuner.formats import alloc_cache
from tuner.kernels.base import KernelFamily, XCompileCase, device_generator
from tuner.reference import compare, logits_reference
from tuner.targets import detect

Q_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
TOL = 1e-2  # FORMATS.md: bf16 (and fp8) operands


# ---------------------------------------------------------------------------------------------
# Variants and legality
# ---------------------------------------------------------------------------------------------












# ---------------------------------------------------------------------------------------------
# Search space
# ---------------------------------------------------------------------------------------------


















# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------


def q_dtype_name(dtype: torch.dtype) -> str:
    for name, dt in Q_DTYPES.items():
        if dt == dtype:
            return name
    raise ValueError(f"q must be bf16 or fp8 e4m3 (torch.float8_e4m3fn), got {dtype}")


def _check_index(name: str, t: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> None:
    if t.dtype != torch.int32 or tuple(t.shape) != shape or not t.is_contiguous() or t.device != device:
        raise ValueError(f"{name} must be a contiguous int32{list(shape)} on {device}, got {t.dtype}{list(t.shape)} on {t.device}")


def logits(
    q: torch.Tensor,
    w: torch.Tensor,
    cache: torch.Tensor,
    fmt: str | RecordFormat,
    page_size: int,
    block_table: torch.Tensor,
    seq_of: torch.Tensor,
    k_start: torch.Tensor,
    k_end: torch.Tensor,
    max_len: int,
    config: Config | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """MQA indexer logits: fp32[T, max_len], `sum_h w[t,h] * relu(q[t,h] . K_j)` for
    `k_start[t] <= j < k_end[t]` (K_j: position j of sequence `seq_of[t]`), -inf elsewhere.

    `out` (optional, fp32[T, max_len] contiguous) is written in place, so a caller can capture the
    launch in a CUDA graph. Index tensors are read on the device: no host synchronisation.
    """
    f = _check_fmt(fmt)
    if q.dim() != 3 or q.shape[2] != f.dims:
        raise ValueError(f"q must be [T, heads, {f.dims}], got {list(q.shape)}")
    qdt = q_dtype_name(q.dtype)
    t, hi = q.shape[0], q.shape[1]
    _check_heads(hi)
    if not q.is_contiguous():
        raise ValueError("q must be contiguous")
    dev = q.device
    if w.dtype != torch.float32 or tuple(w.shape) != (t, hi) or not w.is_contiguous() or w.device != dev:
        raise ValueError(f"w must be a contiguous fp32[{t}, {hi}] on {dev}, got {w.dtype}{list(w.shape)}")
    if not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    pb = page_bytes(f, page_size)
    if cache.dtype != torch.uint8 or cache.dim() != 2 or cache.shape[1] != pb or not cache.is_contiguous() or cache.device != dev:
        raise ValueError(f"cache must be a contiguous uint8[num_pages, {pb}] on {dev} for {f.name} with page size {page_size}")
    if block_table.dim() != 2:
        raise ValueError(f"block_table must be int32[B, max_pages], got {list(block_table.shape)}")
    _check_index("block_table", block_table, tuple(block_table.shape), dev)
    for name, x in (("seq_of", seq_of), ("k_start", k_start), ("k_end", k_end)):
        _check_index(name, x, (t,), dev)
    if not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be a non-negative int, got {max_len!r}")
    if out is None:
        out = torch.empty(t, max_len, dtype=torch.float32, device=dev)
    elif out.dtype != torch.float32 or tuple(out.shape) != (t, max_len) or not out.is_contiguous() or out.device != dev:
        raise ValueError(f"out must be a contiguous fp32[{t}, {max_len}] on {dev}")
    cfg = config or default_config(f, qdt, hi)
    # Configs tuned before the MMA, PREFETCH and LOADS axes existed meant what the kernel did then.
    cfg = Config.from_dict({"MMA": "heads_m", "PREFETCH": 0, "LOADS": "gather", **cfg.as_dict()})
    why = space(f, qdt, hi).infeasible(cfg)
    if why:
        raise ValueError(f"infeasible logits config {cfg.to_json()}: {why}")
    if cfg["dot"] == "wgmma" and page_size % WGMMA_BLOCK_N:
        # Pages smaller than its 64-key tiles (16, 32): the same codes and key scales by the Triton
        # kernel, its rows gathered.
        cfg = cfg.replace(dot="fp8keylut", LOADS="gather")
    illegal = config_legality(cfg, detect().name)
    if illegal:
        raise ValueError(f"config {cfg.to_json()} cannot run here: {illegal}")
    if t == 0 or max_len == 0:
        return out
    if block_table.shape[0] == 0 or block_table.shape[1] == 0:
        raise ValueError("block_table must have at least one sequence and one page column")
    mod = R.load(render_variant(f, cfg["dot"], cfg["backend"]))
    if cfg["dot"] == "wgmma":
        k_desc = wgmma_descriptor(cache, f, page_size)
        grid = (triton.cdiv(max_len, WGMMA_BLOCK_N * cfg["TILES"]), t)
        mod.logits_wgmma_kernel[grid](
            q, w, cache, k_desc, block_table, seq_of, k_start, k_end, out, t, max_len, block_table.shape[1], pb,
            HI=hi, PAGE=page_size, BLOCK_N=WGMMA_BLOCK_N, TILES=cfg["TILES"], NBUF=cfg["num_stages"], num_warps=4,
        )
        return out
    bn, tiles, qt = cfg["BLOCK_N"], cfg["TILES"], cfg["QT"]
    tile_lookup = cfg["PAGE_LOOKUP"] == "tile" and page_size % bn == 0
    # A descriptor where each tile lies in one page whose rows it can stride over (TMA needs
    # 16-byte multiples: any page size divisible by 4); elsewhere the same config gathers.
    desc = cfg["LOADS"] == "descriptor" and tile_lookup and pb % 16 == 0
    k_desc = s_desc = cache
    if desc:
        k_desc = TensorDescriptor(cache, [cache.shape[0], page_size, f.data_bytes], [pb, f.data_bytes, 1],
                                  [1, bn, desc_box(f, cfg["dot"])])
    if desc and scale_desc(f, cfg["dot"], bn):
        # The scale rows (one 32-bit word a key) follow a page's data rows: a 16-byte aligned start.
        scales = cache.view(torch.int32)[:, page_size * f.data_bytes // 4:]
        s_desc = TensorDescriptor(scales, [cache.shape[0], page_size], [pb // 4, 1], [1, bn])
    grid = (triton.cdiv(max_len, bn * tiles), triton.cdiv(t, qt))
    mod.logits_kernel[grid](
        q, w, cache, k_desc, s_desc, block_table, seq_of, k_start, k_end, out,
        t, max_len, block_table.shape[1], pb,
        HI=hi, PAGE=page_size, BLOCK_N=bn, TILES=tiles, QT=qt, HEADS=cfg["HEADS"],
        TILE_LOOKUP=tile_lookup, Q_FP8=qdt == "fp8",
        KEYS_M=cfg["MMA"] == "keys_m", PREFETCH=bool(cfg["PREFETCH"]), DESC=desc,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return out


def wgmma_descriptor(cache: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> Any:
    """The wgmma path's TMA descriptor: each page's data rows, [pages, page_size, data_bytes], in
    boxes of one 64-key tile, staged with the 64-byte swizzle its kernel reads them by."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    f = get_format(fmt)
    pb = cache.shape[1]
    layout = gl.NVMMASharedLayout(swizzle_byte_width=WGMMA_SWIZZLE, element_bitwidth=8, rank=3)
    return GluonDescriptor(cache, [cache.shape[0], page_size, f.data_bytes], [pb, f.data_bytes, 1],
                           [1, WGMMA_BLOCK_N, f.data_bytes], layout)












# ---------------------------------------------------------------------------------------------
# Problem sizes: keys, buckets, inputs, cost model
# ---------------------------------------------------------------------------------------------







def random_cache(fmt: str | RecordFormat, num_pages: int, page_size: int, device: str | torch.device, g: torch.Generator) -> torch.Tensor:
    """A cache of valid random records, built in place (quantizing millions of rows would need
    gigabytes of temporaries): uniform element bytes, scales over a few binades, no NaN."""
    f = _check_fmt(fmt)
    dev = torch.device(device)
    dg = device_generator(g, dev)  # drawn where the cache lives
    cache = alloc_cache(f, num_pages, page_size, device=dev, fill=0)
    data = cache[:, : page_size * f.data_bytes]
    data.copy_(torch.randint(0, 256, data.shape, generator=dg, dtype=torch.uint8, device=dev))
    sc = cache[:, page_size * f.data_bytes : page_size * f.bytes_per_token]
    if f.elem == "e2m1":
        sc.copy_(torch.randint(124, 131, sc.shape, generator=dg, dtype=torch.uint8, device=dev))
    else:
        data[(data == 0x7F) | (data == 0xFF)] = 0  # e4m3 NaN codes
        e = torch.randint(120, 131, (num_pages, page_size), generator=dg, dtype=torch.int32, device=dev)
        sc.copy_((e << 23).view(torch.uint8).reshape(sc.shape))
    return cache


def make_query(t: int, heads: int, q_dtype: str, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.randn(t, heads, HEAD_DIM, generator=g)
    w = torch.randn(t, heads, generator=g) / math.sqrt(heads)
    if q_dtype == "fp8":
        return q.to(torch.float8_e4m3fn), w
    return q.to(torch.bfloat16), w


def paged_sequences(lengths: Sequence[int], page_size: int, g: torch.Generator, spare_pages: int = 0) -> tuple[torch.Tensor, int]:
    """A block table (int32[B, max_pages], -1 past each sequence's end) over one shuffled pool of
    pages, and the pool's page count."""
    need = [-(-n // page_size) for n in lengths]
    max_pages = max(1, max(need, default=1))
    num_pages = sum(need) + spare_pages
    perm = torch.randperm(max(num_pages, 1), generator=g)
    bt = torch.full((len(lengths), max_pages), -1, dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[at : at + n].int()
        at += n
    return bt, max(num_pages, 1)


def _int_class(v: int) -> str:
    # How Triton specialises an integer argument: the value 1, a multiple of 16, or neither.
    return "1" if v == 1 else "16" if v % 16 == 0 else "-"


def probe_contexts(ctx: int, page_size: int) -> list[int]:
    """The fewest longest-contexts in [1, ctx] that reach every (max_len, page count) pair of
    specialisation classes some context in [1, ctx] reaches. Classes repeat every 16 pages, so
    the top 16 pages plus the first two pages hold every reachable pair."""
    found: dict[tuple[str, str], int] = {}
    top = range(ctx, max(0, ctx - 16 * page_size - 16), -1)
    low = range(1, min(ctx, 2 * page_size + 16) + 1)
    for c in (*top, *low):
        found.setdefault((_int_class(c), _int_class(-(-c // page_size))), c)
    return sorted(found.values())


def make_inputs(key: ProblemKey, bucket: Bucket, device: str, seed: int, page_size: int = SEED_PAGE,
                probe: bool = False) -> dict[str, Any]:
    """One launch's inputs at the bucket's size and context. `probe`: the same shapes, dtypes and
    integers (all Triton specialises on) over a one-page pool of zeros, for enumerating warmup
    keys cheaply: a 64 x 64K decode needs 285 MB of random records otherwise."""
    f, qdt = _key_parts(key)
    g = torch.Generator().manual_seed(seed)
    ctx = bucket.ctx or DECODE_CTX
    if bucket.dim == "B":  # decode: one query token per sequence, at the end of its context
        b = bucket.rep
        lengths = [ctx] * b
        t = b
        seq_of = torch.arange(b, dtype=torch.int32)
        k_start = torch.zeros(b, dtype=torch.int32)
        k_end = torch.full((b,), ctx, dtype=torch.int32)
    elif bucket.dim == "T":  # prefill: the last T positions of one sequence, causal
        t = bucket.rep
        lengths = [ctx]
        seq_of = torch.zeros(t, dtype=torch.int32)
        k_start = torch.zeros(t, dtype=torch.int32)
        k_end = (ctx - t + 1 + torch.arange(t)).clamp(min=1).int()
    else:
        raise ValueError(f"logits buckets are over B (decode sequences) or T (prefill tokens), not {bucket.dim!r}")
    bt, num_pages = paged_sequences(lengths, page_size, g)
    q, w = make_query(t, key.heads, qdt, g)
    if probe:  # the block table's shape (max_pages is a kernel integer), every entry on one zero page
        bt.zero_()
        cache = alloc_cache(f, 1, page_size, device=device, fill=0)
    else:
        cache = random_cache(f, num_pages, page_size, device, g)
    return {
        "q": q.to(device), "w": w.to(device),
        "cache": cache,
        "page_size": page_size, "block_table": bt.to(device),
        "seq_of": seq_of.to(device), "k_start": k_start.to(device), "k_end": k_end.to(device),
        "max_len": ctx,
        "out": torch.empty(t, ctx, dtype=torch.float32, device=device),
    }


def run_inputs(key: ProblemKey, config: Config, inputs: dict[str, Any]) -> torch.Tensor:
    return logits(inputs["q"], inputs["w"], inputs["cache"], key.formats[0], inputs["page_size"], inputs["block_table"],
                  inputs["seq_of"], inputs["k_start"], inputs["k_end"], inputs["max_len"], config, out=inputs["out"])


def verify_inputs(key: ProblemKey, inputs: dict[str, Any], outputs: torch.Tensor, max_rows: int = 8, seed: int = 0) -> str | None:
    """Against the float64 reference on up to `max_rows` rows (a seeded sample, first and last
    always in): the reference gathers and dequantizes every key of a row, so full checks of big
    shapes would take minutes."""
    t = outputs.shape[0]
    if t <= max_rows:
        rows = torch.arange(t)
    else:
        g = torch.Generator().manual_seed(seed)
        mid = torch.randperm(t - 2, generator=g)[: max_rows - 2] + 1
        rows = torch.cat([torch.tensor([0, t - 1]), mid]).sort().values
    dev = inputs["q"].device
    r = rows.to(dev)
    ref = logits_reference(inputs["q"][r], inputs["w"][r], inputs["cache"], key.formats[0], inputs["page_size"],
                           inputs["block_table"], inputs["seq_of"][r], inputs["k_start"][r], inputs["k_end"][r],
                           inputs["max_len"], chunk=2)
    err = compare(outputs[r], ref, TOL)
    return None if err is None else f"rows {rows.tolist()[:8]}: {err}"








# ---------------------------------------------------------------------------------------------
# The family
# ---------------------------------------------------------------------------------------------


def _wgmma_xcompile_case(cfg: Config, detail: str) -> XCompileCase:
    """The wgmma path (mxfp4_68, fp8 query) at the seed shape."""
    return XCompileCase(
        variant="wgmma",
        rendered=render_variant("mxfp4_68", "wgmma"),
        kernel_name="logits_wgmma_kernel",
        signature={
            "q_ptr": "*fp8e4nv", "w_ptr": "*fp32", "cache_ptr": "*u8", "k_desc": WGMMA_DESC_TYPE,
            "bt_ptr": "*i32", "seq_ptr": "*i32", "ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32",
            "n_tokens": "i32", "max_len": "i32", "max_pages": "i32", "page_bytes": "i32",
            "HI": "constexpr", "PAGE": "constexpr", "BLOCK_N": "constexpr", "TILES": "constexpr", "NBUF": "constexpr",
            "num_warps": "constexpr",
        },
        constexprs={"HI": SEED_HEADS, "PAGE": SEED_PAGE, "BLOCK_N": WGMMA_BLOCK_N, "TILES": cfg["TILES"],
                    "NBUF": cfg["num_stages"], "num_warps": 4},
        num_warps=4,
        num_stages=cfg["num_stages"],
        detail=detail,
        aligned_ints=("page_bytes", "max_len", "max_pages", "n_tokens"),
    )


def _xcompile_case(fmt: str, dot: str, backend: str, q_dtype: str, cfg: Config, detail: str) -> XCompileCase:
    if dot == "wgmma":
        return _wgmma_xcompile_case(cfg, detail)
    desc = cfg.get("LOADS", "gather") == "descriptor"
    return XCompileCase(
        variant=variant_name(dot, backend),
        rendered=render_variant(fmt, dot, backend),
        kernel_name="logits_kernel",
        signature={
            "q_ptr": "*fp8e4nv" if q_dtype == "fp8" else "*bf16", "w_ptr": "*fp32", "cache_ptr": "*u8",
            "k_desc": f"tensordesc<u8[1, {cfg['BLOCK_N']}, {desc_box(get_format(fmt), dot)}]>" if desc else "*u8",
            "s_desc": f"tensordesc<i32[1, {cfg['BLOCK_N']}]>" if desc and scale_desc(get_format(fmt), dot, cfg["BLOCK_N"]) else "*u8",
            "bt_ptr": "*i32", "seq_ptr": "*i32", "ks_ptr": "*i32", "ke_ptr": "*i32", "out_ptr": "*fp32",
            "n_tokens": "i32", "max_len": "i32", "max_pages": "i32", "page_bytes": "i32",
            "HI": "constexpr", "PAGE": "constexpr", "BLOCK_N": "constexpr", "TILES": "constexpr", "QT": "constexpr",
            "HEADS": "constexpr", "TILE_LOOKUP": "constexpr", "Q_FP8": "constexpr", "KEYS_M": "constexpr",
            "PREFETCH": "constexpr", "DESC": "constexpr",
        },
        constexprs={
            "HI": SEED_HEADS, "PAGE": SEED_PAGE, "BLOCK_N": cfg["BLOCK_N"], "TILES": cfg["TILES"], "QT": cfg["QT"],
            "HEADS": cfg["HEADS"], "TILE_LOOKUP": SEED_PAGE % cfg["BLOCK_N"] == 0 and cfg["PAGE_LOOKUP"] == "tile",
            "Q_FP8": q_dtype == "fp8", "KEYS_M": cfg["MMA"] == "keys_m", "PREFETCH": bool(cfg.get("PREFETCH", 0)), "DESC": desc,
        },
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        detail=detail,
        # Page bytes are a multiple of 16 at every page size (16 to 256 records of 68 or 132 B);
        # so are the seed's context (64K), page count and batch.
        aligned_ints=("page_bytes", "max_len", "max_pages", "n_tokens"),
    )


class LogitsFamily(LogitsSpec, KernelFamily):
    def pool_args(self) -> tuple[frozenset[str], ...]:
        """Kernel pointer parameters that view a KV pool (one group per storage): they can be on
        either side of 2 GiB, which AMD's buffer ops specialise on (see tuner/warmup.py)."""
        return (frozenset({"cache_ptr", "k_desc", "s_desc"}),)  # the descriptors: the cache again, unless DESC

    def xcompile_cases(self) -> Sequence[XCompileCase]:
        """Every variant on the formats it reads, at the seed shape: the fp8 and scaled paths with an
        fp8 query, the bf16 path with a bf16 query; plus a prefill config (QT=2, 32 heads per dot),
        the heads-on-M orientation and PREFETCH of the fp8 and scaled paths, and descriptor loads on
        both formats (on the key-scaled paths, of the scale rows too)."""
        cases = []
        for fmt in LOGITS_FORMATS:
            for variant in VARIANTS:
                dot, backend = parse_variant(variant)
                if (backend != "soft" or dot in E2M1_ONLY_DOTS) and get_format(fmt).elem != "e2m1":
                    continue
                qdt = "bf16" if dot in DECODING_DOTS else "fp8"
                cfg = dot_config(default_config(fmt, qdt), dot, backend)
                if dot == "wgmma":
                    cfg = cfg.replace(TILES=16)  # as benchmarked
                cases.append(_xcompile_case(fmt, dot, backend, qdt, cfg, f"{fmt} q={qdt}"))
        prefill = default_config("mxfp4_68", "fp8").replace(QT=2, HEADS=32, BLOCK_N=128, PAGE_LOOKUP="key")
        cases.append(_xcompile_case("mxfp4_68", "fp8", "soft", "fp8", prefill, "mxfp4_68 q=fp8 QT=2 HEADS=32"))
        # The chunked fp8 path (mxfp4_68) and dot_scaled (fp8_132) in the other MMA orientation
        # than their default (keys on M for fp8 queries), and with PREFETCH.
        for fmt, dot in (("mxfp4_68", "fp8"), ("fp8_132", "scaled")):
            cfg = default_config(fmt, "fp8").replace(dot=dot)
            cases.append(_xcompile_case(fmt, dot, "soft", "fp8", cfg.replace(MMA="heads_m"), f"{fmt} q=fp8 heads_m"))
            cases.append(_xcompile_case(fmt, dot, "soft", "fp8", cfg.replace(PREFETCH=1), f"{fmt} q=fp8 prefetch"))
        # Tiles by tensor-descriptor loads (TMA on NVIDIA): whole rows (fp8_132, as measured fastest)
        # and 32-dim chunks (mxfp4_68's chunked paths).
        cfg = default_config("fp8_132", "fp8").replace(LOADS="descriptor", TILES=16, num_stages=3)
        cases.append(_xcompile_case("fp8_132", "fp8", "soft", "fp8", cfg, "fp8_132 q=fp8 descriptor"))
        cfg = default_config("mxfp4_68", "fp8").replace(LOADS="descriptor", TILES=16, num_stages=3)
        cases.append(_xcompile_case("mxfp4_68", "fp8", "soft", "fp8", cfg, "mxfp4_68 q=fp8 descriptor"))
        # The key-scaled paths' descriptor loads take the scale rows too (a second descriptor).
        for dot in KEY_SCALED_DOTS:
            cases.append(_xcompile_case("mxfp4_68", dot, "soft", "fp8", cfg.replace(dot=dot),
                                        "mxfp4_68 q=fp8 descriptor, scale rows too"))
        return cases

    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]:
        return make_inputs(key, bucket, device, seed)

    def probe_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]:
        """`make_inputs` for warmup-key enumeration (tuner.warmup.keys_for): launch-identical, cheap."""
        return make_inputs(key, bucket, device, seed, probe=True)

    def probe_contexts(self, bucket: Bucket) -> list[int]:
        """Contexts whose launches reach every specialisation class of the integers that follow the
        context: max_len and max_pages (its page count), since an engine's batch can have any
        longest context up to the bucket's (see `probe_contexts`)."""
        return probe_contexts(bucket.ctx or DECODE_CTX, SEED_PAGE)

    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any:
        return run_inputs(key, config, inputs)

    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        return verify_inputs(key, inputs, outputs)


FAMILY = LogitsFamily()
