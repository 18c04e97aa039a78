"""Decode-tile benchmark (issue 3): correctness of every legal variant at the seed shape
(H=16, topk=512, window=128) for T = 1..64, then CUDA-graph timings per T of the default config,
the best of a small sweep, the byte floor (bytes moved / measured copy bandwidth) and the fp8_584
pair, with input sets rotated so the records are not L2-resident. One torch-eager
dequantize-and-attend baseline at T=64 for context.

    python benchmarks/bench_decode.py --out benchmarks/results     # on a GPU (about 4 minutes)
    TRITON_INTERPRET=1 python benchmarks/bench_decode.py --smoke   # plumbing check on a CPU
    # a few configs against each other, both pairs, some T, no variant checks (~1-2 min on a GPU):
    python benchmarks/bench_decode.py --pick "BLOCK_N=64,PREFETCH=1,backend=lut" --pick "MMA=keys_m" \
        --ts 1,64 --skip-checks --name decode_picks
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import copy_bandwidth, parse_cfg, provenance, time_us, write_results  # noqa: E402
from catalog.core import Config  # noqa: E402
from tuner.formats import alloc_cache, get_format, quantize, write_slots  # noqa: E402
from catalog.codecs import e2m1_backend_legality  # noqa: E402
from catalog.families.decode import (ISSUE_PAIRS, MAX_SPLITS, cfg_backends, decode_bytes,  # noqa: E402
                                     default_config, space)
from catalog.families.decode_wgmma import WGMMA_WARPS, is_wgmma, wgmma_config, wgmma_legality, wgmma_reads  # noqa: E402
from tuner.kernels.decode import FAMILY, decode, resolve_splits, max_partials, verify_decode, workspace_numel
from tuner.reference import gather_dequant  # noqa: E402
from tuner.targets import detect  # noqa: E402

MAIN = ("nvfp4_288", "fp8_528")
BASE = ("fp8_584", "fp8_584")
PAGE = 64

# (BLOCK_N, MMA, num_warps, num_stages): structural variants, swept at the automatic split count
# (a runtime int: each compiles at most twice, split and unsplit).
STRUCTS = [(32, "keys_m", 8, 2), (64, "keys_m", 8, 2), (16, "keys_m", 4, 2), (32, "heads_m", 4, 1),
           (64, "heads_m", 8, 1)]  # BLOCK_N 16 with heads on M is illegal with e2m1 records (decode.space)
BASE_STRUCTS = [(16, "heads_m", 8, 1), (32, "keys_m", 8, 2)]  # fewer compiles for the comparison pair


class Shape:
    def __init__(self, smoke: bool, heads: int = 16) -> None:
        self.heads, self.topk, self.window = (heads, 40, 20) if smoke else (heads, 512, 128)
        self.ts = [1, 2] if smoke else [1, 2, 4, 8, 16, 32, 64]
        self.comp_pool = 1 << (10 if smoke else 19)  # 151 MB of nvfp4_288 records, 306 MB of fp8_584
        self.win_pool = 1 << (9 if smoke else 17)


def _pool(fmt: str, n_slots: int, device: str, seed: int) -> torch.Tensor:
    """A cache of n_slots records of random latents (per-token magnitudes over a few decades),
    quantized on the device in chunks."""
    f = get_format(fmt)
    cache = alloc_cache(f, -(-n_slots // PAGE), PAGE, device=device, fill=0)
    g = torch.Generator(device=device).manual_seed(seed)
    step = 1 << 16
    for s0 in range(0, n_slots, step):
        n = min(step, n_slots - s0)
        x = torch.randn(n, 512, device=device, generator=g) * torch.exp(torch.randn(n, 1, device=device, generator=g))
        write_slots(cache, quantize(x.to(torch.bfloat16), f), torch.arange(s0, s0 + n, device=device), f, PAGE)
    return cache


def _sets(pools: dict[str, Any], pair: tuple[str, str], shape: Shape, n_tok: int, n_sets: int, device: str, seed: int) -> list[dict[str, Any]]:
    """n_sets launches' inputs over the same pools (random slots, ~1/32 of them -1), sharing one
    preallocated output and workspace (launches run one after another on one stream)."""
    g = torch.Generator(device=device).manual_seed(seed)
    h = shape.heads
    out = (torch.empty(n_tok, h, 512, dtype=torch.bfloat16, device=device), torch.empty(n_tok, h, dtype=torch.float32, device=device))
    ws = torch.empty(workspace_numel(n_tok, h, max_partials(shape.topk, shape.window)), dtype=torch.float32, device=device)
    counters = torch.zeros(n_tok, dtype=torch.int32, device=device)  # left zero by every launch
    sets = []
    for _ in range(n_sets):
        def idx(n: int, pool: int) -> torch.Tensor:
            i = torch.randint(0, pool, (n_tok, n), device=device, generator=g, dtype=torch.int32)
            holes = torch.randint(0, 32, (n_tok, n), device=device, generator=g) == 0
            return torch.where(holes, torch.full_like(i, -1), i)
        sets.append({
            "q": torch.randn(n_tok, h, 512, device=device, generator=g).to(torch.bfloat16),
            "comp_cache": pools[pair[0] + ":comp"], "win_cache": pools[pair[1] + ":win"],
            "topk_idx": idx(shape.topk, shape.comp_pool), "window_idx": idx(shape.window, shape.win_pool),
            "attn_sink": torch.randn(h, device=device, generator=g) * 2, "sm_scale": 1.0 / math.sqrt(512),
            "page_size": PAGE, "win_page_size": PAGE, "out": out, "workspace": ws, "counters": counters,
        })
    return sets


def _launch(pair: tuple[str, str], cfg: Config, s: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return decode(s["q"], s["comp_cache"], pair[0], s["topk_idx"], s["win_cache"], pair[1], s["window_idx"], PAGE,
                  s["sm_scale"], s["attn_sink"], cfg, out=s["out"], workspace=s["workspace"], counters=s["counters"])


def _check(pair: tuple[str, str], cfg: Config, s: dict[str, Any]) -> str | None:
    s["out"][0].fill_(float("nan"))
    s["out"][1].fill_(float("nan"))
    try:
        return verify_decode(pair[0], pair[1], s, _launch(pair, cfg, s))
    except Exception as e:  # a config that fails to compile or launch is a result
        return f"{type(e).__name__}: {e}"[:300]


def _time(fn: Callable[[], Any], n_launch: int, gpu: bool) -> float:
    """Microseconds per launch: CUDA graph replay of n_launch rotated launches, median."""
    fn()
    if gpu:
        torch.cuda.synchronize()
        return time_us(fn, graph=True, rep=40) / n_launch
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6 / n_launch


def _picked(pair: tuple[str, str], picks: list[str], heads: int) -> list[Config]:
    """The default, then each `NAME=v,...` pick over it; a pair without e2m1 records has no backend
    axis, so a pick's backend is dropped there (the fp8_584 pair then times the same tile)."""
    d = default_config(*pair)
    has_backend = "backend" in d.as_dict() and len(cfg_backends(*pair)) > 1
    texts = [",".join(i for i in t.split(",") if has_backend or not i.startswith("backend=")) for t in picks]
    cfgs = [parse_cfg(t, d) for t in texts]
    # A wgmma pick runs as the path's config (its fixed parameters), on the pairs the path reads;
    # its warps are the pick's if it names them, else the path's seed's.
    cfgs = [wgmma_config(c if "num_warps" in t else c.replace(num_warps=WGMMA_WARPS)) if is_wgmma(c) else c
            for c, t in zip(cfgs, texts)]
    # (a pick the pair's space refuses, as the heads-on-M build of a mixed pair, is dropped)
    cfgs = [c for c in cfgs if not is_wgmma(c) or space(*pair, heads).infeasible(c) is None]
    return list(dict.fromkeys([d] + cfgs))


def _sweep_configs(pair: tuple[str, str], structs: list[tuple], n_tok: int, shape: Shape, device: torch.device,
                   picks: list[str] | None = None) -> list[Config]:
    """The default, then (most telling first, as a run cut by its budget sweeps a prefix): each
    list layout and combine with and without prefetching on the default tile, the measured
    winners combined, the default at half and twice its automatic split count, then the other
    tile structures. With `picks`: the default and those only."""
    if picks:
        return _picked(pair, picks, shape.heads)
    d = default_config(*pair)
    auto = resolve_splits(d, n_tok, shape.topk, device)
    out = [d]
    # sm_90's Gluon kernel (MMA=wgmma), at each split count, where the target and the pair allow it.
    out += _wgmma_configs(pair, (0, 1, 2, 4, 8, 16))
    for lists, comb, pre in (("both", "kernel", 1), ("separate", "kernel", 0), ("separate", "kernel", 1),
                             ("both", "fused", 0), ("both", "fused", 1), ("separate", "fused", 0),
                             ("separate", "fused", 1), ("apart", "kernel", 0), ("apart", "fused", 0)):
        out.append(d.replace(LISTS=lists, COMBINE=comb, PREFETCH=pre))
    # The measured winners so far (H200, 2026-11-29: prefetch at T >= 8, apart at T <= 4, 64-key
    # blocks at T >= 16) combined; static sm_90: 64 keys + prefetch spill 108 B, 160 KB shared.
    out += [d.replace(BLOCK_N=64, PREFETCH=1), d.replace(LISTS="apart", PREFETCH=1)]
    # The same with e2m1 decoded by prmt tables, where the pair has e2m1 and the target has PTX.
    lut = "lut" in cfg_backends(*pair) and device.type == "cuda" and not e2m1_backend_legality("lut", detect().name)
    if lut:
        out += [c.replace(backend="lut") for c in (d.replace(BLOCK_N=64, PREFETCH=1), d.replace(LISTS="apart", PREFETCH=1), d)]
    # 4-warp programs fit two to an SM (H200, 2026-11-29, results/decode_w4.md: T=64 39.6 us at 4
    # splits with lut, T=8 15.6); the fp8_584 pair times the same tiles.
    w4 = d.replace(num_warps=4, PREFETCH=1, **({"backend": "lut"} if lut else {}))
    out += [w4, w4.replace(NUM_SPLITS=4), w4.replace(NUM_SPLITS=16)]
    out += [d.replace(NUM_SPLITS=sp) for sp in (auto // 2, auto * 2) if 1 <= sp <= MAX_SPLITS]
    out += [d.replace(BLOCK_N=bn, MMA=mma, num_warps=nw, num_stages=ns) for bn, mma, nw, ns in structs]
    return list(dict.fromkeys(out))


def _wgmma_configs(pair: tuple[str, str], splits: tuple[int, ...]) -> list[Config]:
    if wgmma_legality(detect().name) or not wgmma_reads(*pair):
        return []
    d = wgmma_config(default_config(*pair))
    return [d.replace(NUM_SPLITS=s) for s in splits]


def _variants(pair: tuple[str, str], target: str) -> list[str]:
    """The family's variants legal on `target` that the pair's space has: its e2m1 backends, and
    "wgmma" where that kernel reads the pair."""
    own = set(cfg_backends(*pair)) | ({"wgmma"} if wgmma_reads(*pair) else set())
    return [v for v in FAMILY.variants() if v in own and FAMILY.legality(v, target) is None]


def _check_configs(pair: tuple[str, str], variant: str) -> list[Config]:
    """The default and the configs that change the kernel's structure: forced split/unsplit,
    keys on M, each LISTS layout and the fused combine (for "wgmma": its split counts)."""
    if variant == "wgmma":
        return _wgmma_configs(pair, (0, 1, 2, 16))
    d = default_config(*pair).replace(backend=variant)
    return [d, d.replace(NUM_SPLITS=1), d.replace(NUM_SPLITS=8, BLOCK_N=32, MMA="keys_m"),
            d.replace(LISTS="apart", COMBINE="fused"), d.replace(LISTS="apart", NUM_SPLITS=2),
            d.replace(COMBINE="fused", NUM_SPLITS=4), d.replace(LISTS="separate"),
            d.replace(LISTS="separate", COMBINE="fused", NUM_SPLITS=16), d.replace(PREFETCH=1),
            d.replace(LISTS="separate", PREFETCH=1, NUM_SPLITS=2)]


def _precompile(shape: Shape, structs: list[tuple], base_structs: list[tuple], target: str, checks: bool = True,
                picks: list[str] | None = None) -> None:
    """Compile every config the checks and sweeps launch, in parallel processes, into Triton's
    on-disk cache (the record_table helper): compiling one at a time is most of this benchmark's
    device time otherwise."""
    from benchmarks.record_table import precompile
    from catalog.core import Bucket
    from catalog.keys import make_key

    dev = torch.device("cuda")
    for pair in tuple(ISSUE_PAIRS) + (BASE,):
        items = []
        for n_tok in shape.ts:
            b = Bucket("T", n_tok, n_tok)
            if pair in ISSUE_PAIRS and checks:
                items += [(b, c) for be in _variants(pair, target) for c in _check_configs(pair, be)]
            if pair in (MAIN, BASE):
                items += [(b, c) for c in _sweep_configs(pair, structs if pair == MAIN else base_structs, n_tok, shape, dev,
                                                         picks)]
        key = make_key("decode", target, shape.heads, shape.topk, shape.window, formats=pair)
        items = [(b, c) for b, c in items if c["MMA"] != "wgmma"]  # Gluon: compiled at its first launch
        precompile("decode", key, list(dict.fromkeys(items)), jobs=max(2, (os.cpu_count() or 4) - 2))


def _bench_pair(pair, structs, pools, shape, n_tok, n_sets, device, gpu, deadline, picks=None) -> dict[str, Any]:
    sets = _sets(pools, pair, shape, n_tok, n_sets, device, seed=100 + n_tok)
    cfgs = _sweep_configs(pair, structs, n_tok, shape, torch.device(device), picks)
    rows = []
    for i, c in enumerate(cfgs):
        if i > 0 and time.perf_counter() > deadline:
            rows.append({"config": c.as_dict(), "skipped": "time budget"})
            continue
        bad = _check(pair, c, sets[0])
        if bad:
            rows.append({"config": c.as_dict(), "error": bad})
            continue
        us = _time(lambda c=c: [_launch(pair, c, s) for s in sets], len(sets), gpu)
        rows.append({"config": c.as_dict(), "us": us,
                     "splits": resolve_splits(c, n_tok, shape.topk, torch.device(device))})
    ok = [r for r in rows if "us" in r]
    return {"default": rows[0], "best": min(ok, key=lambda r: r["us"]) if ok else None, "rows": rows}


def _eager_baseline(pools, shape, n_tok, device, gpu) -> float:
    """torch eager: gather + dequantize both caches, fp32 attention with the sink."""
    s = _sets(pools, MAIN, shape, n_tok, 1, device, seed=7)[0]

    def eager() -> torch.Tensor:
        kc = gather_dequant(s["comp_cache"], s["topk_idx"], MAIN[0], PAGE)
        kw = gather_dequant(s["win_cache"], s["window_idx"], MAIN[1], PAGE)
        k = torch.cat([kc, kw], dim=1)
        valid = torch.cat([s["topk_idx"] >= 0, s["window_idx"] >= 0], dim=1)
        sc = torch.einsum("thd,tjd->thj", s["q"].float(), k) * s["sm_scale"]
        sc = sc.masked_fill(~valid[:, None, :], float("-inf"))
        lse = torch.logsumexp(sc, dim=-1)
        p = torch.exp(sc - lse[..., None])
        o = torch.einsum("thj,tjd->thd", p, k) * torch.sigmoid(lse - s["attn_sink"][None, :])[..., None]
        return o.to(torch.bfloat16)

    eager()
    if not gpu:
        t0 = time.perf_counter()
        eager()
        return (time.perf_counter() - t0) * 1e6
    return time_us(eager, graph=False, rep=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and 2 configs: runs under TRITON_INTERPRET=1")
    ap.add_argument("--budget-s", type=float, default=180.0, help="stop sweeping (default configs only) past this")
    ap.add_argument("--pick", action="append", default=None,
                    help="NAME=v,... over the default: time these instead of the sweep (repeatable)")
    ap.add_argument("--ts", default=None, help="only these T, e.g. 1,64 (default: 1..64)")
    ap.add_argument("--skip-checks", action="store_true", help="no variant checks (each timed config is still verified)")
    ap.add_argument("--name", default=None, help="results file name (default: decode, or decode_smoke)")
    ap.add_argument("--heads", type=int, default=16,
                    help="local heads (default 16, the seed shape; issue 28 sweeps 16, 32, 64: run once per H)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    target = detect()
    gpu = target.is_gpu
    device = "cuda" if gpu else "cpu"
    shape = Shape(args.smoke, args.heads)
    if args.ts:
        shape.ts = [int(t) for t in args.ts.split(",")]
    structs = STRUCTS[:1] if args.smoke else STRUCTS
    base_structs = BASE_STRUCTS[1:] if args.smoke else BASE_STRUCTS
    prov = provenance()
    print(f"decode bench on {prov['gpu']} ({target.name}), torch {prov['torch']}, triton {prov['triton']}")

    pools: dict[str, Any] = {}
    for i, fmt in enumerate(sorted({p[0] for p in ISSUE_PAIRS + (BASE,)})):
        pools[fmt + ":comp"] = _pool(fmt, shape.comp_pool, device, seed=1 + i)
    for i, fmt in enumerate(sorted({p[1] for p in ISSUE_PAIRS + (BASE,)})):
        pools[fmt + ":win"] = _pool(fmt, shape.win_pool, device, seed=11 + i)

    if gpu and not args.smoke:
        _precompile(shape, structs, base_structs, target.name, not args.skip_checks, args.pick)

    # 1. Correctness: every legal variant of every issue pair, default and forced split/unsplit.
    checks = []
    for pair in () if args.skip_checks else ISSUE_PAIRS:
        for backend in _variants(pair, target.name):
            for n_tok in shape.ts:
                s = _sets(pools, pair, shape, n_tok, 1, device, seed=n_tok)[0]
                for cfg in _check_configs(pair, backend):
                    bad = _check(pair, cfg, s)
                    checks.append({"pair": "+".join(pair), "backend": backend, "T": n_tok, "config": cfg.as_dict(),
                                   "result": bad or "pass"})
                    print(f"  check {'+'.join(pair):20s} {backend:6s} T={n_tok:<3d} splits={cfg['NUM_SPLITS'] or 'auto':<4} "
                          f"{'pass' if not bad else 'FAIL: ' + bad}")

    # 2. Copy bandwidth (read + write bytes per second).
    bw = copy_bandwidth(4.0) if gpu else float("nan")
    print(f"copy bandwidth: {bw / 1e12:.2f} TB/s")
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)) if gpu else 1 << 20

    # 3. Timings per T.
    deadline = t_start + args.budget_s
    per_t = []
    # The ends of the range first: a run cut by its budget has swept T=64 and T=1.
    for n_tok in sorted(shape.ts, key=lambda t: (t not in (shape.ts[0], shape.ts[-1]), -t)):
        moved = decode_bytes(*MAIN, n_tok, shape.heads, shape.topk, shape.window)
        # Enough launches per graph replay that one replay touches > 2x L2 of records.
        n_sets = 2 if args.smoke else max(2, min(512, math.ceil(2 * l2 / moved)))
        main_r = _bench_pair(MAIN, structs, pools, shape, n_tok, n_sets, device, gpu, deadline, args.pick)
        moved_b = decode_bytes(*BASE, n_tok, shape.heads, shape.topk, shape.window)
        n_sets_b = 2 if args.smoke else max(2, min(512, math.ceil(2 * l2 / moved_b)))
        base_r = _bench_pair(BASE, base_structs, pools, shape, n_tok, n_sets_b, device, gpu, deadline, args.pick)
        row = {
            "T": n_tok, "launches_per_replay": n_sets, "bytes_moved": moved, "floor_us": moved / bw * 1e6 if gpu else None,
            "default_us": main_r["default"].get("us"), "best_us": main_r["best"]["us"] if main_r["best"] else None,
            "best_config": main_r["best"]["config"] if main_r["best"] else None,
            "fp8_584_default_us": base_r["default"].get("us"),
            "fp8_584_best_us": base_r["best"]["us"] if base_r["best"] else None,
            "fp8_584_floor_us": moved_b / bw * 1e6 if gpu else None, "sweep": main_r["rows"], "fp8_584_sweep": base_r["rows"],
        }
        per_t.append(row)
        print(f"  T={n_tok:<3d} default {_f(row['default_us'])} us  best {_f(row['best_us'])} us  floor {_f(row['floor_us'])} us"
              f"  | fp8_584 default {_f(row['fp8_584_default_us'])} best {_f(row['fp8_584_best_us'])}  "
              f"({time.perf_counter() - t_start:.0f} s)")

    per_t.sort(key=lambda r: r["T"])
    eager_t = shape.ts[-1]
    eager_us = _eager_baseline(pools, shape, eager_t, device, gpu)
    print(f"torch eager dequantize-and-attend at T={eager_t}: {eager_us:.1f} us")

    payload = {
        "provenance": prov, "target": target.name, "timing": "CUDA graph replay, median" if gpu else "CPU (Triton interpreter)",
        "shape": {"heads": shape.heads, "topk": shape.topk, "window": shape.window, "page_size": PAGE},
        "pair": "+".join(MAIN), "baseline_pair": "+".join(BASE), "copy_bandwidth_Bps": bw if gpu else None,
        "checks": checks, "per_T": per_t, "eager_T": eager_t, "eager_us": eager_us,
        "elapsed_s": time.perf_counter() - t_start, "picks": args.pick,
    }
    name = args.name or ("decode_smoke" if args.smoke else "decode")
    write_results(args.out, name, payload, _markdown(payload))
    print(f"wrote {args.out}/{name}.json and .md ({payload['elapsed_s']:.0f} s)")
    return 1 if any(c["result"] != "pass" for c in checks) else 0


def _f(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def _markdown(p: dict[str, Any]) -> str:
    pv = p["provenance"]
    fails = [c for c in p["checks"] if c["result"] != "pass"]
    lines = [
        f"# Decode tile benchmark ({p['pair']}, baseline {p['baseline_pair']})", "",
        f"{pv['gpu']} ({p['target']}), torch {pv['torch']}, triton {pv['triton']}, CUDA {pv['cuda']}, {pv['date']}.",
        f"Shape H={p['shape']['heads']}, topk={p['shape']['topk']}, window={p['shape']['window']}, page {p['shape']['page_size']}; "
        f"{p['timing']}; copy bandwidth {_f((p['copy_bandwidth_Bps'] or math.nan) / 1e12)} TB/s.", "",
        (f"Correctness: {len(p['checks']) - len(fails)} of {len(p['checks'])} checks pass" if p["checks"]
         else "Correctness: variant checks skipped (--skip-checks); every timed config was verified")
        + (": " + "; ".join(f"{c['pair']} {c['backend']} T={c['T']}: {c['result']}" for c in fails[:5]) if fails else "."), "",
        "| T | default us | best us | best config | floor us | fp8_584 default us | fp8_584 best us | fp8_584 floor us |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in p["per_T"]:
        bc = r["best_config"] or {}
        cfg = (f"{bc.get('backend', 'soft')} N{bc.get('BLOCK_N')} S{bc.get('NUM_SPLITS')} {bc.get('MMA')} {bc.get('LISTS', 'both')}/"
               f"{bc.get('COMBINE', 'kernel')}{' prefetch' if bc.get('PREFETCH') else ''} w{bc.get('num_warps')} "
               f"s{bc.get('num_stages')}") if bc else "-"
        lines.append(f"| {r['T']} | {_f(r['default_us'])} | {_f(r['best_us'])} | {cfg} | {_f(r['floor_us'])} | "
                     f"{_f(r['fp8_584_default_us'])} | {_f(r['fp8_584_best_us'])} | {_f(r['fp8_584_floor_us'])} |")
    lines += ["", f"torch eager dequantize-and-attend at T={p['eager_T']}: {p['eager_us']:.1f} us.", ""]
    lines += _backend_pairs(p)
    if p.get("picks"):
        lines += _pick_table(p)
    return "\n".join(lines)


def _cfg_diff(config: dict[str, Any], default: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items() if default.get(k) != v) or "default"


def _pick_table(p: dict[str, Any]) -> list[str]:
    """Every picked config of a --pick run at every T, on both pairs (us; '-' where it failed)."""
    lines = ["## Picked configs (same run)", "", "| T | config | " + p["pair"] + " us | " + p["baseline_pair"] + " us |",
             "|---|---|---|---|"]
    for r in p["per_T"]:
        main, base = r["sweep"], r["fp8_584_sweep"]
        d_main, d_base = main[0]["config"], base[0]["config"]

        def tile(config: dict[str, Any], d_base: dict[str, Any] = d_base) -> str:
            # A config's label on the fp8_584 pair, which has no e2m1 backend to differ in.
            return _cfg_diff({k: v for k, v in config.items() if k != "backend"}, d_base)

        by_base = {tile(x["config"]): x for x in base}
        for x in main:
            label = _cfg_diff(x["config"], d_main)
            b = by_base.get(tile(x["config"]), {})
            lines.append(f"| {r['T']} | {label} | {_f(x.get('us'))}{' ' + x['error'][:80] if 'error' in x else ''} | "
                         f"{_f(b.get('us'))} |")
    return lines + [""]


def _backend_pairs(p: dict[str, Any]) -> list[str]:
    """Swept configs timed with both e2m1 backends in this run: soft vs lut, same config, same T."""
    rows = []
    for r in p["per_T"]:
        by = {}
        for row in r.get("sweep", []):
            c = dict(row["config"])
            if row.get("us") is not None:
                by[(c.pop("backend"), json.dumps(c, sort_keys=True))] = row["us"]
        for (backend, key), us in sorted(by.items()):
            if backend == "lut" and ("soft", key) in by:
                c = json.loads(key)
                name = f"N{c['BLOCK_N']} {c['LISTS']}{' prefetch' if c['PREFETCH'] else ''}"
                rows.append(f"| {r['T']} | {name} | {_f(by[('soft', key)])} | {_f(us)} | {by[('soft', key)] / us:.2f} |")
    if not rows:
        return []
    return ["## e2m1 decode: soft vs lut (same config, same run)", "",
            "| T | config | soft us | lut us | soft / lut |", "|---|---|---|---|---|", *rows, ""]


if __name__ == "__main__":
    sys.exit(main())
