"""A few PTX integer instructions executed in Python, for inline asm that Triton's interpreter
cannot run: the rendered asm is checked on every input it can see, instruction by instruction."""

from __future__ import annotations

import ast


def asm_of(source: str) -> tuple[str, str, int]:
    """(asm text, constraints, pack) of the one `tl.inline_asm_elementwise` call in a rendered module."""
    call = next(n for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "inline_asm_elementwise")
    kw = {k.arg: k.value for k in call.keywords}
    return ast.literal_eval(kw["asm"]), ast.literal_eval(kw["constraints"]), ast.literal_eval(kw["pack"])


def run_ptx(asm: str, regs: dict[str, int]) -> dict[str, int]:
    """Execute the few PTX integer instructions the e2m1 lookups use (mov, and, or, shl, shr.u32,
    prmt without mode) on 32-bit values, as the PTX ISA defines them. `$n` operands are registers."""
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
