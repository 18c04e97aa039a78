"""The demo's last act, as an engine would do it: build `TunedKernels.from_server` on the bundle the
demo just tuned, write a window cache and a compressed cache with `pack`, then serve decode calls
of mixed batch sizes through `flash_mla_with_kvcache` (FlashMLA's sparse call) under
a compile counter (what `no_compiles()` guards), and say which buckets the calls used and what their tuned configs bought."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from catalog.core import Bucket

COMP_FMT, WIN_FMT = "nvfp4_288", "fp8_528"  # the V4.1 pair the demo tunes (catalog/keys.py)
PAGE = 64


@dataclass
class EngineReport:
    calls: int = 0
    compiles_after_warmup: int = 0
    seconds: float = 0.0
    by_bucket: dict[str, int] = field(default_factory=dict)  # bucket name -> calls served with its config


def _caches(tk: Any, topk: int, window: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two caches, written by the runtime's own pack (as an engine's prefill would)."""
    from tuner.runtime import alloc_paged_cache

    caches = []
    for fmt, tokens in ((COMP_FMT, 2 * topk), (WIN_FMT, 2 * window)):
        blocks = -(-tokens // PAGE)
        cache = alloc_paged_cache(fmt, blocks, PAGE, device=device, fill=0)
        latents = (torch.randn(tokens, 512, device=device) * 2).to(torch.bfloat16)
        tk.pack(latents, torch.arange(tokens, device=device), cache, fmt)
        caches.append(cache)
    return caches[0], caches[1]


def _decode_bucket(bundle: dict[str, Any], t: int) -> str:
    for e in bundle["kernels"]["decode"]["buckets"]:
        if Bucket.from_json(e["bucket"]).covers(t):
            return e["name"]
    return "none"


def serve_decode_calls(url: str, arch: str, shape: dict[str, int], bundle: dict[str, Any], sizes: list[int],
                       calls: int, seed: int = 0) -> EngineReport:
    """`calls` decode steps of random batch sizes from `sizes` (tokens = batch x 1 query each)."""
    from tuner.runtime import TunedKernels
    from tuner.warmup import count_compiles

    heads, topk, window = shape["heads"], shape["topk"], shape["window"]
    device = "cuda" if torch.cuda.is_available() and arch != "interp" else "cpu"
    # The demo packs and decodes, never scores: warming only those families keeps the start short
    # (an engine that runs the indexer too leaves `kernels` out and warms every family).
    tk = TunedKernels.from_server(url, arch=arch, heads=heads, topk=topk, window=window, kernels=["pack", "decode"])
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    comp, win = _caches(tk, topk, window, device)
    report = EngineReport()
    t0 = time.perf_counter()
    try:
        with count_compiles() as seen:  # what no_compiles() raises on, counted to be shown
            for _ in range(calls):
                b = rng.choice(sizes)
                q = torch.randn(b, 1, heads, 512, generator=g).to(torch.bfloat16).to(device)
                extra = torch.randint(0, 2 * topk, (b, 1, topk), generator=g, dtype=torch.int32).to(device)
                idx = torch.randint(0, 2 * window, (b, 1, window), generator=g, dtype=torch.int32).to(device)
                tk.flash_mla_with_kvcache(q, win, None, None, 512, None, indices=idx, extra_k_cache=comp,
                                          extra_indices_in_kvcache=extra)
                name = _decode_bucket(bundle, b)
                report.by_bucket[name] = report.by_bucket.get(name, 0) + 1
                report.calls += 1
            if device == "cuda":
                torch.cuda.synchronize()
            report.compiles_after_warmup = len(seen)
    finally:
        tk.close()
    report.seconds = time.perf_counter() - t0
    return report
