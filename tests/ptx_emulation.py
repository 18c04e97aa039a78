"""A few PTX instructions executed in Python, for inline asm that Triton's interpreter cannot
run: the rendered asm is checked on every input it can see, instruction by instruction."""

from __future__ import annotations

import ast
import math
import struct


def asm_of(source: str, fn: str | None = None) -> tuple[str, str, int]:
    """(asm text, constraints, pack) of the `tl.inline_asm_elementwise` call in a rendered module,
    the only one, or the one in function `fn`."""
    tree = ast.parse(source)
    if fn is not None:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn)
    call = next(n for n in ast.walk(tree)
                if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "inline_asm_elementwise")
    kw = {k.arg: k.value for k in call.keywords}
    return ast.literal_eval(kw["asm"]), ast.literal_eval(kw["constraints"]), ast.literal_eval(kw["pack"])


def bf16_value(h: int) -> float:
    """The value of a bf16 bit pattern (the top half of an fp32)."""
    return struct.unpack("<f", struct.pack("<I", (h & 0xFFFF) << 16))[0]


def bf16_bits(x: float) -> int:
    """x rounded to bf16 (round to nearest even, through fp32); NaN as the canonical 0x7FFF."""
    if math.isnan(x):
        return 0x7FFF
    try:
        f = struct.unpack("<I", struct.pack("<f", x))[0]
    except OverflowError:
        return 0xFF80 if x < 0 else 0x7F80
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16) & 0xFFFF


def _fma_bf16x2(a: int, b: int, c: int) -> int:
    # Each half: a * b + c in float64, then rounded to bf16. A product of two bf16 values is exact
    # in a float64 and IEEE signed zeros carry over (-0 + -0 = -0, +0 + -0 = +0), so this is fma.rn
    # whenever the sum is exact too, as with the -0.0 addend the decoders use.
    out = 0
    for k in (0, 16):
        x, y, z = (bf16_value(v >> k) for v in (a, b, c))
        out |= bf16_bits(x * y + z) << k
    return out


def run_ptx(asm: str, regs: dict[str, int]) -> dict[str, int]:
    """Execute the few PTX instructions the e2m1 lookups use (mov, and, or, not, shl, shr.u32,
    add.u32, mul.lo.u32, prmt with and without its sign-replicating mode, lop3, fma.rn.bf16x2,
    cvt.rn.relu.bf16x2.f32) on 32-bit values (results mod 2**32), as the PTX ISA defines them.
    `$n` operands are registers."""
    def val(tok: str) -> int:
        tok = tok.strip()
        return regs[tok] if tok in regs else int(tok, 0)

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}" or line.startswith(".reg"):
            continue
        op, _, rest = line.partition(" ")
        d, *src = [t.strip() for t in rest.split(",")]
        a = [val(t) for t in src]
        if op == "mov.b32":
            r = a[0]
        elif op == "and.b32":
            r = a[0] & a[1]
        elif op == "or.b32":
            r = a[0] | a[1]
        elif op == "shl.b32":
            r = a[0] << a[1]
        elif op == "shr.u32":
            r = a[0] >> a[1]
        elif op == "not.b32":
            r = ~a[0]
        elif op == "add.u32":
            r = a[0] + a[1]
        elif op == "mul.lo.u32":
            r = a[0] * a[1]
        elif op == "fma.rn.bf16x2":
            r = _fma_bf16x2(*a)
        elif op == "lop3.b32":
            # Bit i of the result is bit (a_i << 2 | b_i << 1 | c_i) of the immediate table.
            r = 0
            for i in range(32):
                r |= ((a[3] >> (((a[0] >> i) & 1) << 2 | ((a[1] >> i) & 1) << 1 | ((a[2] >> i) & 1))) & 1) << i
        elif op == "cvt.rn.relu.bf16x2.f32":
            # d.hi = bf16(relu(a)), d.lo = bf16(relu(b)); NaN stays NaN.
            def relu_bits(x: int) -> int:
                f = struct.unpack("<f", struct.pack("<I", x & 0xFFFFFFFF))[0]
                return bf16_bits(f if math.isnan(f) or f > 0 else 0.0)

            r = relu_bits(a[0]) << 16 | relu_bits(a[1])
        elif op == "prmt.b32":
            pool = [(a[0] >> (8 * i)) & 0xFF for i in range(4)] + [(a[1] >> (8 * i)) & 0xFF for i in range(4)]
            r = 0
            for k in range(4):
                sel = (a[2] >> (4 * k)) & 0xF
                byte = pool[sel & 7]
                r |= ((0xFF if byte & 0x80 else 0) if sel & 8 else byte) << (8 * k)
        else:
            raise AssertionError(f"unexpected PTX instruction {op!r}: the emulation must learn it")
        regs[d] = r & 0xFFFFFFFF
    return regs
