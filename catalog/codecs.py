"""The e2m1 conversion backends every template that converts e2m1 shares (templates/_codecs.py.j2),
and where each may be rendered: a variant with one vendor's inline asm must never be rendered for
another (DESIGN.md, architecture facts)."""

from __future__ import annotations

E2M1_BACKENDS: tuple[str, ...] = ("soft", "ptx", "gfx950")
# Encoding only (the writers: pack): "swar" rounds bf16 inputs two elements a 32-bit instruction,
# the halfword bit patterns of a word compared with the scaled thresholds by integer adds that
# cannot carry across the halves (templates/_codecs.py.j2 `_e2m1_pack2_swar`). Plain integer
# Triton, so legal wherever `soft` is; fp32 inputs take the soft rounding. "bf16x2" rounds the
# same words by sm_90's packed bf16 instructions (`_e2m1_pack2_bf16x2`: abs.bf16x2 magnitudes,
# set.bf16x2 flags and fma.rn.bf16x2 steps to the next threshold; the tile max by max.NaN.bf16x2),
# on the FMA pipes: 52-58% fewer integer-pipe SASS than swar at the measured tiles, the pipe that
# binds swar (benchmarks/results/pack_bf16x2/README.md).
# PTX, NVIDIA sm_90+.
E2M1_WRITE_BACKENDS: tuple[str, ...] = ("soft", "swar", "bf16x2", "ptx", "gfx950")
# Decoding only (the cache readers): "lut" looks e2m1 magnitudes up in a byte-permute (PTX prmt)
# table, four nibbles a lookup, and writes fp32 bit patterns (or, for a bf16 dot, bf16 products
# with the scale) directly; it has no encoding side.
E2M1_READ_BACKENDS: tuple[str, ...] = E2M1_BACKENDS + ("lut",)

_E2M1_ILLEGAL: dict[tuple[str, str], str] = {
    ("ptx", "sm_90"): "cvt.rn.satfinite.e2m1x2.f32 needs sm_100a or newer; ptxas rejects it on sm_90",
    ("ptx", "gfx942"): "PTX inline asm on AMDGPU aborts the compiler (unknown asm constraint 'f')",
    ("ptx", "gfx950"): "PTX inline asm on AMDGPU aborts the compiler (unknown asm constraint 'f')",
    ("ptx", "interp"): "Triton's interpreter has no inline asm",
    ("gfx950", "sm_90"): "AMDGPU inline asm cannot be compiled by the NVPTX backend",
    ("gfx950", "sm_100"): "AMDGPU inline asm cannot be compiled by the NVPTX backend",
    ("gfx950", "gfx942"): "v_cvt_scalef32_pk_*fp4* exists only from gfx950 on",
    ("gfx950", "interp"): "Triton's interpreter has no inline asm",
    ("bf16x2", "gfx942"): "its packed bf16 rounding is PTX inline asm (set and fma .bf16x2, sm_90+)",
    ("bf16x2", "gfx950"): "its packed bf16 rounding is PTX inline asm (set and fma .bf16x2, sm_90+)",
    ("bf16x2", "interp"): "Triton's interpreter has no inline asm",
    ("lut", "gfx942"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("lut", "gfx950"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("lut", "interp"): "Triton's interpreter has no inline asm",
}


# The e4m3 conversion backends of the fp8 record writers (pack): "soft" rounds with integer ops
# (templates/_codecs.py.j2 `_e4m3_encode`); "cvt" converts element pairs with the hardware's
# cvt.rn.satfinite.e4m3x2.f32 (one instruction for two elements, where the integer rounding takes
# about a dozen each: benchmarks/results/pack_issue_limit_sm90.md).
E4M3_BACKENDS: tuple[str, ...] = ("soft", "cvt")

_E4M3_ILLEGAL: dict[tuple[str, str], str] = {
    ("cvt", "gfx942"): "PTX inline asm on AMDGPU aborts the compiler (unknown asm constraint 'f')",
    ("cvt", "gfx950"): "PTX inline asm on AMDGPU aborts the compiler (unknown asm constraint 'f')",
    ("cvt", "interp"): "Triton's interpreter has no inline asm",
}


def e4m3_backend_legality(backend: str, target: str) -> str | None:
    """Where an fp8 writer's e4m3 backend may be rendered (cvt...e4m3x2 needs sm_89 or newer)."""
    if backend not in E4M3_BACKENDS:
        raise ValueError(f"unknown e4m3 backend {backend!r}; known: {list(E4M3_BACKENDS)}")
    if target not in ("sm_90", "sm_100", "gfx942", "gfx950", "interp"):
        return None if backend == "soft" else f"{backend} is only known legal on its own architecture"
    return _E4M3_ILLEGAL.get((backend, target))


# Every e2m1 backend of either side, and those written in plain Triton (legal on every target).
_E2M1_KNOWN: tuple[str, ...] = tuple(dict.fromkeys(E2M1_READ_BACKENDS + E2M1_WRITE_BACKENDS))
_E2M1_PORTABLE: tuple[str, ...] = ("soft", "swar")


def e2m1_backend_legality(backend: str, target: str) -> str | None:
    if backend not in _E2M1_KNOWN:
        raise ValueError(f"unknown e2m1 backend {backend!r}; known: {list(_E2M1_KNOWN)}")
    if target not in ("sm_90", "sm_100", "gfx942", "gfx950", "interp"):
        # Architectures without rows of their own: only the portable backends are known to be legal.
        return None if backend in _E2M1_PORTABLE else f"{backend} is only known legal on its own architecture"
    return _E2M1_ILLEGAL.get((backend, target))
