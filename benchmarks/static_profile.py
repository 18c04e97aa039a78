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
import collections
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.pop("TRITON_INTERPRET", None)  # the modules' kernels must be JITFunctions

from benchmarks.common import main_loop, parse_cfg, sass_ops  # noqa: E402
from benchmarks.sass_loops import CLASSES, LOOP_MIN, loops, sass_class  # noqa: E402
from tuner.compile import _request, compile_with_stats  # noqa: E402
from tuner.kernels.base import XCompileCase  # noqa: E402

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
        if cfg["MMA"] == "wgmma_wsr":  # the same with two register-loading producer warpgroups
            return [(text, D.FAMILY._wgmma_case(*fmts, split=True, build="wsr"))]
        if cfg["MMA"] in ("wgmma_ws", "wgmma_wss"):  # warp-specialised: 16 heads, producer warps beside
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
        cls = sass_class(op)
        if cls != "other":
            ops[cls] += 1
    loop = main_loop(sass)
    top = collections.Counter(o.mnemonic for o in loop).most_common(LOOP_TOP)
    return {**stats, "sass": len(sass), "loop": len(loop), "ops": dict(ops), "loop_top": top, "loops": loops(sass)}


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
