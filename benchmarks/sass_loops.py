"""What a disassembled kernel's SASS says without a GPU: each instruction's class (tensor-core ops,
global and shared memory, barriers, ...) and its innermost tile loops, each with its role, its
classes and what a forward branch inside it lets a trip skip. Pure functions of `sass_ops`' list
(benchmarks/static_profile.py compiles the kernels; tests check these on lists written out)."""

from __future__ import annotations

import bisect
import collections
from typing import Any

from benchmarks.common import SassOp, alu_share

CLASSES = {  # SASS opcode prefix -> class reported
    "HGMMA": "wgmma", "HMMA": "mma.sync", "QGMMA": "wgmma", "IMMA": "mma.sync",
    "LDG": "ld.global", "STG": "st.global", "LDS": "ld.shared", "STS": "st.shared", "LDSM": "ldmatrix",
    "BAR": "barrier", "SHFL": "shuffle", "F2F": "convert", "I2F": "convert", "F2FP": "convert", "PRMT": "byte-permute",
    "LDL": "local (spill)", "STL": "local (spill)", "LDGSTS": "cp.async", "UTMALDG": "tma",
    "CCTL": "prefetch",  # CCTL.E.PF2: prefetch.global.L2
    # wgmma.wait_group: a warpgroup's wait for its MMAs (WARPGROUP.ARRIVE, wgmma.fence, stays
    # "other"); one before each HGMMA is ptxas serializing them (C7514 and kin)
    "WARPGROUP.DEPBAR": "wgmma wait",
}


# Longest prefix first: LDGSTS (cp.async) is not an LDG. Matched against the whole mnemonic
# ("WARPGROUP.DEPBAR.LE"), which starts with the opcode.
_BY_LENGTH = sorted(CLASSES.items(), key=lambda kv: -len(kv[0]))


def sass_class(op: SassOp) -> str:
    """The class `static_profile` reports an instruction under ("other" for the rest)."""
    return next((cls for prefix, cls in _BY_LENGTH if op.mnemonic.startswith(prefix)), "other")


LOOP_MIN = 200  # instructions: smaller loops (a wait's spin, a short epilogue loop) are not listed


def loops(sass: list[SassOp], min_len: int = LOOP_MIN) -> list[dict[str, Any]]:
    """Every innermost loop of at least min_len instructions (a backward branch's span holding no
    other such span): its address range, role and instruction classes. In a warp-specialised
    kernel each partition's tile loop is one of them, so the producer's per-tile cost (role
    'producer': global loads, no MMA) and where the spills land can be read off without a GPU."""
    addrs = [o.addr for o in sass]  # ascending: a span's instructions are a slice

    def body_of(lo: int, hi: int) -> list[SassOp]:
        return sass[bisect.bisect_left(addrs, lo):bisect.bisect_right(addrs, hi)]

    spans = sorted({(o.target, o.addr) for o in sass if o.target is not None and o.target < o.addr
                    and len(body_of(o.target, o.addr)) >= min_len})
    inner = [(lo, hi) for lo, hi in spans
             if not any((a, b) != (lo, hi) and lo <= a and b <= hi for a, b in spans)]
    out = []
    for lo, hi in inner:
        body = body_of(lo, hi)
        ops: collections.Counter = collections.Counter()
        for o in body:
            ops[sass_class(o)] += 1
        role = ("mma" if ops["wgmma"] or ops["mma.sync"]
                else "producer" if ops["ld.global"] or ops["cp.async"] else "other")
        alu = alu_share(collections.Counter(o.opcode for o in body))
        # What each forward branch within the loop jumps over, longest first: a trip that takes
        # one is that much shorter than the loop's count (a block under a uniform condition).
        skips = sorted((len(body_of(o.addr, o.target)) - 2 for o in body
                        if o.target is not None and o.addr < o.target <= hi), reverse=True)
        out.append({"range": f"{lo:#x}-{hi:#x}", "role": role, "instructions": len(body),
                    "skip": skips[0] if skips else 0, "skips": skips, "alu": alu, "ops": dict(ops)})
    return out
