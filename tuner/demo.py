"""The main job's demos: runnable on a GPU or, without one, on Triton's interpreter."""

from __future__ import annotations

import os
import time

import torch

from tuner.formats import FORMATS, alloc_cache, quantize, read_slots
from tuner.targets import detect


def _device() -> str:
    return "cuda" if detect().is_gpu else "cpu"


def pack_demo(tokens: int | None = None, page_size: int = 64) -> int:
    """Pack random tokens into every record format, check the bytes against the reference."""
    if not detect().is_gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from tuner.kernels.pack import pack

    target = detect()
    dev = _device()
    n = tokens or (65536 if target.is_gpu else 64)
    print(f"kvtune pack demo on {target.name} ({'CPU timings: Triton interpreter' if not target.is_gpu else dev}), {n} tokens, page {page_size}")
    bad = 0
    for name, f in FORMATS.items():
        g = torch.Generator(device="cpu").manual_seed(1)
        x = (torch.randn(n, f.dims, generator=g) * 4).to(torch.bfloat16).to(dev)
        pages = -(-n // page_size) + 1
        slots = torch.randperm(pages * page_size, generator=g)[:n].to(dev)
        slots[::17] = -1
        cache = alloc_cache(f, pages, page_size, device=dev)
        pack(x, slots, cache, f, page_size)  # compile / warm
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        pack(x, slots, cache, f, page_size)
        if dev == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        live = slots >= 0
        got = read_slots(cache, slots[live], f, page_size)
        ok = torch.equal(got.cpu(), quantize(x[live].cpu(), f))
        bad += not ok
        print(f"  {name:10s} {f.bytes_per_token:4d} B/token  {'byte-exact' if ok else 'MISMATCH'}  {dt * 1e3:9.2f} ms")
    return 1 if bad else 0


def main_demo() -> int:
    return pack_demo()
