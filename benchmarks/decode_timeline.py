"""What binds a wgmma decode build, seen from inside it (H200): each program's timeline of tile
steps, stamped with the SM's cycle counter by the wgmma template's trace build
(`render_wgmma(..., trace=True)`: the same kernels with `_stamp` probes and a last argument,
trace_ptr), summarised per build as medians over programs and tiles:

- the prologue (program start to its first tile: the query into shared memory, the first slots);
- producer: its data wait (the cp.async builds: tile t's copies landing), its wait for an empty K
  buffer (warp-specialised builds: the consumer's MMAs of two tiles before), its conversion
  (dequantize, store, hand over; in the heads-on-M warp-specialised builds this includes the
  loads' landing); in the builds without a producer (wgmma, wgmma_hm) the same steps in line;
- the cluster build (wgmma_hmpvc): its producer's wait for the peer's consumers' word (pfree) between its empty
  wait and its conversion (then half a tile, and the bulk copy's issue);
- consumer (wgmma_hmpv: its QK warpgroup): its wait for a ready K buffer, its compute (MMAs,
  softmax); wgmma_hmpv's PV warpgroup: its tile from P ready to its arrive;
- the first tile (program start to its first tile attended), the tile period (one consumer 'done'
  to the next; its 90th percentile too) and the program's span (start to key loop end).

The side that waits for the other is not what binds. Cycles become us at the clock each program
saw (its cycles over its %globaltimer ns, start to end). Records from DRAM: the traced launch reads
the least recently used of input sets larger than the L2 together.

    python benchmarks/decode_timeline.py                  # on the H200: the default shapes, both pairs
    python benchmarks/decode_timeline.py --build wgmma_ws --heads 16 --t 64
    python benchmarks/decode_timeline.py --build wgmma_hmpv --heads 128 --t 64 --resident   # and from L2
    python benchmarks/decode_timeline.py --static         # CPU: each traced build compiled for sm_90
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Event numbers of the trace build's probes (templates/decode_wgmma.py.j2, _stamp): per tile.
P_TOP, P_LANDED, P_FREE, P_DONE, C_WAIT, C_READY, C_DONE, PV_READY, PV_DONE, P_PEER = range(10)
# The heads-on-M split's (and the cluster build's) prologue parts, once a program: its producer's start
# and its first list's start (after the cluster's start phase) as events 10 and 11 of tile 0, its QK
# warpgroup's start and its query in shared memory as events 10 and 11 of tile 1.
S_IN, S_READY = 10, 11
# The ws producer's trip between P_TOP and P_LANDED: the next tile's copies issued (and committed),
# then the slots two tiles ahead loaded (their loads issued; they land at their use a trip later).
P_ISSUED, P_SLOTS = 16, 17
# The heads-on-N consumers' tile between C_READY and C_DONE: MMA 1 (S) waited for (with the ws
# consumer's previous PV MMAs, which it leaves in flight into this tile), then MMA 2 (PV) issued,
# after the softmax and P's store (the ws consumer's C_DONE is there: it does not wait for PV).
C_S, C_PV = 18, 19
TRACE_TILES, TRACE_EVENTS, TRACE_START = 16, 20, 12  # the template's TRACE_* constants

# (build, heads, T): the builds at the shapes issue 26 and 28 measure them at (the seed shape's T=1
# and T=64 lines, 128 heads at T=64); each warp-specialised one with PREFETCH 0 and 1.
DEFAULT_RUNS: tuple[tuple[str, int, int], ...] = (("wgmma", 16, 1), ("wgmma", 16, 64), ("wgmma_ws", 16, 64),
                                                  ("wgmma_wsr", 16, 64),
                                                  ("wgmma_hm", 128, 64), ("wgmma_hmws", 128, 64),
                                                  ("wgmma_hmpv", 128, 64), ("wgmma_hmpvc", 128, 64))


def summarise(trace: Sequence[Sequence[Sequence[int]]], n_tiles: Sequence[int]) -> dict[str, Any]:
    """Medians (us) of a traced launch: `trace[program][tile][event]` as the kernel stamped it (0:
    not stamped), `n_tiles[program]` the tiles the program walked (at most TRACE_TILES are kept).
    A program's clock is its cycles over its ns from start to end; phases it has no stamps for
    (a build without that partition) are left out."""
    phases: dict[str, list[float]] = {k: [] for k in ("prologue", "producer start", "producer cluster wait",
                                                      "producer first slots", "qk start", "query",
                                                      "producer data wait", "producer empty wait",
                                                      "producer copy issue", "producer slot loads", "producer copy wait",
                                                      "producer peer wait", "producer conversion", "producer trip",
                                                      "producer loop tail", "consumer ready wait",
                                                      "consumer compute", "consumer mma 1 wait", "consumer softmax",
                                                      "consumer mma 2 wait", "pv tile", "first tile", "tile period",
                                                      "program", "epilogue")}
    clocks = []
    starts_ns, lasts_ns = [], []
    for prog, n in zip(trace, n_tiles):
        start, end = prog[0][TRACE_START:TRACE_START + 2], prog[0][TRACE_START + 2:TRACE_START + 4]
        last = prog[1][TRACE_START:TRACE_START + 2]  # the last store's issue (tile 1's slots)
        if n <= 0 or end[1] <= start[1] or end[0] <= start[0]:
            continue
        starts_ns.append(start[1])
        if last[1] >= end[1]:
            lasts_ns.append(last[1])
        ghz = (end[0] - start[0]) / (end[1] - start[1])  # cycles a ns
        clocks.append(ghz)
        us = 1e-3 / ghz  # us a cycle
        rows = [prog[i] for i in range(min(n, TRACE_TILES))]

        def span(row: Sequence[int], a: int, b: int) -> float | None:
            return (row[b] - row[a]) * us if row[a] and row[b] else None

        for r in rows:
            # The cluster build's producer waits for the peer's word (P_PEER) between its empty wait and
            # its conversion.
            conv = P_PEER if r[P_PEER] else P_FREE
            for name, a, b in (("producer data wait", P_TOP, P_LANDED), ("producer empty wait", P_LANDED, P_FREE),
                               ("producer copy issue", P_TOP, P_ISSUED), ("producer slot loads", P_ISSUED, P_SLOTS),
                               ("producer copy wait", P_SLOTS, P_LANDED), ("producer peer wait", P_FREE, P_PEER),
                               ("producer conversion", conv, P_DONE), ("consumer ready wait", C_WAIT, C_READY),
                               ("consumer compute", C_READY, C_DONE), ("pv tile", PV_READY, PV_DONE)):
                v = span(r, a, b)
                if v is not None:
                    phases[name].append(v)
            # The consumer's tile in parts (C_PV only where it waits for MMA 2 inside the tile).
            softmax_end = C_PV if r[C_PV] else C_DONE
            for name, a, b in (("consumer mma 1 wait", C_READY, C_S), ("consumer softmax", C_S, softmax_end),
                               ("consumer mma 2 wait", C_PV, C_DONE)):
                v = span(r, a, b)
                if v is not None:
                    phases[name].append(v)
        for r, nxt in zip(rows, rows[1:]):  # a producer's whole trip, and what follows its conversion
            # (only where one producer takes both tiles: MMA=wgmma_wsr's two take them in turn, and
            # the next tile's trip starts before this one's conversion ends)
            if r[P_DONE] and nxt[P_TOP] >= r[P_DONE]:
                for name, ev in (("producer trip", P_TOP), ("producer loop tail", P_DONE)):
                    phases[name].append((nxt[P_TOP] - r[ev]) * us)
        if rows[0][P_TOP]:
            phases["prologue"].append((rows[0][P_TOP] - start[0]) * us)
        if prog[0][S_IN] and prog[0][S_READY] and rows[0][P_TOP]:
            phases["producer start"].append((prog[0][S_IN] - start[0]) * us)
            phases["producer cluster wait"].append((prog[0][S_READY] - prog[0][S_IN]) * us)
            phases["producer first slots"].append((rows[0][P_TOP] - prog[0][S_READY]) * us)
        if prog[1][S_IN] and prog[1][S_READY]:
            phases["qk start"].append((prog[1][S_IN] - start[0]) * us)
            phases["query"].append((prog[1][S_READY] - prog[1][S_IN]) * us)
        done = [r[C_DONE] for r in rows if r[C_DONE]]
        if done:  # start to the first tile attended: the prologue and one whole tile's chain
            phases["first tile"].append((done[0] - start[0]) * us)
        phases["tile period"] += [(b - a) * us for a, b in zip(done, done[1:])]
        phases["program"].append((end[0] - start[0]) * us)
        if last[0] >= end[0]:
            phases["epilogue"].append((last[0] - end[0]) * us)
    out: dict[str, Any] = {k: round(statistics.median(v), 3) for k, v in phases.items() if v}
    if len(phases["tile period"]) >= 2:  # the slow tiles a median hides (a program waits on its slowest)
        out["tile period p90"] = round(statistics.quantiles(phases["tile period"], n=10)[-1], 3)
    if starts_ns:  # the launch as a whole (%globaltimer, one clock for every SM)
        out["start spread"] = round((max(starts_ns) - min(starts_ns)) * 1e-3, 3)
        if lasts_ns:
            out["launch span"] = round((max(lasts_ns) - min(starts_ns)) * 1e-3, 3)
    out["clock GHz"] = round(statistics.median(clocks), 3) if clocks else None
    out["programs"] = len(clocks)
    return out


@functools.lru_cache(maxsize=4)
def _trace_offsets(pair: tuple[str, str]) -> dict[str, dict[str, int]]:
    """Where the cluster trace build places its buffers (its probes move the barriers, so not the
    catalog's offsets): two CPU compiles, once a pair for all of its runs."""
    from catalog.formats import get_format
    from tuner.kernels.decode.cluster import ZERO_OFFSETS, placed_offsets
    from tuner.kernels.decode.xcompile import cluster_case

    cf, wf = get_format(pair[0]), get_format(pair[1])
    return {k: placed_offsets(cluster_case(cf, wf, k == "split", offsets=ZERO_OFFSETS, trace=True))
            for k in ("whole", "split")}


def _traced_module(pair: tuple[str, str], buf: Any, cluster: bool = False, launched: list[Any] | None = None) -> Any:
    """The trace build's module (`cluster`: the cluster build's), its kernels (TRACED) called with
    trace_ptr=buf; each launch's compiled kernel appended to `launched`."""
    from catalog.families.decode import render_wgmma
    from templates import render as R

    mod = R.load(render_wgmma(*pair, trace=True, cluster=cluster, offsets=_trace_offsets(pair) if cluster else None))

    class Bound:
        def __init__(self, kernel: Any) -> None:
            self.kernel = kernel

        def __getitem__(self, grid: Any) -> Any:
            def launch(*a: Any, **kw: Any) -> Any:
                compiled = self.kernel[grid](*a, trace_ptr=buf, **kw)
                if launched is not None:
                    launched.append(compiled)
                return compiled
            return launch

        def warmup(self, *a: Any, **kw: Any) -> Any:  # the cluster launcher's offsets check
            return self.kernel.warmup(*a, trace_ptr=buf, **kw)

    class Traced:
        def __getattr__(self, name: str) -> Any:
            k = getattr(mod, name)
            return Bound(k) if name in {n for n, _, _ in TRACED} else k

    return Traced()


@functools.lru_cache(maxsize=4)
def _pool_once(fmt: str, n_slots: int, seed: int) -> Any:
    """bench_decode's record pool, made once for every run of a pair."""
    from benchmarks.bench_decode import _pool

    return _pool(fmt, n_slots, "cuda", seed=seed)


def run(pair: tuple[str, str], build: str, heads: int, t: int, prefetch: int, resident: bool = False) -> dict[str, Any]:
    """One traced launch of `build` (NUM_SPLITS automatic) on records from DRAM (`resident`: from L2,
    the set just launched launched again); its summary."""
    import torch

    import tuner.kernels.decode.launch as launch
    from benchmarks.bench_decode import PAGE, Shape, _sets
    from catalog.families.decode import decode_bytes, default_config
    from catalog.families.decode_wgmma import WGMMA_CLUSTER_MMAS, wgmma_config
    from tuner.kernels.decode import decode, verify_decode

    shape = Shape(False, heads)
    cfg = wgmma_config(default_config(*pair).replace(MMA=build, PREFETCH=prefetch))
    pools = {pair[0] + ":comp": _pool_once(pair[0], shape.comp_pool, 1),
             pair[1] + ":win": _pool_once(pair[1], shape.win_pool, 11)}
    l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
    n_sets = 1 if resident else max(2, math.ceil(2 * l2 / decode_bytes(*pair, t, heads, shape.topk, shape.window)))
    sets = _sets(pools, pair, shape, t, n_sets, "cuda", seed=100 + t)
    groups = -(-heads // launch.wgmma_program_heads(cfg, heads, *pair))
    parts, per = launch.wgmma_plan(cfg, t, shape.topk, shape.window, torch.device("cuda"), groups)
    buf = torch.zeros(t * parts * groups * TRACE_TILES * TRACE_EVENTS, dtype=torch.int64, device="cuda")
    real, real_cluster = launch._wgmma_module, launch.cluster_module
    launched: list[Any] = []
    traced = _traced_module(pair, buf, cluster=build in WGMMA_CLUSTER_MMAS, launched=launched)
    launch._wgmma_module = launch.cluster_module = lambda comp, win: traced
    try:
        def call(s: dict[str, Any]) -> Any:
            return decode(s["q"], s["comp_cache"], pair[0], s["topk_idx"], s["win_cache"], pair[1], s["window_idx"],
                          PAGE, s["sm_scale"], s["attn_sink"], cfg, out=s["out"], workspace=s["workspace"])

        bad = verify_decode(pair[0], pair[1], sets[-1], call(sets[-1]))  # compiles; checks the probes change nothing
        for s in sets[1:]:  # set 0 becomes the least recently used (resident: the one set, just read)
            call(s)
        buf.zero_()
        call(sets[0])
        torch.cuda.synchronize()
    finally:
        launch._wgmma_module, launch.cluster_module = real, real_cluster
    n_tiles = -(-shape.topk // 64) + -(-shape.window // 64)
    trace = buf.view(-1, TRACE_TILES, TRACE_EVENTS).tolist()
    # Program p = (token * parts + split) * groups + group walks tiles [split * per, ...) of n_tiles.
    walked = [max(0, min(per, n_tiles - ((p // groups) % parts) * per)) for p in range(len(trace))]
    return {"pair": "+".join(pair), "build": build, "PREFETCH": prefetch, "H": heads, "T": t,
            "records": "L2" if resident else "DRAM", "splits": parts,
            "tiles a program": per, "error": bad, "trace spills": trace_spills(launched), **summarise(trace, walked)}


def _refused(pair: tuple[str, str], build: str, heads: int) -> bool:
    """Whether the pair's space refuses `build` at `heads` (its buffers exceed sm_90's shared memory)."""
    from catalog.families.decode import default_config, space
    from catalog.families.decode_wgmma import wgmma_config

    return space(*pair, heads).infeasible(wgmma_config(default_config(*pair).replace(MMA=build))) is not None


def trace_spills(launched: Sequence[Any]) -> int | None:
    """The largest spill (bytes) of the traced kernels a run launched (Triton's compiled kernels'
    n_spills): the probes' registers can make one build's trace spill where another's does not
    (2026-12-06: the split's fp8_584 trace build 108-136 bytes, the cluster's 0), which a comparison
    of builds by their timelines would credit to the build."""
    got = [getattr(k, "n_spills", None) for k in launched]
    return max((g for g in got if g is not None), default=None)


# The traced kernels: (name, heads a program, num_warps).
TRACED: tuple[tuple[str, int, int], ...] = (("decode_wgmma_kernel", 16, 4), ("decode_wgmma_hm_kernel", 64, 8),
                                            ("decode_wgmma_ws_kernel", 16, 4), ("decode_wgmma_wsr_kernel", 16, 4),
                                            ("decode_wgmma_hmws_kernel", 64, 8),
                                            ("decode_wgmma_hmpv_kernel", 64, 4))


# The traced kernels' builds: wgmma_case's (heads_on_m, build) by kernel name.
_BUILDS = {"decode_wgmma_kernel": (False, ""), "decode_wgmma_hm_kernel": (True, ""),
           "decode_wgmma_ws_kernel": (False, "ws"), "decode_wgmma_wsr_kernel": (False, "wsr"),
           "decode_wgmma_hmws_kernel": (True, "ws"),
           "decode_wgmma_hmpv_kernel": (True, "pv")}


def trace_case(pair: tuple[str, str], name: str, heads: int, warps: int) -> Any:
    """The cross-compile case of one traced kernel (split, sink, pages of 64, no PREFETCH)."""
    from catalog.formats import get_format
    from tuner.kernels.decode.xcompile import wgmma_case

    heads_on_m, build = _BUILDS[name]
    return wgmma_case(get_format(pair[0]), get_format(pair[1]), split=True, heads=heads, warps=warps,
                      heads_on_m=heads_on_m, build=build, trace=True)


def static() -> int:
    """Each traced kernel compiled for sm_90 on the CPU (registers, spills): the probes must not
    change much of what they measure (2026-12-05: see benchmarks/README.md, decode_timeline.py)."""
    from tuner.compile import _request, compile_with_stats

    from catalog.formats import get_format
    from tuner.kernels.decode.xcompile import CLUSTER_KERNEL, cluster_case

    for pair in (("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")):
        for name, heads, warps in TRACED:
            _, stats = compile_with_stats(_request(trace_case(pair, name, heads, warps), "sm_90"))
            print(json.dumps({"pair": "+".join(pair), "kernel": name, **stats}))
        case = cluster_case(get_format(pair[0]), get_format(pair[1]), split=True, prefetch=False, trace=True)
        _, stats = compile_with_stats(_request(case, "sm_90"))
        print(json.dumps({"pair": "+".join(pair), "kernel": CLUSTER_KERNEL + " (2-CTA cluster)", **stats}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--static", action="store_true", help="compile the traced builds for sm_90 on the CPU only")
    ap.add_argument("--build", action="append", default=None,
                    help="wgmma, wgmma_hm, wgmma_ws, wgmma_wsr, wgmma_hmws, wgmma_hmpv, wgmma_hmpvc (repeatable; default: "
                         "DEFAULT_RUNS)")
    ap.add_argument("--heads", type=int, default=None, help="default: DEFAULT_RUNS' (16, or 128 for heads on M)")
    ap.add_argument("--t", type=int, default=None, help="default: DEFAULT_RUNS' (1 and 64)")
    ap.add_argument("--pair", action="append", default=None, help="comp+win (default: both of issue 28's pairs)")
    ap.add_argument("--resident", action="store_true",
                    help="records from L2 (one input set, launched twice) beside the DRAM runs: is it their trip?")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    if args.static:
        os.environ.pop("TRITON_INTERPRET", None)
        return static()
    import torch

    from benchmarks.common import provenance
    from catalog.families.decode_wgmma import WGMMA_PREFETCH_MMAS

    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("decode_timeline runs on an sm_90 GPU only (--static compiles on the CPU)", file=sys.stderr)
        return 2
    runs = list(dict.fromkeys((b, args.heads or h, args.t or t) for b, h, t in DEFAULT_RUNS
                              if not args.build or b in args.build))
    pairs = [tuple(p.split("+")) for p in args.pair] if args.pair else [("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")]
    rows = []
    for pair in pairs:
        for build, heads, t in runs:
            if _refused(pair, build, heads):  # (a build whose buffers the pair does not fit)
                continue
            for prefetch in ((0, 1) if build in WGMMA_PREFETCH_MMAS else (0,)):
                for resident in ((False, True) if args.resident else (False,)):
                    row = run(pair, build, heads, t, prefetch, resident)  # type: ignore[arg-type]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    prov = provenance()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # One pair a call names its files after it (no '+': the device's file transfer refuses it).
    stem = "decode_timeline" + ("_" + "_".join(pairs[0]) if len(pairs) == 1 else "") + "_h200"
    (out / f"{stem}.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))
    cols = ["prologue", "producer start", "producer cluster wait", "producer first slots", "qk start", "query",
            "producer data wait", "producer copy issue", "producer slot loads", "producer copy wait",
            "producer empty wait", "producer peer wait", "producer conversion", "producer trip", "producer loop tail",
            "consumer ready wait",
            "consumer compute", "consumer mma 1 wait", "consumer softmax", "consumer mma 2 wait", "pv tile",
            "first tile", "tile period", "tile period p90", "program", "epilogue",
            "start spread", "launch span", "clock GHz", "trace spills"]
    lines = ["# Warp-specialised decode builds from inside: medians a tile (us)", "",
             f"{prov['gpu']}, torch {prov['torch']}, triton {prov['triton']}, CUDA {prov['cuda']}, {prov['date']}. "
             "top-k 512, window 128, page 64; records from DRAM unless a row says L2; one traced launch a row "
             "(`benchmarks/decode_timeline.py`: the trace build's cycle stamps). The heads-on-M warp-specialised "
             "producers load records into registers: their 'data wait' is the loads' issue, and their landing too "
             "where ptxas puts a use of the loaded bytes before the stamp (hmws / hmpv on sm_90: the scale bytes' "
             "mask); else the landing falls in their conversion. 'first tile': program start to its first tile "
             "attended; 'program': start to the key loop's end; 'epilogue': from there to its last store's issue; "
             "'start spread': first program's start to the last's; 'launch span': first program's start to the last "
             "program's last store (%globaltimer), the kernel's body without its launch or the merge after it; 'trace "
             "spills': the traced kernel's spilled bytes (where builds differ in it, weigh them by the benchmark, "
             "not by these timelines). The ws producer's 'data wait' in three: 'copy issue' (the next tile's copies "
             "issued, which waits for their slots' loads of a trip before), 'slot loads' (those of the tile after "
             "issued), 'copy wait' (this tile's copies landing); 'producer trip': its top to its next top; 'producer "
             "loop tail': its conversion's end to its next top. The heads-on-N consumers' 'compute' in parts: 'mma 1 "
             "wait' (S issued and waited for; ws: with the previous tile's PV MMAs still in flight), 'softmax' (to "
             "MMA 2 issued, P stored), 'mma 2 wait' (the one-warpgroup and wsr consumers, which wait for it in the "
             "tile).", "",
             "| pair | build | PREFETCH | H | T | records | splits | " + " | ".join(cols) + " |",
             "|---" * (7 + len(cols)) + "|"]
    for r in rows:
        lines.append(f"| {r['pair']} | {r['build']} | {r['PREFETCH']} | {r['H']} | {r['T']} | {r['records']} | {r['splits']} | "
                     + " | ".join(str(r.get(c, "-")) for c in cols) + " |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    return 0 if all(r["error"] is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
