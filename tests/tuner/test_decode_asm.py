"""The wgmma decode path's e4m3 and e2m1 -> bf16 inline PTX, run on the CPU by a small
interpreter of the integer instructions it uses (mov, prmt, shl, shr, and, lop3), up to the packed
FMA that applies the scale. The asm strings are read from the rendered module, so what is checked
is what ships."""

from __future__ import annotations

import re

import numpy as np
import torch

from catalog.families.decode import render_wgmma

MASK32 = np.uint64(0xFFFFFFFF)


def _asm_of(function: str) -> list[str]:
    source = render_wgmma("nvfp4_288", "fp8_528").source  # both conversions
    m = re.search(rf"def {function}\(b, s\):.*?asm=\"\"\"\{{(.*?)\}}\"\"\"", source, re.S)
    assert m, function
    lines = [ln.strip().rstrip(";") for ln in m.group(1).strip().splitlines()]
    return [ln for ln in lines if ln and not ln.startswith(".reg")]


def _prmt(a: np.ndarray, b: np.ndarray, sel: int) -> np.ndarray:
    # PTX prmt.b32, default mode: bytes 0-3 of a, 4-7 of b; a selector nibble's bit 3 replicates
    # the selected byte's sign bit over the whole byte.
    both = (b << np.uint64(32)) | a
    out = np.zeros_like(a)
    for i in range(4):
        s = (sel >> (4 * i)) & 0xF
        byte = (both >> np.uint64(8 * (s & 7))) & np.uint64(0xFF)
        if s & 8:
            byte = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
        out |= byte << np.uint64(8 * i)
    return out


def _lop3(a: np.ndarray, b: np.ndarray, c: np.ndarray, lut: int) -> np.ndarray:
    out = np.zeros_like(a)
    for i in range(8):
        if lut >> i & 1:
            out |= ((a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)) & MASK32
    return out


def _run(lines: list[str], w0: np.ndarray, w1: np.ndarray) -> dict[int, np.ndarray]:
    """The first operand of each `fma.rn.bf16x2 $k, m, $6, z` (the bf16 pair before the scale), by k."""
    regs: dict[str, np.ndarray] = {"$4": w0, "$5": w1}

    def val(tok: str) -> np.ndarray:
        return regs[tok] if tok in regs else np.full_like(w0, int(tok, 0))

    fma_in: dict[int, np.ndarray] = {}
    for ln in lines:
        op, rest = ln.split(None, 1)
        args = [t.strip() for t in rest.split(",")]
        if op == "mov.b32":
            regs[args[0]] = val(args[1])
        elif op == "prmt.b32":
            regs[args[0]] = _prmt(val(args[1]), val(args[2]), int(args[3], 0))
        elif op == "shl.b32":
            regs[args[0]] = (val(args[1]) << np.uint64(int(args[2]))) & MASK32
        elif op == "shr.u32":
            regs[args[0]] = val(args[1]) >> np.uint64(int(args[2]))
        elif op == "and.b32":
            regs[args[0]] = val(args[1]) & val(args[2])
        elif op == "lop3.b32":
            regs[args[0]] = _lop3(val(args[1]), val(args[2]), val(args[3]), int(args[4], 0))
        elif op == "fma.rn.bf16x2":
            # the scale ($6 after e4m3's two words, $5 after e2m1's one), then -0.0 added
            assert args[2:] in (["$6", "z"], ["$5", "z"]) and int(regs["z"][0]) == 0x80008000, ln
            fma_in[int(args[0][1:])] = val(args[1]).copy()
        else:
            raise AssertionError(f"instruction the interpreter does not know: {ln}")
    assert sorted(fma_in) == [0, 1, 2, 3], lines
    return fma_in


def _pairs() -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    # Every (e_i, e_{i+4}) byte pair for each of the four pairs, the other six bytes random.
    rng = np.random.default_rng(5)
    n = 256 * 256
    codes = rng.integers(0, 256, size=(4 * n, 8), dtype=np.uint64)
    grid = np.arange(n, dtype=np.uint64)
    for k in range(4):
        codes[k * n:(k + 1) * n, k] = grid & np.uint64(0xFF)
        codes[k * n:(k + 1) * n, k + 4] = grid >> np.uint64(8)
    w0 = sum(codes[:, i] << np.uint64(8 * i) for i in range(4))
    w1 = sum(codes[:, 4 + i] << np.uint64(8 * i) for i in range(4))
    return w0, w1, [(k, k + 4) for k in range(4)]


def test_e4m3_asm_places_each_code_times_two_to_the_minus_120() -> None:
    # The shipped conversion: output k is the bf16 pair (e_k, e_k+4), each code's bits such that
    # the bf16 they spell is the e4m3 value times 2**-120 (every finite code, subnormals and -0
    # included; the NaN codes 0x7F / 0xFF read as +-480 * 2**-120, which a record never holds),
    # in 16 instructions for eight values (one sign-replicating prmt, a shift and a mask a pair, the
    # FMA; the mov of -0.0 makes 17 lines).
    w0, w1, pairs = _pairs()
    asm = _asm_of("_e4m3_scaled_bf16")
    assert len(asm) == 17 and sum(ln.startswith("prmt") for ln in asm) == 4
    out = _run(asm, w0, w1)
    codes = np.concatenate([np.stack([(w0 >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)], 1),
                            np.stack([(w1 >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)], 1)], 1)
    for k, (lo, hi) in enumerate(pairs):
        for half, e in ((0, lo), (1, hi)):
            bits = ((out[k] >> np.uint64(16 * half)) & np.uint64(0xFFFF)).astype(np.int16)
            got = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float()
            code = torch.from_numpy(codes[:, e].astype(np.uint8))
            want = code.view(torch.float8_e4m3fn).float() * 2.0 ** -120
            finite = (code & 0x7F) != 0x7F
            assert torch.equal(got[finite], want[finite]), (k, half)
            assert torch.equal(torch.signbit(got), code >= 0x80), (k, half)  # -0 included
            assert torch.equal(got[~finite].abs(), torch.full_like(got[~finite], 480 * 2.0 ** -120))


def _nibble_pairs() -> tuple[np.ndarray, list[int]]:
    # A word of e2m1 codes e0..e7 (e_i in nibble i): every (e_i, e_i+4) pair for each of the four
    # pairs, the other nibbles random.
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 16, size=(4 * 256, 8), dtype=np.uint64)
    grid = np.arange(256, dtype=np.uint64)
    for k in range(4):
        codes[k * 256:(k + 1) * 256, k] = grid & np.uint64(0xF)
        codes[k * 256:(k + 1) * 256, k + 4] = grid >> np.uint64(4)
    return sum(codes[:, i] << np.uint64(4 * i) for i in range(8)), codes


def test_e2m1_asm_places_each_code_times_two_to_the_minus_126() -> None:
    # The shipped e2m1 conversion: output k is the bf16 pair (e_k, e_k+4), each spelling the code's
    # value times 2**-126 (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; the sign bit kept, -0 included),
    # in 17 instructions for eight values (a shift, then a sign-replicating prmt, a shift and a mask
    # a pair, the FMA; with the mov of -0.0, 18 lines).
    w, codes = _nibble_pairs()
    asm = _asm_of("_e2m1_scaled_bf16")
    assert len(asm) == 18 and sum(ln.startswith("prmt") for ln in asm) == 4
    out = _run(asm, w, w)
    values = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    for k in range(4):
        for half, e in ((0, k), (1, k + 4)):
            bits = ((out[k] >> np.uint64(16 * half)) & np.uint64(0xFFFF)).astype(np.uint16)
            got = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float()
            c = torch.from_numpy(codes[:, e].astype(np.int64))
            want = torch.where(c >= 8, -1.0, 1.0) * values[c & 7] * 2.0 ** -126
            assert torch.equal(got, want) and torch.equal(torch.signbit(got), c >= 8), (k, half)
