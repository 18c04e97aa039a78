"""Indexer logits benchmark (issue 4): every legal variant checked against the float64 reference at
the seed shape (64 heads x 128, page 64), then default vs best-of-a-small-sweep vs the byte floor for
decode (B = 1, 8, 32, 64 sequences x 64K context, one query token each) and prefill (4K query tokens
x 16K context, causal), for mxfp4_68 and fp8_132 with an fp8 query (`--q-dtypes fp8,mxfp4` adds
the MXFP4 query of issue 25, `(values, scales)`, timed in the same run). Timed with CUDA graph
replay (median); decode at small B rotates over disjoint sequences so the cache is not L2-resident.

    python benchmarks/bench_logits.py --out benchmarks/results          # on a GPU, ~3-4 minutes
    python benchmarks/bench_logits.py --q-dtypes fp8,mxfp4 --shapes B=64 --name logits_mxfp4_query
    TRITON_INTERPRET=1 python benchmarks/bench_logits.py --smoke        # tiny shapes, on the CPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

if "--smoke" in sys.argv and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from benchmarks.common import copy_bandwidth, parse_cfg, provenance, sustained_clock, time_us, write_results  # noqa: E402
from catalog.core import Bucket, Config  # noqa: E402
from catalog.families.logits import LOGITS_FORMATS, default_config, dot_config, legality, logits_bytes, logits_flops, logits_key, space, variant_of
from tuner.kernels.logits import logits, make_inputs, verify_inputs
from tuner.targets import detect  # noqa: E402

NOMINAL_H200_BW = 4.27e12  # the measured copy bandwidth, used only where none can be measured


def sweep_configs(fmt: str, prefill: bool, target: str, smoke: bool, given: list[str] | None = None,
                  q_dtype: str = "fp8") -> list[Config]:
    """The default, then a few hand-picked points (bigger tiles, deeper pipelines, dot_scaled, query
    groups for prefill), or the `given` ones ("NAME=v,..." over the default); the ones infeasible
    or illegal on this target are dropped (so an MXFP4 query keeps the dot paths it has)."""
    d = default_config(fmt, q_dtype)
    # Measured on the H200 (2026-11-29, B=64 x 64K): heads_m with the fp8 dot at 53-105 TFLOP/s,
    # dot_scaled and keys_m (the default since) at 160-175; deeper pipelines and 256-key tiles
    # never helped. Every pick names its MMA orientation.
    heads_m, keys_m = d.replace(MMA="heads_m"), d.replace(MMA="keys_m")
    picks = [
        # e2m1 -> e4m3 by byte-permute lookups (mxfp4_68 only; dropped elsewhere as infeasible).
        keys_m.replace(dot="fp8lut"), keys_m.replace(dot="fp8lut", TILES=16),
        heads_m,
        heads_m.replace(BLOCK_N=128, PAGE_LOOKUP="key"),
        heads_m.replace(dot="scaled", BLOCK_N=128),
        keys_m.replace(PAGE_LOOKUP="key"),
        keys_m.replace(num_warps=8),
        keys_m.replace(dot="scaled"),
        keys_m.replace(dot="scaled", BLOCK_N=128, num_warps=8),
        # The next tile's loads issued before this tile's dots (slower wherever timed so far).
        keys_m.replace(PREFETCH=1),
        keys_m.replace(PREFETCH=1, TILES=8),
        keys_m.replace(PREFETCH=1, dot="scaled"),
        heads_m.replace(dot="scaled", BLOCK_N=128, PREFETCH=1),
        # More tiles per program now that their pages come in one block-table read.
        keys_m.replace(TILES=8), keys_m.replace(TILES=16), heads_m.replace(dot="scaled", BLOCK_N=128, TILES=8),
        # Tiles by tensor-descriptor loads (TMA), pipelined 2 and 3 deep; mxfp4_68 on its fp8lut path.
        keys_m.replace(LOADS="descriptor", TILES=16), keys_m.replace(LOADS="descriptor", TILES=16, num_stages=3),
        keys_m.replace(LOADS="descriptor", TILES=8, num_stages=3),
        keys_m.replace(LOADS="descriptor", TILES=16, dot="fp8lut"), keys_m.replace(LOADS="descriptor", TILES=8, dot="fp8lut", num_stages=3),
        keys_m.replace(LOADS="descriptor", TILES=16, dot="fp8lut", num_stages=3),
        # One K=128 dot and one scale per key (mxfp4_68): 268 vs 275 us for fp8lut at B=64 (H200,
        # 2026-11-29, same run); the integer-op codes (fp8key) at 535.
        keys_m.replace(LOADS="descriptor", TILES=16, dot="fp8keylut", num_stages=3),
        keys_m.replace(LOADS="descriptor", TILES=8, dot="fp8keylut", num_stages=3),
        keys_m.replace(TILES=16, dot="fp8keylut"), keys_m.replace(LOADS="descriptor", TILES=16, dot="fp8key", num_stages=3),
        # The Gluon kernel (sm_90, mxfp4_68): async wgmma, the head sum by a second MMA. TILES and
        # the TMA ring's depth (num_stages) are its free parameters.
        *[dot_config(d, "wgmma").replace(TILES=t, num_stages=n) for t, n in ((16, 2), (16, 3), (8, 2), (4, 2), (2, 2))],
    ]
    if prefill:
        picks = [keys_m.replace(QT=2, dot="fp8lut"), heads_m.replace(QT=2), keys_m.replace(QT=2),
                 keys_m.replace(QT=2, BLOCK_N=128, num_warps=8), keys_m.replace(QT=4, num_warps=8), keys_m.replace(QT=2, dot="scaled"),
                 keys_m.replace(QT=2, PREFETCH=1), keys_m.replace(QT=2, TILES=8, PREFETCH=1),
                 keys_m.replace(QT=2, LOADS="descriptor", num_stages=3), keys_m.replace(QT=2, LOADS="descriptor", dot="fp8lut"),
                 keys_m.replace(TILES=16, dot="fp8keylut"), keys_m.replace(QT=2, LOADS="descriptor", dot="fp8keylut"),
                 # With the scale rows by descriptor too, 3 stages: 2376 vs 2779 us at 2 (H200,
                 # 2026-11-29, results/logits_prefill_ab.md).
                 keys_m.replace(QT=2, LOADS="descriptor", dot="fp8keylut", num_stages=3),
                 keys_m.replace(LOADS="descriptor", TILES=16, dot="fp8keylut", num_stages=3),
                 dot_config(d, "wgmma").replace(TILES=16), dot_config(d, "wgmma").replace(TILES=8)]
    if smoke:
        picks = [d.replace(BLOCK_N=32, TILES=2)]
    if given is not None:
        picks = [parse_cfg(text, d) for text in given]
    sp = space(fmt, q_dtype)
    out = [d]
    for c in picks:
        why = sp.infeasible(c) or legality(variant_of(c), target)
        if why is not None and given is not None:
            # A pick asked for by name is never dropped quietly: an A/B of the default alone
            # (2026-12-07, `dot=wgmma` without `LOADS=descriptor`) looks like a result.
            raise SystemExit(f"--pick {c}: {why}")
        if why is None and c not in out:
            out.append(c)
    return out


def check_variants(fmt: str, target: str, device: str, smoke: bool) -> dict[str, str]:
    """Every legal variant (both query dtypes where the variant takes them) at the seed shape, on a
    decode and a prefill problem, against the reference on a subset of rows."""
    buckets = [Bucket("B", 1, 2, 300), Bucket("T", 1, 5, 200)] if smoke else [Bucket("B", 1, 8, 8192), Bucket("T", 1, 512, 4096)]
    res = {}
    for qdt in ("fp8", "bf16"):
        key = logits_key(fmt, qdt)
        sp = space(fmt, qdt)
        for dot in sp.params[0].choices:
            for backend in sp.params[1].choices:
                cfg = dot_config(default_config(fmt, qdt), dot, backend)
                if sp.infeasible(cfg) or legality(variant_of(cfg), target):
                    continue
                name = f"{variant_of(cfg)} q={qdt}"
                try:
                    errs = []
                    for b in buckets:
                        inp = make_inputs(key, b, device, seed=3)
                        inp["out"].fill_(float("nan"))
                        err = verify_inputs(key, inp, logits_run(key, cfg, inp), max_rows=6)
                        if err:
                            errs.append(f"{b.name()}: {err}")
                    res[name] = "; ".join(errs) or "ok"
                except Exception as e:  # a variant that fails is a row of the report, not the end of it
                    res[name] = f"{type(e).__name__}: {e}"[:300]
                print(f"  check {fmt} {name}: {res[name]}", flush=True)
    return res


def _query_slice(q: Any, r: slice) -> Any:
    return tuple(t[r] for t in q) if isinstance(q, tuple) else q[r]  # an MXFP4 query is (values, scales)


def logits_run(key, cfg: Config, inp: dict[str, Any], rows: slice | None = None) -> torch.Tensor:
    r = rows or slice(None)
    return logits(_query_slice(inp["q"], r), inp["w"][r], inp["cache"], key.formats[0], inp["page_size"], inp["block_table"],
                  inp["seq_of"][r], inp["k_start"][r], inp["k_end"][r], inp["max_len"], cfg, out=inp["out"][r])


def _timer(smoke: bool) -> Callable[[Callable[[], Any]], float]:
    if not smoke or torch.cuda.is_available():
        return lambda fn: time_us(fn, graph=True, rep=100)

    def cpu(fn: Callable[[], Any]) -> float:  # the interpreter: one call, labelled as CPU time
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6

    return cpu


def bench_shape(fmt: str, bucket: Bucket, inp: dict[str, Any], n_rot: int, target: str, copy_bw: float, smoke: bool,
                deadline: float = float("inf"), picks: list[str] | None = None, q_dtype: str = "fp8",
                clock: bool = False) -> dict:
    """Time every sweep config at one shape. `inp` holds n_rot disjoint groups of bucket.rep tokens:
    one timed call launches the kernel once per group and the time is divided by n_rot, so the
    groups' caches together exceed L2 (as in serving, where nothing is L2-resident). Past
    `deadline` (time.time()) only the default is timed. `clock`: each timed config also runs
    back to back for a few seconds while the SM clock is sampled (sustained_clock)."""
    key = logits_key(fmt, q_dtype)
    n = bucket.rep
    moved, flops = logits_bytes(key, bucket), logits_flops(key, bucket)
    timer = _timer(smoke)
    rows = []
    for i, c in enumerate(sweep_configs(fmt, bucket.dim == "T", target, smoke, picks, q_dtype)):
        if i > 0 and time.time() > deadline:
            rows.append({"config": c.as_dict(), "skipped": "time budget"})
            continue

        def fn(c=c) -> None:
            for g in range(n_rot):
                logits_run(key, c, inp, slice(g * n, (g + 1) * n))
        try:
            fn()  # compile outside the timing
            us = timer(fn) / n_rot
            err = verify_inputs(key, _rows_view(inp, slice(0, n)), inp["out"][:n], max_rows=4)
        except Exception as e:  # a config that fails to compile or run is a row, not the end of the sweep
            rows.append({"config": c.as_dict(), "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"    {c.to_json()}: {rows[-1]['error']}", flush=True)
            continue
        rows.append({"config": c.as_dict(), "us": us, "verify": err or "ok", "tflops": flops / (us * 1e-6) / 1e12,
                     "tbps": moved / (us * 1e-6) / 1e12})
        if clock and not smoke:
            rows[-1]["clock"] = clk = sustained_clock(fn)
            if clk.get("samples"):
                rows[-1]["kcycles"] = us * clk["sm_mhz"] / 1e3
        print(f"    {c.to_json()}: {us:.1f} us, {rows[-1]['tflops']:.0f} TFLOP/s, {rows[-1]['tbps']:.2f} TB/s, {rows[-1]['verify']}"
              + (f", {rows[-1]['clock'].get('sm_mhz')} MHz sustained, {rows[-1].get('kcycles', 0):.1f} kcycles"
                 if "clock" in rows[-1] else ""), flush=True)
    ok = [r for r in rows if "us" in r and r["verify"] == "ok"]
    floor = moved / copy_bw * 1e6
    return {"format": fmt, "q_dtype": q_dtype, "shape": _shape_name(bucket), "bytes_moved": moved, "flops": flops, "floor_us": floor,
            "default": rows[0], "best": min(ok, key=lambda r: r["us"]) if ok else None, "rows": rows}


def time_quantiser(b: int, timer: Callable[[Callable[[], Any]], float], device: str) -> dict[str, Any]:
    """The MXFP4 query's own kernel (`quant_query`, default config) on the query a decode step of B
    sequences feeds the logits kernel: B x 64 heads x 128 bf16 dims."""
    from tuner.kernels.pack import quant_query

    x = torch.randn(b, 64, 128, device=device).to(torch.bfloat16)
    values, scales = quant_query(x)
    return {"rows": b * 64, "us": timer(lambda: quant_query(x, None, values, scales))}


def _rows_view(inp: dict[str, Any], r: slice) -> dict[str, Any]:
    v = dict(inp)
    for k in ("w", "seq_of", "k_start", "k_end", "out"):
        v[k] = inp[k][r]
    v["q"] = _query_slice(inp["q"], r)
    return v


def _shape_name(b: Bucket) -> str:
    return f"decode B={b.rep} x {b.ctx}" if b.dim == "B" else f"prefill T={b.rep} x {b.ctx} causal"


def markdown(payload: dict) -> str:
    p = payload["provenance"]
    lines = [
        "# Indexer logits benchmark (issue 4)", "",
        f"{p['gpu']} ({p['arch']}), torch {p['torch']}, triton {p['triton']}, {p['date']}. "
        f"Copy bandwidth {payload['copy_bw'] / 1e12:.2f} TB/s (read + write). 64 heads x 128, page 64. "
        "CUDA graph replay, median; the floor is the bytes one launch must move at the copy bandwidth.", "",
        "## Correctness (all legal variants, subset of rows vs the float64 reference)", "",
        "| format | variant | result |", "|---|---|---|",
    ]
    if "quantiser" in payload:
        qz = payload["quantiser"]
        lines[-4:-4] = [f"The MXFP4 query's quantiser (`quant_query`, default config) on {qz['rows']} rows of 128 bf16 "
                        f"dims: {qz['us']:.1f} us, a kernel of its own before the logits kernel.", ""]
    for fmt, res in payload["checks"].items():
        for v, r in res.items():
            lines.append(f"| {fmt} | {v} | {r} |")
    lines += ["", "## Timing", "",
              "| format | query | shape | default us | best us | best config | floor us | best TFLOP/s | best TB/s | best / floor |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in payload["shapes"]:
        d, b = s["default"], s["best"]
        dus = f"{d['us']:.1f}" if "us" in d else "error"
        if b:
            cfg = ",".join(f"{k}={v}" for k, v in sorted(b["config"].items()))
            lines.append(f"| {s['format']} | {s.get('q_dtype', 'fp8')} | {s['shape']} | {dus} | {b['us']:.1f} | {cfg} | {s['floor_us']:.1f} | "
                         f"{b['tflops']:.0f} | {b['tbps']:.2f} | {b['us'] / s['floor_us']:.2f} |")
        else:
            lines.append(f"| {s['format']} | {s.get('q_dtype', 'fp8')} | {s['shape']} | {dus} | - | no config verified | {s['floor_us']:.1f} | - | - | - |")
    clocked = [(s, r) for s in payload["shapes"] for r in s["rows"] if r.get("clock", {}).get("samples")]
    if clocked:
        lines += ["", "## Clock (`--clock`: each config run back to back for 3 s, the SM clock sampled by nvidia-smi)", "",
                  "Time x the sustained clock is what a launch costs in SM cycles: a run at the power cap gets a lower "
                  "clock, not a slower kernel.", "",
                  "| format | shape | config | us | SM MHz (median, min-max) | power W | throttle reasons | kcycles a launch |",
                  "|---|---|---|---|---|---|---|---|"]
        for s, r in clocked:
            c, cfg = r["clock"], ",".join(f"{k}={v}" for k, v in sorted(r["config"].items()))
            lines.append(f"| {s['format']} | {s['shape']} | {cfg} | {r['us']:.1f} | {c['sm_mhz']:.0f} ({c['sm_mhz_min']:.0f}-"
                         f"{c['sm_mhz_max']:.0f}) | {c['power_w']} | {' '.join(c['throttle'])} | {r['kcycles']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, 1-2 configs (runs under TRITON_INTERPRET=1)")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="past this, time only the default configs")
    ap.add_argument("--formats", default=",".join(LOGITS_FORMATS), help="cache formats, comma-separated")
    ap.add_argument("--pick", action="append", default=None,
                    help="NAME=v,... over the default: time these instead of the hand-picked sweep (repeatable)")
    ap.add_argument("--shapes", default=None, help="only these shapes, e.g. B=8,B=64,T (default: all)")
    ap.add_argument("--skip-checks", action="store_true", help="no per-variant check (each timed config is still verified)")
    ap.add_argument("--name", default="logits", help="results file stem under --out (default: logits)")
    ap.add_argument("--q-dtypes", default="fp8", help="query dtypes timed per format, comma-separated: fp8, mxfp4")
    ap.add_argument("--clock", action="store_true",
                    help="also sample the SM clock while each config runs back to back (time x clock: a power-capped "
                         "run is not a slower kernel)")
    args = ap.parse_args()
    q_dtypes = [q for q in args.q_dtypes.split(",") if q]
    if not q_dtypes or set(q_dtypes) - {"fp8", "mxfp4"}:
        ap.error("--q-dtypes: choose among fp8, mxfp4")
    formats = [f for f in args.formats.split(",") if f]
    if not formats or set(formats) - set(LOGITS_FORMATS):
        ap.error(f"--formats: choose among {list(LOGITS_FORMATS)}")
    target = detect().name
    device = "cuda" if torch.cuda.is_available() and target != "interp" else "cpu"
    t_start = time.time()
    copy_bw = copy_bandwidth() if device == "cuda" else NOMINAL_H200_BW
    print(f"target {target}, copy bandwidth {copy_bw / 1e12:.2f} TB/s", flush=True)

    ctx_d, ctx_p = (300, 200) if args.smoke else (65536, 16384)
    decode_bs = (1, 2) if args.smoke else (1, 8, 32, 64)
    t_pre = 5 if args.smoke else 4096
    wanted = set(args.shapes.split(",")) if args.shapes else None
    decode_bs = tuple(b for b in decode_bs if wanted is None or f"B={b}" in wanted)
    prefill = wanted is None or "T" in wanted

    def sweep(fmt: str, pre: bool, qdt: str) -> list[Config]:
        return sweep_configs(fmt, pre, target, args.smoke, args.pick, qdt)

    if device == "cuda":
        # Every swept config compiled in parallel processes first (Triton's on-disk cache): one
        # at a time, compiling took most of a 300 s budget on the H200 host.
        from benchmarks.record_table import precompile

        for fmt in formats:
            for qdt in q_dtypes:
                shapes_b = [Bucket("B", 1, b, ctx_d) for b in decode_bs] + [Bucket("T", 1, t_pre, ctx_p)] * prefill
                items = [(b, c) for b in shapes_b for c in sweep(fmt, b.dim == "T", qdt)]
                precompile("logits", logits_key(fmt, qdt), items, jobs=max(2, min(16, (os.cpu_count() or 4) - 2)))
    checks = {} if args.skip_checks else {fmt: check_variants(fmt, target, device, args.smoke) for fmt in formats}
    shapes: list[dict] = []
    extra: dict[str, Any] = {}
    deadline = t_start + args.budget_s

    def save() -> str:  # after every shape, so that a run cut short keeps what it measured
        payload = {"provenance": provenance(), "target": target, "copy_bw": copy_bw, "smoke": args.smoke,
                   "seconds": time.time() - t_start, "checks": checks, "shapes": shapes, **extra}
        md = markdown(payload)
        write_results(args.out, f"{args.name}_smoke" if args.smoke else args.name, payload, md)
        return md

    def bench_format(fmt: str, qdt: str) -> None:
        key = logits_key(fmt, qdt)
        if qdt == "mxfp4" and "quantiser" not in extra:
            extra["quantiser"] = time_quantiser(max(decode_bs), _timer(args.smoke), device)
        # One pool of 64 (smoke: 4) sequences serves every decode B; small B rotates over disjoint groups.
        pool = 4 if args.smoke else 64
        inp = make_inputs(key, Bucket("B", 1, pool, ctx_d), device, seed=1)
        for b in decode_bs:
            print(f"  {fmt} q={qdt} decode B={b}", flush=True)
            shapes.append(bench_shape(fmt, Bucket("B", 1, b, ctx_d), inp, pool // b, target, copy_bw, args.smoke, deadline,
                                      args.pick, qdt, args.clock))
            save()
        del inp
        if prefill:
            inp = make_inputs(key, Bucket("T", 1, t_pre, ctx_p), device, seed=2)
            print(f"  {fmt} q={qdt} prefill T={t_pre}", flush=True)
            shapes.append(bench_shape(fmt, Bucket("T", 1, t_pre, ctx_p), inp, 1, target, copy_bw, args.smoke, deadline,
                                      args.pick, qdt, args.clock))
            del inp
        if device == "cuda":
            torch.cuda.empty_cache()

    for fmt in formats:
        for qdt in q_dtypes:
            bench_format(fmt, qdt)
            save()
    print(save())
    return 0


if __name__ == "__main__":
    sys.exit(main())
