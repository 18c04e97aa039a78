"""pack: the cache writer's catalog face. Its key is the record format on an arch (heads, topk and
window do not apply); its space tiles tokens and scale tiles per program.

The family also holds the MXFP4 query quantiser (templates/quant_query.py.j2): the same records
(`mxfp4_68`) written to a dense query, values uint8[T, Hi, 64] and scales uint8[T, Hi, 4], instead
of into a paged cache. Its key names the destination explicitly, formats=("mxfp4_68", "query")
(`pack_key(fmt, arch, "query")`), so a paged cache key and a query key never share configs; its
buckets count (token, head) rows, the unit the kernel works in, whatever the head count."""

from __future__ import annotations

from typing import Sequence

from catalog.codecs import E2M1_WRITE_BACKENDS, E4M3_BACKENDS, e2m1_backend_legality, e4m3_backend_legality
from catalog.core import Bucket, Config, ProblemKey
from catalog.families.base import FamilySpec
from catalog.formats import RecordFormat, get_format
from catalog.space import Param, Space
from templates import render as R

TEMPLATE = "pack.py.j2"
QUERY_TEMPLATE = "quant_query.py.j2"
# The destinations a pack key may name after its record format: a paged cache (the default, no
# name) or a dense query tensor ("query": the record formats of QUERY_FORMATS only).
QUERY_DEST = "query"
QUERY_FORMATS: tuple[str, ...] = ("mxfp4_68",)
# Token-count buckets: a decode step packs a few tokens, a prefill chunk thousands.
PACK_BUCKETS = (Bucket("N", 1, 64), Bucket("N", 65, 1024), Bucket("N", 1025, 16384), Bucket("N", 16385, 1 << 20))
# (token, head) rows of a query: a decode step of 1..8 tokens at 64 index heads, 64 tokens, a
# 1K-token and a 16K-token prefill chunk.
QUERY_BUCKETS = (Bucket("N", 1, 512), Bucket("N", 513, 4096), Bucket("N", 4097, 65536), Bucket("N", 65537, 1 << 20))
PACK_PAGE_SIZE = 64
# Defaults per format: (BLOCK_T, TILES_PER_PROG, num_warps), the fastest of a 40 (nvfp4_288) / 16
# config sweep packing 1M bf16 tokens on an H200 (benchmarks/results/pack_h200.md, triton 3.6.0).
# Fewer, fuller threads win: the kernel is bound by instruction issue, and a thread that owns whole
# tiles reduces them without shuffles.
MEASURED_DEFAULTS: dict[str, tuple[int, int, int]] = {
    "nvfp4_288": (4, 32, 2),
    "fp8_528": (8, 8, 1),
    "fp8_584": (8, 4, 1),
    "mxfp4_68": (4, 4, 1),
    "fp8_132": (16, 1, 2),
}


# The best pipelined configs measured (BLOCKS_PER_PROG=8, num_stages=2), as (backend, BLOCK_T,
# TILES_PER_PROG, num_warps): fp8_584 on sm_90, 445.1 us at 1M tokens against 649.4 for the
# default of the same run (benchmarks/results/pack_h200_onerun.md); 24 TPE trials of a tune did not
# draw it (benchmarks/results/tune_pack_fp8_584_pipelined_h200.log), so a search seeds it.
MEASURED_PIPELINED: dict[str, tuple[str, int, int, int]] = {
    "fp8_584": ("cvt", 4, 8, 1),
}


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def nt_pad(f: RecordFormat) -> int:
    """Scale tiles of a record padded to a power of two (the template's tile axis)."""
    return _next_pow2(f.n_tiles)


def space(fmt: str | RecordFormat) -> Space:
    """The pack search space for one record format. `backend` is the element conversion: an e2m1
    backend on the e2m1 formats, an e4m3 one on the fp8 formats (`backends_of`)."""
    f = get_format(fmt)
    nt = nt_pad(f)
    backends = backends_of(f)

    def _fits(c: Config) -> str | None:
        elems = c["BLOCK_T"] * c["TILES_PER_PROG"] * f.tile
        if elems > 8192:  # more than 8K fp32 values live per program spill on every target
            return f"{elems} elements per program is too many"
        if c["num_warps"] > 1 and elems < 32 * c["num_warps"]:
            return f"{elems} elements per program cannot occupy {c['num_warps']} warps"
        if (c["num_stages"] > 1) != (c["BLOCKS_PER_PROG"] > 1):
            return "a program packs one block, or several blocks pipelined over 2 stages"
        return None

    block_t, tiles, warps = MEASURED_DEFAULTS.get(f.name, (4, nt, 4))
    return Space(
        params=(
            Param("backend", backends, "soft", render=True),
            Param("BLOCK_T", (1, 2, 4, 8, 16), block_t),
            Param("TILES_PER_PROG", tuple(t for t in (1, 2, 4, 8, 16, 32) if t <= nt), tiles),
            Param("num_warps", (1, 2, 4, 8), warps),
            # One block of BLOCK_T rows a program, or 8 blocks in turn with the next block's words
            # loaded into shared memory while one is rounded (num_stages 2). fp8_584 on sm_90: cvt
            # 4/8/1 pipelined 445.1 us against 492.6 for the best one-block config of the same run
            # (benchmarks/results/pack_h200_onerun.md); 4 or 16 blocks and 3 stages were no faster
            # (benchmarks/results/pack_pipelined_h200.md). Two choices,
            # not a grid of them: the axis doubles the space (timing tables, searches) as it is.
            Param("BLOCKS_PER_PROG", (1, 8), 1),
            Param("num_stages", (1, 2), 1),
        ),
        constraints=(_fits,),
    )


def query_space(fmt: str | RecordFormat) -> Space:
    """The query quantiser's space: pack's tiles, one block a program (its kernel has no blocks loop)."""
    return space(check_query_format(fmt)).restrict({"BLOCKS_PER_PROG": (1,), "num_stages": (1,)})


# Parameters added to the space after configs were stored without them, with the value that runs
# those configs as they were tuned (one block a program, nothing pipelined: the kernel before).
LATER_PARAMS: dict[str, int] = {"BLOCKS_PER_PROG": 1}


def upgrade_config(config: Config) -> Config:
    """A stored config with the parameters it predates filled in (see LATER_PARAMS)."""
    missing = {k: v for k, v in LATER_PARAMS.items() if k not in config.as_dict()}
    return Config.from_dict({**config.as_dict(), **missing}) if missing else config


def default_config(fmt: str | RecordFormat) -> Config:
    return space(fmt).default()


def backends_of(fmt: str | RecordFormat) -> tuple[str, ...]:
    """The element conversions a writer of `fmt` can use: e2m1 backends for the e2m1 formats, e4m3
    backends for the fp8 ones (their scales are computed the same way either way)."""
    return E2M1_WRITE_BACKENDS if get_format(fmt).elem == "e2m1" else E4M3_BACKENDS


def variant_legality(backend: str, target: str) -> str | None:
    """Why the writer variant `backend` cannot run on `target` (None: it can): an e4m3 conversion's
    rule for the fp8 formats' own backends (cvt), the e2m1 table for the rest (`soft` is both)."""
    if backend in E4M3_BACKENDS and backend not in E2M1_WRITE_BACKENDS:
        return e4m3_backend_legality(backend, target)
    return e2m1_backend_legality(backend, target)


def backend_legality(fmt: str | RecordFormat, backend: str, target: str) -> str | None:
    """Why `backend` cannot run on `target` for records of `fmt` (None: it can)."""
    if backend not in backends_of(fmt):
        return f"{backend} does not convert {get_format(fmt).elem} elements (choose among {list(backends_of(fmt))})"
    return variant_legality(backend, target)


def render_variant(fmt: str | RecordFormat, backend: str) -> R.Rendered:
    f = get_format(fmt)
    if backend not in backends_of(f):
        raise ValueError(f"unknown {f.elem} backend {backend!r} for {f.name}; known: {list(backends_of(f))}")
    # The e2m1 codecs are rendered soft for fp8 records (their scale code uses none of them).
    e2m1 = backend if f.elem == "e2m1" else "soft"
    e4m3 = backend if f.elem != "e2m1" else "soft"
    return R.render(TEMPLATE, {"fmt": f, "e2m1_backend": e2m1, "e4m3_backend": e4m3})


def render_query_variant(fmt: str | RecordFormat, backend: str) -> R.Rendered:
    """The query quantiser's module for one e2m1 backend."""
    f = check_query_format(fmt)
    if backend not in E2M1_WRITE_BACKENDS:
        raise ValueError(f"unknown e2m1 backend {backend!r}; known: {list(E2M1_WRITE_BACKENDS)}")
    return R.render(QUERY_TEMPLATE, {"fmt": f, "e2m1_backend": backend})


def check_query_format(fmt: str | RecordFormat) -> RecordFormat:
    f = get_format(fmt)
    if f.name not in QUERY_FORMATS:
        raise ValueError(f"queries are quantised to {list(QUERY_FORMATS)}, not {f.name}")
    return f


def is_query_key(key: ProblemKey) -> bool:
    """Whether a pack key is the query quantiser's: formats (record format, "query")."""
    if len(key.formats) == 2 and key.formats[1] == QUERY_DEST:
        check_query_format(key.formats[0])
        return True
    if len(key.formats) != 1:
        raise ValueError(f"a pack key has formats (record format,) or (record format, {QUERY_DEST!r}), got {key.formats}")
    return False


def pack_bytes(fmt: str | RecordFormat, n_tokens: int, in_bytes: int = 2) -> int:
    """Bytes a pack of n tokens must read (input row + slot) and write (record)."""
    f = get_format(fmt)
    return n_tokens * (f.dims * in_bytes + 8 + f.bytes_per_token)


def pack_key(fmt: str, arch: str, dest: str | None = None) -> ProblemKey:
    """Pack has no heads/topk/window of its own; its key is the record format on an arch, and for
    the query quantiser (`dest="query"`) the destination after it."""
    if dest is None:
        return ProblemKey(kernel="pack", arch=arch, heads=0, topk=0, window=0, formats=(fmt,), head_dim=get_format(fmt).dims)
    if dest != QUERY_DEST:
        raise ValueError(f"a pack destination is a paged cache (None) or {QUERY_DEST!r}, got {dest!r}")
    f = check_query_format(fmt)
    return ProblemKey(kernel="pack", arch=arch, heads=0, topk=0, window=0, formats=(f.name, QUERY_DEST), head_dim=f.dims)


def query_bytes(fmt: str | RecordFormat, n_rows: int, in_bytes: int = 2) -> int:
    """Bytes a query quantisation of n rows must read (the rows) and write (values and scales)."""
    f = check_query_format(fmt)
    return n_rows * (f.dims * in_bytes + f.bytes_per_token)


class PackSpec(FamilySpec):
    name = "pack"
    template = TEMPLATE

    def variants(self) -> Sequence[str]:
        return E2M1_WRITE_BACKENDS + tuple(b for b in E4M3_BACKENDS if b not in E2M1_WRITE_BACKENDS)

    def legality(self, variant: str, target: str) -> str | None:
        return variant_legality(variant, target)

    def variant_of(self, config: Config) -> str:
        return str(config["backend"])

    def seed_configs(self, key: ProblemKey, target: str) -> list[Config]:
        """The default's tiles with each other element backend legal on `target` (nvfp4_288 on
        sm_90: swar at the default tiles, 1.54x over the default; 24 TPE trials drew other tiles
        with swar and stopped at 1.39x: benchmarks/results/tune_pack_h200.md), then the format's
        measured pipelined config where its backend is legal (MEASURED_PIPELINED; the cache's
        kernel only: the query's has no blocks loop)."""
        fmt = key.formats[0]
        dflt = self.default_config(key)
        seeds = [dflt.replace(backend=b) for b in backends_of(fmt)
                 if b != dflt["backend"] and backend_legality(fmt, b, target) is None]
        piped = MEASURED_PIPELINED.get(get_format(fmt).name)
        if piped and not is_query_key(key) and backend_legality(fmt, piped[0], target) is None:
            b, block_t, tiles, warps = piped
            seeds.append(dflt.replace(backend=b, BLOCK_T=block_t, TILES_PER_PROG=tiles, num_warps=warps,
                                      BLOCKS_PER_PROG=8, num_stages=2))
        return seeds

    def space(self, key: ProblemKey) -> Space:
        # The same tiles of the same records for both destinations; the query's kernel has no blocks loop.
        return query_space(key.formats[0]) if is_query_key(key) else space(key.formats[0])

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        return list(QUERY_BUCKETS if is_query_key(key) else PACK_BUCKETS)

    def render(self, key: ProblemKey, config: Config) -> R.Rendered:
        if is_query_key(key):
            return render_query_variant(key.formats[0], config["backend"])
        return render_variant(key.formats[0], config["backend"])

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        if is_query_key(key):
            return query_bytes(key.formats[0], bucket.rep)
        return pack_bytes(key.formats[0], bucket.rep)


SPEC = PackSpec()
