"""Where the decode tile's time goes: leave-one-stage-out variants of the generated module, timed
like the benchmark (CUDA graph replay, median) at T = 1, 8, 64 for nvfp4_288 + fp8_528.

  full       the default config as it ships
  no_gather  key rows are not gathered or dequantized (a constant block per slot): attention only
  no_attend  rows are gathered and dequantized, the two dots and the softmax are replaced by a sum
  empty      only q, the slot lists and the outputs move: the per-program fixed cost
  empty_nomerge  empty without the decode_combine launch (outputs left unmerged): splits whose
             partials no kernel merges, so empty - empty_nomerge is the combine launch's cost
  empty_s1   empty without splitting (one kernel, no combine): what splitting costs in all

    python benchmarks/decode_breakdown.py --out benchmarks/results
    python benchmarks/decode_breakdown.py --cfg "" --cfg "LISTS=separate"   # one table per config

Every row also carries each kernel's own device time (torch.profiler over plain launches, the mean
of 50): the graph median minus their sum is what the launches between the kernels cost.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402

import tuner.kernels.decode as D  # noqa: E402
from templates import render as R  # noqa: E402

PAIR = ("nvfp4_288", "fp8_528")
# The reads of both record readers, on the plain path and on PREFETCH's (whose fetches, left
# unused, the compiler then drops).
GATHER = ("kv = _comp_keys(cache_ptr, slot, valid, page_size, page_bytes, BLOCK_N, DOT_FP32)",
          "kv = _win_keys(cache_ptr, slot, valid, page_size, page_bytes, BLOCK_N, DOT_FP32)",
          "kv = _comp_keys_decode(b, sb, BLOCK_N, DOT_FP32)", "kv = _win_keys_decode(b, sb, BLOCK_N, DOT_FP32)")
ATTEND = "m_i, l_i, acc = _attend(q, kv, valid, m_i, l_i, acc, scale_log2, SWAP, UPCAST)"
FAKE_KV = "kv = (tl.zeros([BLOCK_N, D], tl.float32) + slot[:, None].to(tl.float32)).to(q.dtype)"
CHEAP = "acc += tl.sum(kv.to(tl.float32), axis=0)[None, :]"
VARIANTS = ("full", "no_gather", "no_attend", "empty", "empty_nomerge", "empty_s1")
SOURCE_OF = {"empty_nomerge": "empty", "empty_s1": "empty"}  # launch changes over the module of another variant


def variant(name: str, backend: str = "soft") -> R.Rendered:
    src = D.render_variant(*PAIR, backend).source
    if name in ("no_gather", "empty"):
        for g in GATHER:
            assert g in src, g
            src = src.replace(g, FAKE_KV)
    if name in ("no_attend", "empty"):
        assert ATTEND in src
        src = src.replace(ATTEND, CHEAP)
    return R.Rendered("decode_tile.py.j2", src)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--cfg", action="append", default=None,
                    help="NAME=v,... over the default config (repeatable; default: the default config)")
    args = ap.parse_args()
    from benchmarks.common import provenance

    dev = "cpu" if args.smoke else "cuda"
    shape = (2, 32, 16) if args.smoke else (16, 512, 128)
    cfgs = args.cfg or [""]
    rows = []
    real_module, real_combine = D.launch._module, D.launch.launch_combine
    try:
        for name in VARIANTS:
            rows += _time_variant(name, cfgs, shape, dev, args.smoke, real_combine)
    finally:
        D.launch._module, D.launch.launch_combine = real_module, real_combine
    _write(Path(args.out), rows, cfgs, provenance())
    return 0


def _time_variant(name: str, cfgs: list[str], shape: tuple[int, int, int], dev: str, smoke: bool,
                  real_combine: Any) -> list[dict[str, Any]]:
    """One variant at every config and T (the caller restores the launcher's module and combine)."""
    from benchmarks.common import parse_cfg

    # empty_nomerge: the launcher's combine launch left out (COMBINE=fused merges in-kernel anyway).
    D.launch.launch_combine = (lambda *a, **k: None) if name == "empty_nomerge" else real_combine
    rows = []
    for text in cfgs:
        cfg0 = parse_cfg(text, D.default_config(*PAIR))
        # The variant rendered with the config's e2m1 backend (its module is what the launcher runs).
        mod = R.load(variant(SOURCE_OF.get(name, name), cfg0["backend"]))
        D.launch._module = lambda *a, _m=mod: _m  # the launcher's module cache, pointed at this variant
        for t in ((1, 2) if smoke else (1, 8, 64)):
            inp = D.make_decode_inputs(*PAIR, t, shape[0], shape[1], shape[2], dev, seed=t)
            cfg = cfg0
            if name == "empty_s1":
                cfg = cfg.replace(NUM_SPLITS=1, LISTS="both")  # one program per token, no partials
            if smoke:
                D.run_decode(*PAIR, cfg, inp)
                us = float("nan")
            else:
                us = triton.testing.do_bench_cudagraph(lambda: D.run_decode(*PAIR, cfg, inp), rep=100,
                                                       return_mode="median") * 1e3
            kernels = {} if smoke else kernel_times(lambda: D.run_decode(*PAIR, cfg, inp))
            rows.append({"variant": name, "config": text or "default", "T": t, "us": us, "kernels": kernels})
            ks = " ".join(f"{k}={v:.2f}" for k, v in kernels.items())
            print(f"{name:13s} {text or 'default':24s} T={t:<3d} {us:8.2f} us  [{ks}]", flush=True)
    return rows


def kernel_times(fn: Any, n: int = 50) -> dict[str, float]:
    """Mean device time in us of each kernel `fn` launches (by name), from torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / e.count for e in prof.key_averages() if e.device_time_total > 0}


def _write(out: Path, rows: list[dict[str, Any]], cfgs: list[str], prov: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_breakdown.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))
    ts = sorted({r["T"] for r in rows})
    md = [f"# decode tile: leave-one-stage-out\n\n{prov['gpu']}, torch {prov['torch']}, triton {prov['triton']}, "
          f"{prov['date']}. nvfp4_288 + fp8_528, H=16, topk 512, window 128, CUDA graph median "
          "(inputs not rotated: the records may sit in L2).\n",
          "| config | variant | " + " | ".join(f"T={t}" for t in ts) + " |",
          "|---|---|" + "---|" * len(ts)]
    for text in cfgs:
        for name in VARIANTS:
            md.append(f"| {text or 'default'} | {name} | " + " | ".join(
                f"{r['us']:.2f}" for r in rows if r["variant"] == name and r["config"] == (text or "default")) + " |")
    md += ["", "Each kernel's own device time (us, torch.profiler, mean of 50 plain launches):", "",
           "| config | variant | T | graph median | kernels |", "|---|---|---|---|---|"]
    md += [f"| {r['config']} | {r['variant']} | {r['T']} | {r['us']:.2f} | "
           + ", ".join(f"{k} {v:.2f}" for k, v in r.get("kernels", {}).items()) + " |" for r in rows]
    (out / "decode_breakdown.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    sys.exit(main())
