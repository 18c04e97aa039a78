"""The wgmma path's builds side by side, in one run (H200).

Its heads-on-M build (`MMA=wgmma_hm`, decode_wgmma_hm_kernel: 64 heads a program on the MMAs' M,
each tile read and dequantized once per 64 heads) beside `MMA=wgmma` with one and two warpgroups
(16 or 32 heads a program, each head group re-reading the tiles) and its warp-specialised build
(`MMA=wgmma_ws`: producer warps dequantize the next tile under this one's MMAs; `wgmma_wsr`: two
register-loading producer warpgroups and three K buffers), the heads-on-M
warp-specialised builds (`wgmma_hmws`, `wgmma_hmpv`), and the warp-specialised builds with
`PREFETCH=1` (records prefetched into L2 a tile further ahead), on the fp8_584 pair (issue 28's V4
record), at H = 16, 64, 128 and T = 1, 8, 64: the same rotated input sets (records from DRAM, as
bench_decode.py rotates them), CUDA-graph replay medians, each launch checked against the float64
reference first. Writes results/decode_hm_h200.{json,md}. GPU only (sm_90).

    python benchmarks/bench_decode_hm.py                      # on the H200
    python benchmarks/bench_decode_hm.py --heads 64 --ts 64   # one cell
    python benchmarks/bench_decode_hm.py --only "1 warpgroup, splits auto" --only warp-specialised  # two builds
    python benchmarks/bench_decode_hm.py --pair fp8_584+fp8_584 --pair nvfp4_288+fp8_528  # both of issue 28's pairs

A build a pair's space refuses (one whose buffers exceed sm_90's shared memory) is left out for
that pair.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_decode import PAGE, Shape, _pool, _sets, _time  # noqa: E402
from benchmarks.common import provenance  # noqa: E402
from catalog.families.decode import decode_bytes, default_config, space  # noqa: E402
from catalog.families.decode_wgmma import wgmma_config  # noqa: E402
from tuner.kernels.decode import decode, verify_decode  # noqa: E402

PAIR = ("fp8_584", "fp8_584")


def _runs(pair: tuple[str, str], heads: int) -> dict[str, Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]]]:
    """Each build's launch on one input set, by label: the builds `pair`'s space takes at `heads`."""
    base = wgmma_config(default_config(*pair))
    hm = wgmma_config(base.replace(MMA="wgmma_hm"))
    ws = wgmma_config(base.replace(MMA="wgmma_ws"))
    hmws = wgmma_config(base.replace(MMA="wgmma_hmws"))
    hmpv = wgmma_config(base.replace(MMA="wgmma_hmpv"))

    def cfg_run(cfg: Any) -> Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]]:
        return lambda s: decode(s["q"], s["comp_cache"], pair[0], s["topk_idx"], s["win_cache"], pair[1],
                                s["window_idx"], PAGE, s["sm_scale"], s["attn_sink"], cfg, out=s["out"],
                                workspace=s["workspace"])

    builds = {"wgmma 1 warpgroup, splits auto": base, "wgmma 2 warpgroups, splits auto": base.replace(num_warps=8),
              "wgmma 2 warpgroups, splits 1": base.replace(num_warps=8, NUM_SPLITS=1),
              "heads on M, splits auto": hm, "heads on M, splits 1": hm.replace(NUM_SPLITS=1),
              "warp-specialised, splits auto": ws, "warp-specialised, splits 1": ws.replace(NUM_SPLITS=1),
              # Its two register-loading producers and three K buffers (no stage buffers).
              "warp-specialised, register producers, splits auto": ws.replace(MMA="wgmma_wsr"),
              "warp-specialised, register producers, splits 1": ws.replace(MMA="wgmma_wsr", NUM_SPLITS=1),
              "heads on M warp-specialised, splits auto": hmws,
              "heads on M warp-specialised, splits 1": hmws.replace(NUM_SPLITS=1),
              "heads on M QK/PV split, splits auto": hmpv, "heads on M QK/PV split, splits 1": hmpv.replace(NUM_SPLITS=1),
              # The warp-specialised builds' producer prefetching records into L2 a tile further ahead.
              "warp-specialised, splits auto, L2 prefetch": ws.replace(PREFETCH=1),
              "heads on M warp-specialised, splits auto, L2 prefetch": hmws.replace(PREFETCH=1),
              "heads on M QK/PV split, splits auto, L2 prefetch": hmpv.replace(PREFETCH=1),
              # Each tile converted once for all head groups (65-128 heads; the warp-specialised one past 16).
              "heads on M QK/PV split, shared tiles, splits auto, L2 prefetch": hmpv.replace(MMA="wgmma_hmpvs",
                                                                                            PREFETCH=1),
              "warp-specialised, shared tiles, splits auto": ws.replace(MMA="wgmma_wss"),
              # Two 64-head groups a 2-CTA cluster, each CTA converting half of every tile for both.
              "heads on M QK/PV split, 2-CTA cluster, splits auto, L2 prefetch": hmpv.replace(MMA="wgmma_hmpvc",
                                                                                              PREFETCH=1),
              "heads on M QK/PV split, 2-CTA cluster, splits 1, L2 prefetch": hmpv.replace(MMA="wgmma_hmpvc",
                                                                                           PREFETCH=1, NUM_SPLITS=1)}
    sp = space(*pair, heads)
    return {label: cfg_run(cfg) for label, cfg in builds.items() if sp.infeasible(cfg) is None}


def _prefetch_ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: each ", L2 prefetch" row's time over its build's without it (same run)."""
    base = {(r["pair"], r["H"], r["T"], r.get("records"), r["build"]): r["us"] for r in rows}
    out = []
    for r in rows:
        plain = base.get((r["pair"], r["H"], r["T"], r.get("records"), r["build"].removesuffix(", L2 prefetch")))
        if r["build"].endswith(", L2 prefetch") and r["us"] and plain:
            out.append(f"| {r['pair']} | {r['H']} | {r['T']} | {r['build'].removesuffix(', L2 prefetch')} | "
                       f"{plain:.2f} | {r['us']:.2f} | {r['us'] / plain:.3f} |")
    if not out:
        return []
    return ["", "PREFETCH=1 against the same build without it (same run):", "",
            "| pair | H | T | build | us | with L2 prefetch us | ratio |", "|---|---|---|---|---|---|---|", *out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, action="append", default=None, help="default: 16, 64, 128")
    ap.add_argument("--ts", default="1,8,64")
    ap.add_argument("--pair", action="append", default=None,
                    help="comp+win record formats (repeatable; default: fp8_584+fp8_584)")
    ap.add_argument("--only", action="append", default=None,
                    help="time only the builds whose label contains this, or is it with a leading '=' (repeatable; "
                         "default: every build)")
    ap.add_argument("--records", choices=("dram", "l2"), default="dram",
                    help="dram: input sets rotated past the L2 (serving's case, the default); l2: one set, launched "
                         "again and again, so its records stay in L2 (how issue 28's FlashMLA figures at 128 heads "
                         "were taken)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    if any(len(p.split("+")) != 2 for p in args.pair or []):
        ap.error("--pair takes comp+win, e.g. nvfp4_288+fp8_528")
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("bench_decode_hm runs on an sm_90 GPU only", file=sys.stderr)
        return 2
    prov = provenance()
    l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
    rows = []
    pairs = [tuple(p.split("+")) for p in args.pair] if args.pair else [PAIR]
    for pair in pairs:
        name = "+".join(pair)
        for heads in args.heads or [16, 64, 128]:
            shape = Shape(False, heads)
            pools = {pair[0] + ":comp": _pool(pair[0], shape.comp_pool, "cuda", seed=1),
                     pair[1] + ":win": _pool(pair[1], shape.win_pool, "cuda", seed=11)}
            for t in [int(x) for x in args.ts.split(",")]:
                n_sets = 1 if args.records == "l2" else \
                    max(2, min(512, math.ceil(2 * l2 / decode_bytes(*pair, t, heads, shape.topk, shape.window))))
                sets = _sets(pools, pair, shape, t, n_sets, "cuda", seed=100 + t)
                for label, run in _ordered(_runs(pair, heads), args.only):
                    try:
                        bad = verify_decode(pair[0], pair[1], sets[0], run(sets[0]))
                    except Exception as e:  # a build that fails to compile or launch is a row
                        bad = f"{type(e).__name__}: {e}"[:300]
                    us = None if bad else _time(lambda run=run: [run(s) for s in sets], len(sets), True)
                    rows.append({"pair": name, "H": heads, "T": t, "build": label, "records": args.records.upper(),
                                 "us": us, "error": bad})
                    print(f"  {name:18s} H={heads:<4d} T={t:<3d} {label:34s} "
                          + (f"{us:8.2f} us" if us else f"FAIL {bad}"), flush=True)
                    _write(Path(args.out), prov, pairs, rows)  # each row kept if a later launch hangs
    out = Path(args.out)
    print(f"wrote {out / 'decode_hm_h200.md'}")
    return 0 if all(r["us"] for r in rows) else 1


def _ordered(runs: dict[str, Callable], only: list[str] | None) -> list[tuple[str, Callable]]:
    """The builds to time: all of `runs`, or those whose label contains an `only` pattern (a pattern
    `=label`: that label alone), in the order of the first pattern each matches (a build that may
    hang, never run on a GPU, goes last)."""
    if not only:
        return list(runs.items())

    def hit(o: str, label: str) -> bool:
        return o[1:] == label if o.startswith("=") else o in label

    rank = {label: min((i for i, o in enumerate(only) if hit(o, label)), default=None) for label in runs}
    return sorted(((lb, run) for lb, run in runs.items() if rank[lb] is not None), key=lambda lr: rank[lr[0]])


def _write(out: Path, prov: dict[str, Any], pairs: list[tuple[str, ...]], rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_hm_h200.json").write_text(json.dumps({"provenance": prov, "pairs": ["+".join(p) for p in pairs], "rows": rows},
                                                        indent=1))
    lines = ["# The wgmma path's builds side by side: one and two warpgroups, heads on M, warp-specialised", "",
             f"{prov['gpu']}, torch {prov['torch']}, triton {prov['triton']}, CUDA {prov['cuda']}, {prov['date']}. "
             "top-k 512, window 128, page 64, sink on; records from DRAM (input sets rotated past the L2) or, where the "
             "records column says L2, one input set launched again and again; CUDA-graph replay medians; each build "
             "checked against the float64 reference before it is timed (`benchmarks/bench_decode_hm.py`).", "",
             "| pair | H | T | build | records | us |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['pair']} | {r['H']} | {r['T']} | {r['build']} | {r.get('records', 'DRAM')} | "
              + (f"{r['us']:.2f}" if r["us"] else f"failed: {r['error']}") + " |" for r in rows]
    lines += _prefetch_ratios(rows)
    (out / "decode_hm_h200.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
