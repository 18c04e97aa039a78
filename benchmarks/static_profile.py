"""Static profile of decode / logits configs on an NVIDIA target, without a GPU: compile each config
as a real launch specialises it (16-byte aligned pointers), read registers and spills from ptxas,
disassemble the cubin with the cuobjdump that ships with Triton and count SASS instructions by
class (tensor-core ops, global/shared memory, barriers, shuffles, conversions).

A static count is not a time: loops run their bodies many times and latency is invisible here. It
answers structural questions before device time is spent: does a variant use wgmma (HGMMA) or
mma.sync (HMMA), does it spill, how many barriers and shared-memory round trips a tile costs.

    python benchmarks/static_profile.py logits --fmt mxfp4_68 --cfg "" --cfg "MMA=keys_m"
    python benchmarks/static_profile.py decode --fmt nvfp4_288,fp8_528 --cfg "" --cfg "BLOCK_N=64,MMA=keys_m"
    python benchmarks/static_profile.py decode --fmt nvfp4_288,fp8_528 --cfg "MMA=wgmma" --loop   # the Gluon kernel
    python benchmarks/static_profile.py decode --fmt fp8_584,fp8_584 --cfg "MMA=wgmma_hm"   # its 64-head build
    python benchmarks/static_profile.py decode --fmt fp8_584,fp8_584 --cfg "MMA=wgmma_hmws,PREFETCH=1"
    python benchmarks/static_profile.py decode --fmt fp8_584,fp8_584 --cfg "MMA=wgmma_hmpv" --loops  # each partition's tile loop
    python benchmarks/static_profile.py logits --fmt mxfp4_68 --cfg "dot=fp8keylut" --loop   # + the loop's mix
    python benchmarks/static_profile.py decode --fmt fp8_584,fp8_584 --cfg "MMA=wgmma_hmpv" --json  # for scripts
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.pop("TRITON_INTERPRET", None)  # the modules' kernels must be JITFunctions

from benchmarks.common import SassOp, alu_share, main_loop, parse_cfg, sass_ops  # noqa: E402
from tuner.compile import _request, compile_with_stats  # noqa: E402
from tuner.kernels.base import XCompileCase  # noqa: E402

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
LOOP_TOP = 8  # the most frequent instructions of the main loop, with --loop


def cases_for(kernel: str, formats: list[str], q_dtype: str, text: str) -> list[tuple[str, XCompileCase]]:
    """The kernels one launch of the config runs, named (decode LISTS=separate: one per list)."""
    if kernel == "decode":
        import tuner.kernels.decode as D

        cfg = parse_cfg(text, D.default_config(*formats))
        fmts = [D.get_format(f) for f in formats]
        if cfg["MMA"] == "wgmma_hm":  # the heads-on-M build: 64 heads, two warpgroups
            return [(text, D.FAMILY._wgmma_case(*fmts, split=True, heads=D.WGMMA_HM_HEADS, warps=D.WGMMA_HM_WARPS,
                                                heads_on_m=True))]
        if cfg["MMA"] == "wgmma_hmws":  # the heads-on-M warp-specialised build: 64 heads, a producer warpgroup
            return [(text, D.FAMILY._wgmma_case(*fmts, split=True, heads=D.WGMMA_HM_HEADS, warps=D.WGMMA_HM_WARPS,
                                                heads_on_m=True, build="ws", prefetch=bool(cfg["PREFETCH"])))]
        if cfg["MMA"] in ("wgmma_hmpv", "wgmma_hmpvs"):  # its QK / PV split: 64 heads, the QK warpgroup's 4 warps
            return [(text, D.FAMILY._wgmma_case(*fmts, split=True, heads=D.WGMMA_HM_HEADS, warps=D.WGMMA_HMPV_WARPS,
                                                heads_on_m=True, build="pv", prefetch=bool(cfg["PREFETCH"]),
                                                share=cfg["MMA"] == "wgmma_hmpvs"))]
        if cfg["MMA"] == "wgmma_hmpvc":  # the QK / PV split as a 2-CTA cluster (num_ctas=2)
            return [(text, D.xcompile.cluster_case(*fmts, split=True, prefetch=bool(cfg["PREFETCH"])))]
        if cfg["MMA"] in ("wgmma_ws", "wgmma_wss"):  # the warp-specialised build: 16 heads, producer warps beside
            return [(text, D.FAMILY._wgmma_case(*fmts, split=True, build="ws", prefetch=bool(cfg["PREFETCH"]),
                                                share=cfg["MMA"] == "wgmma_wss"))]
        if cfg["MMA"] == "wgmma":  # the Gluon kernel (its split build: partials, as most launches)
            # One warpgroup unless the text asks for num_warps=8 (two, at their 32 heads).
            warps = int(cfg["num_warps"]) if "num_warps" in text else D.WGMMA_WARPS
            heads = D.wgmma_heads(cfg.replace(num_warps=warps), 64, *fmts)
            return [(text, D.FAMILY._wgmma_case(*fmts, split=True, heads=heads, warps=warps))]
        apart, fused = cfg["LISTS"] != "both", cfg["COMBINE"] == "fused"
        if cfg["LISTS"] == "separate":
            return [(f"{text} [{name}]", D.FAMILY._main_case(*fmts, cfg["backend"], cfg, split=True, apart=True,
                                                             fused=fused, only=only))
                    for only, name in ((1, "comp"), (2, "win"))]
        return [(text, D.FAMILY._main_case(*fmts, cfg["backend"], cfg, split=True, apart=apart, fused=fused))]
    import tuner.kernels.logits as L

    cfg = parse_cfg(text, L.default_config(formats[0], q_dtype))
    return [(text, L._xcompile_case(formats[0], cfg["dot"], cfg["backend"], q_dtype, cfg, formats[0]))]


def profile(case: XCompileCase, target: str) -> dict[str, Any]:
    k, stats = compile_with_stats(_request(case, target))
    ops: collections.Counter = collections.Counter()
    sass = sass_ops(k.asm["cubin"])
    for op in sass:
        for prefix, cls in _BY_LENGTH:
            if op.mnemonic.startswith(prefix):
                ops[cls] += 1
                break
    loop = main_loop(sass)
    top = collections.Counter(o.mnemonic for o in loop).most_common(LOOP_TOP)
    return {**stats, "sass": len(sass), "loop": len(loop), "ops": dict(ops), "loop_top": top, "loops": loops(sass)}


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
            ops[next((cls for prefix, cls in _BY_LENGTH if o.mnemonic.startswith(prefix)), "other")] += 1
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", choices=["decode", "logits"])
    ap.add_argument("--fmt", required=True, help="decode: comp,win; logits: the cache format")
    ap.add_argument("--q-dtype", default="fp8", help="logits query dtype (fp8 or bf16)")
    ap.add_argument("--cfg", action="append", default=None, help="NAME=v,... over the default (repeatable)")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--loop", action="store_true", help="also list the main loop's most frequent instructions")
    ap.add_argument("--loops", action="store_true",
                    help=f"also tabulate every innermost loop of {LOOP_MIN}+ instructions (each partition's per-tile cost)")
    ap.add_argument("--json", action="store_true", help="print each config's profile as one JSON list instead")
    args = ap.parse_args(argv)
    if args.json:
        print(json.dumps([{"config": name or "default", **profile(case, args.target)} for text in args.cfg or [""]
                          for name, case in cases_for(args.kernel, args.fmt.split(","), args.q_dtype, text)]))
        return 0
    # sass: the whole kernel; loop: its outermost loop's body (per tile; see common.main_loop).
    cols = ["registers", "spills", "shared_bytes", "sass", "loop"] + sorted(set(CLASSES.values()))
    print("| config | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    tops: list[str] = []
    inner: list[tuple[str, dict[str, Any]]] = []
    for text in args.cfg or [""]:
        for name, case in cases_for(args.kernel, args.fmt.split(","), args.q_dtype, text):
            try:
                p = profile(case, args.target)
            except Exception as e:  # a variant that does not compile is a row, not a crash
                print(f"| {name or 'default'} | compile error: {str(e).splitlines()[0][:120]} |")
                continue
            row = [p.get(c, p["ops"].get(c, 0)) for c in cols]
            print(f"| {name or 'default'} | " + " | ".join(str(v) for v in row) + " |", flush=True)
            if args.loop:
                tops.append(f"- {name or 'default'}: " + ", ".join(f"{m} {n}" for m, n in p["loop_top"]))
            if args.loops:
                inner.extend((name or "default", lp) for lp in p["loops"])
    if tops:
        print("\nMain loop, most frequent instructions:\n\n" + "\n".join(tops))
    if inner:
        classes = sorted({c for _, lp in inner for c in lp["ops"]})
        print("\nInnermost loops (a trip each: a tile of a partition's loop):\n")
        print("| config | loop | role | instructions | skippable | integer pipe | " + " | ".join(classes) + " |")
        print("|---|---|---|---|---|---|" + "---|" * len(classes))
        for name, lp in inner:
            print(f"| {name} | {lp['range']} | {lp['role']} | {lp['instructions']} | {lp['skip']} | {lp['alu']} | "
                  + " | ".join(str(lp["ops"].get(c, 0)) for c in classes) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
