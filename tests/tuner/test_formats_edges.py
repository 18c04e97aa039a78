"""The reference codec and the pack kernel against bytes written out by hand (FORMATS.md edge cases).

Every expected byte below was worked out by hand from FORMATS.md's tables, not computed by the code
under test. Each case is checked twice: `tuner.formats.quantize` and the pack kernel (every variant
legal on the local target: the interpreter on a CPU machine) must both produce exactly these bytes.
"""

from __future__ import annotations

import pytest
import torch

from tuner.formats import FORMATS, alloc_cache, quantize, read_slots
from catalog.families.pack import backend_legality, backends_of, default_config
from tuner.kernels.pack import pack

NAN = float("nan")
INF = float("inf")
T126 = 2.0**-126  # smallest fp32 normal


def _next32(v: float, toward: float) -> float:
    """The adjacent fp32 value (math.nextafter works in float64, which fp32 would round back)."""
    return float(torch.nextafter(torch.tensor(v, dtype=torch.float32), torch.tensor(toward, dtype=torch.float32)))


def _row(dims: int, tiles: dict[int, list[float]], tile: int) -> torch.Tensor:
    x = torch.zeros(dims, dtype=torch.float32)
    for t, vals in tiles.items():
        x[t * tile : t * tile + len(vals)] = torch.tensor(vals, dtype=torch.float32)
    return x


def _bytes(*chunks: tuple[int, list[int]], n: int) -> list[int | None]:
    """Expected record bytes: None where a byte is not pinned by the case, else its value."""
    out: list[int | None] = [None] * n
    for start, vals in chunks:
        out[start : start + len(vals)] = vals
    return out


# e2m1 levels, their negations, both zeros, every tie, just past each tie, and tiny values, at scale 1.
MX_LEVELS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
             0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0,
             _next32(0.25, 1), _next32(0.75, 0), _next32(1.25, 2), _next32(5.0, 6),
             -2.5, 0.1, -1e-30]
# codes: 0 1 2 3 4 5 6 7 8 9 A B C D E F | 0 2 2 4 4 6 6 8 E | 1 1 3 7 | C 0 8
MX_LEVEL_BYTES = [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0x20, 0x42, 0x64, 0x86, 0x1E, 0x31, 0xC7, 0x80]


def _mxfp4_cases() -> list[tuple[str, torch.Tensor, list[int | None]]]:
    f = FORMATS["mxfp4_68"]
    levels = _row(128, {0: MX_LEVELS, 2: [T126, 3 * T126, -6 * T126], 3: [1.0, NAN, 2.0]}, 32)
    # tile 0: amax 6 -> s = pow2ceil(6/6) = 1 (ue8m0 127); tile 1: all zero -> s = 2**-126 (ue8m0 1);
    # tile 2: amax 6*2**-126 -> s = 2**-126, values 1, 3, -6; tile 3: NaN -> scale 0xFF, bytes 0.
    exp_levels = _bytes(
        (0, MX_LEVEL_BYTES), (16, [0] * 16), (32, [0x52, 0x0F] + [0] * 14), (48, [0] * 16),
        (64, [0x7F, 0x01, 0x01, 0xFF]), n=68,
    )
    # amax 3e38 -> 3e38/6 = 5e37 -> s = 2**126 (ue8m0 253); 3e38/2**126 = 3.526 -> code 6;
    # an inf tile -> 0xFF and zero bytes; -inf likewise.
    big = _row(128, {0: [3e38], 1: [INF, 1.0], 2: [-INF]}, 32)
    exp_big = _bytes((0, [0x06] + [0] * 15), (16, [0] * 48), (64, [0xFD, 0xFF, 0xFF, 0x01]), n=68)
    assert f.bytes_per_token == 68
    return [("mxfp4 levels", levels, exp_levels), ("mxfp4 huge/inf", big, exp_big)]


def _nvfp4_cases() -> list[tuple[str, torch.Tensor, list[int | None]]]:
    x = _row(512, {
        0: MX_LEVELS[:16],                      # amax 6 -> s = e4m3(1.0) = 0x38
        1: [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, 6.0],  # ties at s = 1
        2: [6.3, -6.3, 3.15],                   # 6.3/6 = 1.05 -> e4m3 1.0: 6.3 saturates to 6
        # 3: all zero -> amax/6 = 0 clamps to 2**-9 (0x01)
        4: [3 * 2.0**-9, -0.75 * 2.0**-9],      # amax/6 = 2**-10 clamps to 2**-9: values 3 and -0.75 (tie -> 1.0)
        5: [2688.0, 10000.0],                   # 10000/6 clamps to 448 (0x7E): 2688/448 = 6, 10000/448 saturates
        6: [7.5, 3.75, 1.875, 0.3125],          # s = 1.25 (0x3A): 6, 3, 1.5, 0.25 (tie -> 0)
        7: [INF, 1.0], 8: [-INF], 9: [NAN, 2.0],
    }, 16)
    tile_bytes = {
        0: [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE],
        1: [0x20, 0x42, 0x64, 0x86, 0x07, 0, 0, 0],
        2: [0xF7, 0x05, 0, 0, 0, 0, 0, 0],
        3: [0] * 8,
        4: [0xA5, 0, 0, 0, 0, 0, 0, 0],
        5: [0x77, 0, 0, 0, 0, 0, 0, 0],
        6: [0x57, 0x03, 0, 0, 0, 0, 0, 0],
        7: [0] * 8, 8: [0] * 8, 9: [0] * 8,
    }
    scales = [0x38, 0x38, 0x38, 0x01, 0x01, 0x7E, 0x3A, 0x7F, 0x7F, 0x7F] + [0x01] * 22
    chunks = [(t * 8, b) for t, b in tile_bytes.items()] + [(80, [0] * 176), (256, scales)]
    return [("nvfp4 edges", x, _bytes(*chunks, n=288))]


# e4m3 element edges at scale 1 (amax 448): max, ties to even, subnormal ties, zeros.
FP8_VALUES = [448.0, -448.0, 1.0, 1.0625, 1.1875, 1.5 * 2.0**-9, 2.0**-10, 0.75 * 2.0**-9, -0.0, 0.0,
              2.0**-6, 7 * 2.0**-9, 240.0, -1.0625]
FP8_BYTES = [0x7E, 0xFE, 0x38, 0x38, 0x3A, 0x02, 0x00, 0x01, 0x80, 0x00, 0x08, 0x07, 0x77, 0xB8]


def _fp8_528_cases() -> list[tuple[str, torch.Tensor, list[int | None]]]:
    x = _row(512, {
        0: FP8_VALUES,
        1: [464.0],     # 464/448 -> s = 2 (0x80); 232 is a tie between 224 and 240 -> 224 (0x76)
        # 2: zeros -> max(0, 1e-4) = 1e-4 -> s = 2**-13 (ue8m0 114 = 0x72)
        3: [1e-3],      # 1e-3/448 < 1e-4 -> s = 2**-13; 1e-3 * 2**13 = 8.192 -> 8 (0x50)
        4: [1e6],       # 1e6/448 = 2232.1 -> s = 4096 (0x8B); 244.14 -> 240 (0x77)
        5: [NAN], 6: [2.0, INF],
        7: [896.0],     # 896/448 = 2 exactly -> s = 2 (0x80); 448 -> 0x7E
    }, 32)
    chunks = [
        (0, FP8_BYTES + [0] * 18), (32, [0x76] + [0] * 31), (64, [0] * 32), (96, [0x50] + [0] * 31),
        (128, [0x77] + [0] * 31), (160, [0] * 64), (224, [0x7E] + [0] * 31), (256, [0] * 256),
        (512, [0x7F, 0x80, 0x72, 0x72, 0x8B, 0xFF, 0xFF, 0x80] + [0x72] * 8),
    ]
    return [("fp8_528 edges", x, _bytes(*chunks, n=528))]


def _fp8_584_cases() -> list[tuple[str, torch.Tensor, list[int | None]]]:
    x = _row(512, {0: [448.0, 1.0625], 3: [NAN]}, 64)
    # bf16 dims 448..: 1.0, 1+2**-8 (tie -> 1.0), 1+3*2**-8 (tie -> 0x3F82), -2.0, NaN (quiet, 0x7FC0)
    x[448:453] = torch.tensor([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -2.0, NAN])
    chunks = [
        (0, [0x7E, 0x38] + [0] * 62), (64, [0] * 384),
        (448, [0x80, 0x3F, 0x80, 0x3F, 0x82, 0x3F, 0x00, 0xC0, 0xC0, 0x7F] + [0] * 118),
        (576, [0x7F, 0x72, 0x72, 0xFF, 0x72, 0x72, 0x72, 0x00]),
    ]
    return [("fp8_584 edges", x, _bytes(*chunks, n=584))]


def _fp8_132_cases() -> list[tuple[str, torch.Tensor, list[int | None]]]:
    ok = _row(128, {0: FP8_VALUES}, 128)
    bad = _row(128, {0: [1.0, NAN]}, 128)
    zero = torch.zeros(128)
    return [
        ("fp8_132 edges", ok, _bytes((0, FP8_BYTES + [0] * 114), (128, [0x00, 0x00, 0x80, 0x3F]), n=132)),
        ("fp8_132 nan", bad, _bytes((0, [0] * 128), (128, [0x00, 0x00, 0xC0, 0x7F]), n=132)),
        # zeros: s = pow2ceil(1e-4) = 2**-13 = fp32 0x39000000
        ("fp8_132 zero", zero, _bytes((0, [0] * 128), (128, [0x00, 0x00, 0x00, 0x39]), n=132)),
    ]


CASES = {
    "mxfp4_68": _mxfp4_cases(),
    "nvfp4_288": _nvfp4_cases(),
    "fp8_528": _fp8_528_cases(),
    "fp8_584": _fp8_584_cases(),
    "fp8_132": _fp8_132_cases(),
}
ALL = [(fmt, name, x, exp) for fmt, cases in CASES.items() for name, x, exp in cases]


def _assert_bytes(got: torch.Tensor, expected: list[int | None], label: str) -> None:
    got_l = got.tolist()
    assert len(got_l) == len(expected)
    wrong = [(i, hex(g), hex(e)) for i, (g, e) in enumerate(zip(got_l, expected)) if e is not None and g != e]
    assert not wrong, f"{label}: bytes differ at (index, got, expected) {wrong[:12]}"
    assert all(e is not None for e in expected), f"{label}: every byte of the record is pinned"


@pytest.mark.parametrize("fmt,name,x,expected", ALL, ids=[c[1] for c in ALL])
def test_reference_matches_hand_written_bytes(fmt: str, name: str, x: torch.Tensor, expected: list[int | None]) -> None:
    _assert_bytes(quantize(x[None], fmt)[0], expected, name)


def _legal_backends(fmt: str, target: str) -> list[str]:
    return [b for b in backends_of(fmt) if backend_legality(fmt, b, target) is None]


@pytest.mark.parametrize("fmt", list(CASES))
def test_pack_kernel_matches_hand_written_bytes(fmt: str, target_name: str, device: str) -> None:
    cases = CASES[fmt]
    x = torch.stack([c[1] for c in cases]).to(device)
    page = 16
    slots = torch.arange(3, 3 + len(cases), dtype=torch.int64, device=device)
    for backend in _legal_backends(fmt, target_name):
        cache = alloc_cache(fmt, 2, page, device=device, fill=0xCD)
        pack(x, slots, cache, fmt, page, default_config(fmt).replace(backend=backend))
        recs = read_slots(cache, slots, fmt, page).cpu()
        for i, (name, _, expected) in enumerate(cases):
            _assert_bytes(recs[i], expected, f"{name} [{backend}]")


def test_query_quantiser_matches_hand_written_bytes(target_name: str, device: str) -> None:
    """The MXFP4 query quantiser writes each (token, head) row's mxfp4_68 record as two dense
    tensors: its 64 data bytes in `values`, its 4 scale bytes in `scales`, the bytes above."""
    from tuner.formats import quantize_query
    from tuner.kernels.pack import quant_query

    cases = CASES["mxfp4_68"]
    x = torch.stack([c[1] for c in cases])[None]  # one token, a head per case
    for backend in _legal_backends("mxfp4_68", target_name):
        v, s = quant_query(x.to(device), default_config("mxfp4_68").replace(backend=backend))
        for i, (name, _, expected) in enumerate(cases):
            _assert_bytes(torch.cat([v[0, i], s[0, i]]).cpu(), expected, f"{name} query [{backend}]")
    rv, rs = quantize_query(x)
    for i, (name, _, expected) in enumerate(cases):
        _assert_bytes(torch.cat([rv[0, i], rs[0, i]]), expected, f"{name} query reference")
