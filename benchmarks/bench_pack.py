"""Pack benchmark (issue 2): byte-exactness of every sm_90-legal variant on 1M random tokens per
format, and pack throughput against the GPU's measured copy bandwidth (bytes read + written).

    python benchmarks/bench_pack.py --out benchmarks/results     # on a GPU
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import copy_bandwidth, parse_cfg, provenance, time_us, write_results  # noqa: E402
from catalog.core import Config  # noqa: E402
from tuner.formats import FORMATS, alloc_cache, quantize, read_slots  # noqa: E402
from catalog.families.pack import backend_legality  # noqa: E402
from catalog.families.pack import default_config, pack_bytes, space  # noqa: E402
from tuner.kernels.pack import allocator_slots, pack  # noqa: E402
from tuner.targets import detect  # noqa: E402


def _inputs(fmt: str, n: int, page: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    f = FORMATS[fmt]
    g = torch.Generator(device="cuda").manual_seed(seed)
    # Per-token magnitudes spread over decades so every scale path is exercised.
    mag = torch.exp(torch.randn(n, 1, device="cuda", generator=g) * 3)
    x = (torch.randn(n, f.dims, device="cuda", generator=g) * mag).to(torch.bfloat16)
    pages = -(-n // page)
    return x, allocator_slots(n, page, g, "cuda"), alloc_cache(f, pages, page, device="cuda", fill=0)


def check_exact(fmt: str, n: int, page: int, target: str) -> dict[str, str]:
    x, slots, cache = _inputs(fmt, n, page, seed=1)
    want = quantize(x, fmt)
    out = {}
    for b in space(fmt).params[0].choices:
        if backend_legality(fmt, b, target):
            continue
        cache.fill_(0)
        pack(x, slots, cache, fmt, page, default_config(fmt).replace(backend=b))
        got = read_slots(cache, slots, fmt, page)
        bad = int((got != want).any(dim=1).sum())
        out[b] = "byte-exact" if bad == 0 else f"{bad} of {n} records differ"
    return out


def sweep(fmt: str, n: int, page: int, copy_bw: float, max_configs: int, backends: tuple[str, ...] = (),
          picks: list[str] | None = None) -> dict:
    """The default, the default's tiles with each other legal backend, then a seeded sample of the
    rest of the grid; `backends` (when given) narrows that sample to these element backends;
    `picks` (NAME=v,... over the default) replaces the sample and the backend rows."""
    x, slots, cache = _inputs(fmt, n, page, seed=2)
    moved = pack_bytes(fmt, n)
    target = detect().name
    cfgs = [c for c in space(fmt).grid() if not backend_legality(fmt, c["backend"], target)
            and (not backends or c["backend"] in backends)]
    # The default first, then the default's tiles with every other legal backend (an A/B of the
    # element conversion in the same run), then a seeded sample of the rest of the grid (compiles
    # dominate the run).
    dflt = default_config(fmt)
    ab = [dflt.replace(backend=b) for b in space(fmt).params[0].choices
          if b != dflt["backend"] and not backend_legality(fmt, b, target)]
    rest = [c for c in cfgs if c != dflt and c not in ab]
    cfgs = [dflt] + ab + random.Random(0).sample(rest, min(len(rest), max(0, max_configs - 1 - len(ab))))
    if picks:
        cfgs = [dflt] + [c for c in (parse_cfg(p, dflt) for p in picks) if c != dflt]
    # Picked configs are new tiles or variants under study: each one's records are checked too.
    want = quantize(x, fmt) if picks else None
    rows = []
    for c in cfgs:
        try:
            # CUDA-graph replay, as engines run the writer: do_bench times plain launches, and pack's
            # host side (0.3-0.6 ms of Python a call outside graphs, results/runtime_h200.md) lands
            # in its timing window wherever it outlasts the cache flush queued before: 1.1-3.3x on
            # the small-record formats' ~100 us (results/pack_spread/, 2026-12-03).
            us = time_us(lambda c=c: pack(x, slots, cache, fmt, page, c), graph=True, rep=100)
        except Exception as e:  # a config that fails to compile is a row, not the end of the sweep
            rows.append({"config": c.as_dict(), "error": f"{type(e).__name__}: {e}"[:200]})
            continue
        row = {"config": c.as_dict(), "us": us, "frac_of_copy": moved / (us * 1e-6) / copy_bw}
        if want is not None:
            bad = int((read_slots(cache, slots, fmt, page) != want).any(dim=1).sum())
            row["exact"] = "byte-exact" if bad == 0 else f"{bad} of {n} records differ"
            print(f"  {fmt} {c.to_json()}: {us:.1f} us, {row['exact']}", flush=True)
        rows.append(row)
    ok = [r for r in rows if "us" in r]
    best = min(ok, key=lambda r: r["us"])
    by_backend = {b: min((r for r in ok if r["config"]["backend"] == b), key=lambda r: r["us"])
                  for b in {r["config"]["backend"] for r in ok}}
    return {"format": fmt, "tokens": n, "bytes_moved": moved, "default": ok[0], "best": best,
            "best_by_backend": by_backend, "floor_us": moved / copy_bw * 1e6, "configs_timed": len(ok),
            "rows": rows}


SMALL_N = (1, 16, 256)
BACKEND_COLUMNS = ("soft", "swar", "cvt", "ptx", "gfx950")


def small_n(fmt: str, page: int, configs: dict[str, Config]) -> dict[str, dict[int, float]]:
    """Latency at a decode step's token counts, CUDA-graph replay (as an engine runs the writer):
    launch-bound, so one number per config and N, not a fraction of a floor."""
    out: dict[str, dict[int, float]] = {}
    for name, c in configs.items():
        out[name] = {}
        for n in SMALL_N:
            x, slots, cache = _inputs(fmt, n, page, seed=3)
            out[name][n] = time_us(lambda: pack(x, slots, cache, fmt, page, c), graph=True, rep=50)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--max-configs", type=int, default=60, help="configs timed for nvfp4_288 (the largest space)")
    ap.add_argument("--max-configs-other", type=int, default=16, help="configs timed for each other format")
    ap.add_argument("--formats", default=",".join(FORMATS), help="record formats to sweep, comma-separated")
    ap.add_argument("--backends", default="", help="sample the sweep from these backends only, e.g. swar")
    ap.add_argument("--pick", action="append", default=None,
                    help="NAME=v,... over the format's default: time these (and the default) instead of a sample")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    backends = tuple(b for b in args.backends.split(",") if b)
    target = detect().name
    prov = provenance()
    t0 = time.time()
    bw = copy_bandwidth()
    print(f"{prov['gpu']} ({target}), torch {prov['torch']}, triton {prov['triton']}: copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    exact = {fmt: check_exact(fmt, args.tokens, args.page, target) for fmt in formats}
    for fmt, r in exact.items():
        print(f"  exactness {fmt}: {r}", flush=True)
    results = []
    for fmt in formats:
        r = sweep(fmt, args.tokens, args.page, bw, args.max_configs if fmt == "nvfp4_288" else args.max_configs_other,
                  backends, args.pick)
        results.append(r)
        d, b = r["default"], r["best"]
        r["small_n_us"] = small_n(fmt, args.page, {"default": Config.from_dict(d["config"]),
                                                   "best": Config.from_dict(b["config"])})
        print(f"  {fmt}: default {d['us']:.1f} us ({d['frac_of_copy']:.1%} of copy), best {b['us']:.1f} us "
              f"({b['frac_of_copy']:.1%}) {b['config']}, floor {r['floor_us']:.1f} us, {r['configs_timed']} configs", flush=True)
    md = [f"# pack benchmark\n\n{prov['gpu']} ({target}), torch {prov['torch']}, triton {prov['triton']}, CUDA {prov['cuda']}, {prov['date']}\n",
          f"Copy bandwidth (4 GiB device copy, read+write): {bw / 1e12:.3f} TB/s. {args.tokens} bf16 tokens, page {args.page}, "
          "timed by CUDA-graph replay (triton.testing.do_bench_cudagraph, median).\n",
          "| format | exact (1M random tokens) | default us | default % copy | best us | best % copy | best config |",
          "|---|---|---|---|---|---|---|"]
    for r in results:
        d, b = r["default"], r["best"]
        md.append(f"| {r['format']} | {', '.join(f'{k}: {v}' for k, v in exact[r['format']].items())} | {d['us']:.1f} | "
                  f"{d['frac_of_copy']:.1%} | {b['us']:.1f} | {b['frac_of_copy']:.1%} | `{Config.from_dict(b['config']).to_json()}` |")
    md += ["", "Best of each element backend (same run), and the copy floor:", "",
           "| format | floor us | " + " | ".join(f"best {k} us" for k in BACKEND_COLUMNS) + " |",
           "|---|---|" + "---|" * len(BACKEND_COLUMNS)]
    for r in results:
        cells = [f"{r['best_by_backend'][k]['us']:.1f}" if k in r["best_by_backend"] else "-"
                 for k in BACKEND_COLUMNS]
        md.append(f"| {r['format']} | {r['floor_us']:.1f} | " + " | ".join(cells) + " |")
    md += ["", f"Small N (CUDA-graph replay median, us; launch-bound): N = {', '.join(map(str, SMALL_N))}", "",
           "| format | config | " + " | ".join(f"N={n}" for n in SMALL_N) + " |", "|---|---|" + "---|" * len(SMALL_N)]
    for r in results:
        for name, t in r["small_n_us"].items():
            md.append(f"| {r['format']} | {name} | " + " | ".join(f"{t[n]:.2f}" for n in SMALL_N) + " |")
    write_results(args.out, "pack_h200", {"provenance": prov, "copy_bw_Bps": bw, "exact": exact, "results": results},
                  "\n".join(md) + "\n")
    print(f"done in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
