"""pack: the cache writer's catalog face. Its key is the record format on an arch (heads, topk and
window do not apply); its space tiles tokens and scale tiles per program."""

from __future__ import annotations

from typing import Sequence

from catalog.codecs import E2M1_BACKENDS, e2m1_backend_legality
from catalog.core import Bucket, Config, ProblemKey
from catalog.families.base import FamilySpec
from catalog.formats import RecordFormat, get_format
from catalog.space import Param, Space
from templates import render as R

TEMPLATE = "pack.py.j2"
# Token-count buckets: a decode step packs a few tokens, a prefill chunk thousands.
PACK_BUCKETS = (Bucket("N", 1, 64), Bucket("N", 65, 1024), Bucket("N", 1025, 16384), Bucket("N", 16385, 1 << 20))
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


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def nt_pad(f: RecordFormat) -> int:
    """Scale tiles of a record padded to a power of two (the template's tile axis)."""
    return _next_pow2(f.n_tiles)


def space(fmt: str | RecordFormat) -> Space:
    """The pack search space for one record format. The e2m1 backend is an axis only where the
    format has e2m1 elements; elsewhere the codec is integer e4m3 and the axis would be a no-op."""
    f = get_format(fmt)
    nt = nt_pad(f)
    backends = E2M1_BACKENDS if f.elem == "e2m1" else ("soft",)

    def _fits(c: Config) -> str | None:
        elems = c["BLOCK_T"] * c["TILES_PER_PROG"] * f.tile
        if elems > 8192:  # more than 8K fp32 values live per program spill on every target
            return f"{elems} elements per program is too many"
        if c["num_warps"] > 1 and elems < 32 * c["num_warps"]:
            return f"{elems} elements per program cannot occupy {c['num_warps']} warps"
        return None

    block_t, tiles, warps = MEASURED_DEFAULTS.get(f.name, (4, nt, 4))
    return Space(
        params=(
            Param("backend", backends, "soft", render=True),
            Param("BLOCK_T", (1, 2, 4, 8, 16), block_t),
            Param("TILES_PER_PROG", tuple(t for t in (1, 2, 4, 8, 16, 32) if t <= nt), tiles),
            Param("num_warps", (1, 2, 4, 8), warps),
            Param("num_stages", (1,), 1),  # no loop to pipeline
        ),
        constraints=(_fits,),
    )


def default_config(fmt: str | RecordFormat) -> Config:
    return space(fmt).default()


def render_variant(fmt: str | RecordFormat, backend: str) -> R.Rendered:
    f = get_format(fmt)
    if backend not in E2M1_BACKENDS:
        raise ValueError(f"unknown e2m1 backend {backend!r}")
    return R.render(TEMPLATE, {"fmt": f, "e2m1_backend": backend})


def pack_bytes(fmt: str | RecordFormat, n_tokens: int, in_bytes: int = 2) -> int:
    """Bytes a pack of n tokens must read (input row + slot) and write (record)."""
    f = get_format(fmt)
    return n_tokens * (f.dims * in_bytes + 8 + f.bytes_per_token)


def pack_key(fmt: str, arch: str) -> ProblemKey:
    """Pack has no heads/topk/window of its own; its key is the record format on an arch."""
    return ProblemKey(kernel="pack", arch=arch, heads=0, topk=0, window=0, formats=(fmt,), head_dim=get_format(fmt).dims)


class PackSpec(FamilySpec):
    name = "pack"
    template = TEMPLATE

    def variants(self) -> Sequence[str]:
        return E2M1_BACKENDS

    def legality(self, variant: str, target: str) -> str | None:
        return e2m1_backend_legality(variant, target)

    def variant_of(self, config: Config) -> str:
        return str(config["backend"])

    def space(self, key: ProblemKey) -> Space:
        return space(key.formats[0])

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        return list(PACK_BUCKETS)

    def render(self, key: ProblemKey, config: Config) -> R.Rendered:
        return render_variant(key.formats[0], config["backend"])

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        return pack_bytes(key.formats[0], bucket.rep)


SPEC = PackSpec()
