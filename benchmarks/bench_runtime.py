"""The engine runtime's entry points against the direct launchers (issue 23), on a GPU:

- `flash_mla_with_kvcache` (V4.1 pair, H=16, top-k 512, window 128) against `tuner.kernels.decode.decode`
  and `fp8_paged_mqa_logits` (mxfp4_68, 64 index heads, 64K context) against `tuner.kernels.logits.logits`,
  at T=1 and T=64, each under CUDA-graph replay with the same config: the adapter must add no kernel
  and no copy, so the two medians should match within noise; the decode rows also with FlashMLA's
  ragged `topk_length` / `extra_topk_length` (the launcher given the same lengths);
- the host time of one call outside graphs (the adapter's Python: bucket lookup, views, checks),
  measured with the device synchronised before and after a batch of calls.

    python benchmarks/bench_runtime.py --out benchmarks/results     # on a GPU, after warmup
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import provenance, time_us, write_results  # noqa: E402
from tuner.kernels.decode import decode  # noqa: E402
from tuner.kernels.logits import logits  # noqa: E402
from tuner.runtime import TunedKernels, alloc_paged_cache, as_pages  # noqa: E402

H, TOPK, WINDOW, PAGE, HI, CTX = 16, 512, 128, 64, 64, 65536


def _host_us(fn: Callable[[], Any], calls: int = 200) -> float:
    """Host time of one call: a batch of calls between two synchronisations, minus nothing (the
    kernels run asynchronously behind it, so this is the launch path's cost)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def _decode_pair(tk: TunedKernels, t: int, lengths: bool = False) -> tuple[Callable[[], Any], Callable[[], Any]]:
    g = torch.Generator(device="cuda").manual_seed(t)
    comp = alloc_paged_cache("nvfp4_288", 4 * TOPK // PAGE, PAGE, device="cuda", fill=0)
    win = alloc_paged_cache("fp8_528", 4 * WINDOW // PAGE, PAGE, device="cuda", fill=0)
    comp.view(torch.uint8).random_(0, 128, generator=g)
    win.view(torch.uint8).random_(0, 120, generator=g)
    q = torch.randn(t, 1, H, 512, device="cuda", generator=g).to(torch.bfloat16)
    ci = torch.randint(0, 4 * TOPK, (t, 1, TOPK), device="cuda", generator=g, dtype=torch.int32)
    wi = torch.randint(0, 4 * WINDOW, (t, 1, WINDOW), device="cuda", generator=g, dtype=torch.int32)
    cfg = tk.config_for("decode", ("nvfp4_288", "fp8_528"), "T", t, heads=H, topk=TOPK, window=WINDOW)
    (cf, _), (wf, _) = as_pages(comp, "nvfp4_288"), as_pages(win, "fp8_528")
    counters = torch.zeros(max(64, t), dtype=torch.int32, device="cuda")
    # FlashMLA's ragged lists: each sequence reads between half and all of its top-k and window.
    cl = torch.randint(TOPK // 2, TOPK + 1, (t,), device="cuda", generator=g, dtype=torch.int32) if lengths else None
    wl = torch.randint(WINDOW // 2, WINDOW + 1, (t,), device="cuda", generator=g, dtype=torch.int32) if lengths else None

    def entry() -> Any:
        return tk.flash_mla_with_kvcache(q, win, None, None, 512, None, softmax_scale=0.044, indices=wi,
                                         extra_k_cache=comp, extra_indices_in_kvcache=ci, topk_length=wl,
                                         extra_topk_length=cl)

    def direct() -> Any:
        return decode(q.view(t, H, 512), cf, "nvfp4_288", ci.view(t, TOPK), wf, "fp8_528", wi.view(t, WINDOW), PAGE,
                      0.044, None, cfg, counters=counters, topk_lens=cl, window_lens=wl)

    return entry, direct


def _logits_pair(tk: TunedKernels, b: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    g = torch.Generator(device="cuda").manual_seed(b)
    blocks = CTX // PAGE
    cache = alloc_paged_cache("mxfp4_68", b * blocks, PAGE, device="cuda", fill=0)
    cache.view(torch.uint8).random_(0, 120, generator=g)
    table = torch.arange(b * blocks, device="cuda", dtype=torch.int32).view(b, blocks)
    q = (torch.randn(b, 1, HI, 128, device="cuda", generator=g) * 0.5).to(torch.float8_e4m3fn)
    w = torch.rand(b, HI, device="cuda", generator=g)
    lens = torch.full((b,), CTX, dtype=torch.int32, device="cuda")
    cfg = tk.config_for("logits", ("mxfp4_68", "fp8"), "B", b, heads=HI, ctx=CTX)
    flat, _ = as_pages(cache, "mxfp4_68")
    seq_of = torch.arange(b, dtype=torch.int32, device="cuda")
    k_start = torch.zeros(b, dtype=torch.int32, device="cuda")

    def entry() -> Any:
        return tk.fp8_paged_mqa_logits(q, cache, w, lens, table, None, CTX)

    def direct() -> Any:
        return logits(q.view(b, HI, 128), w, flat, "mxfp4_68", PAGE, table, seq_of, k_start, lens, CTX, cfg)

    return entry, direct


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--url", default=None, help="a kvtune API to take the tuned bundle from (default: defaults)")
    args = ap.parse_args()
    shape = {"heads": H, "topk": TOPK, "window": WINDOW}
    # No construction-time warmup: do_bench's warm-up runs compile what each row launches.
    tk = (TunedKernels.from_server(args.url, warmup=False, **shape) if args.url
          else TunedKernels.defaults(None, warmup=False, **shape))
    rows = []
    pairs = (("flash_mla_with_kvcache", _decode_pair),
             ("flash_mla_with_kvcache, topk_length", lambda tk, t: _decode_pair(tk, t, lengths=True)),
             ("fp8_paged_mqa_logits", _logits_pair))
    for name, pair in pairs:
        for t in (1, 64):
            entry, direct = pair(tk, t)
            rows.append({"entry_point": name, "T": t, "entry_us": time_us(entry), "direct_us": time_us(direct),
                         "entry_host_us": _host_us(entry), "direct_host_us": _host_us(direct)})
    prov = provenance()
    md = [f"# Runtime entry points against the direct launchers ({prov['date']})", "",
          f"{prov['gpu']} ({prov['arch']}), torch {prov['torch']}, triton {prov['triton']}; CUDA-graph replay "
          "medians with one config per row; host time: one call outside graphs, device synchronised around "
          "a batch of 200.", "", "| entry point | T | entry us | direct us | ratio | entry host us | direct host us |",
          "|---|---|---|---|---|---|---|"]
    md += [f"| {r['entry_point']} | {r['T']} | {r['entry_us']:.2f} | {r['direct_us']:.2f} | "
           f"{r['entry_us'] / r['direct_us']:.3f} | {r['entry_host_us']:.1f} | {r['direct_host_us']:.1f} |" for r in rows]
    write_results(args.out, "runtime_h200", {"provenance": prov, "rows": rows}, "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
