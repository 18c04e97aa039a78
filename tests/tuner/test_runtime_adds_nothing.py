"""The drop-in entry points add no kernel and no copy: `flash_mla_with_kvcache` and
`fp8_paged_mqa_logits` launch exactly the Triton kernels the direct launcher launches for the same
config (same kernels, same scalar arguments, same constexprs), and the pointer arguments into the
caches are the engine's own storage. (The time of a call is the H200 benchmark's to show:
benchmarks/bench_runtime.py.)"""

from __future__ import annotations

from typing import Any

import torch

from catalog.formats import get_format, page_bytes
from tuner.formats import quantize, write_slots
from tuner.kernels.decode import decode
from tuner.kernels.logits import logits
from tuner.runtime import TunedKernels, alloc_paged_cache, as_pages
from tuner.runtime.views import paged_view
from tuner.warmup import record_launches

H, TOPK, WINDOW, PAGE = 16, 40, 20, 16


def _filled(fmt: str, tokens: int, g: torch.Generator, device: str) -> torch.Tensor:
    cache = alloc_paged_cache(fmt, -(-tokens // PAGE), PAGE, fill=0)
    flat, _ = as_pages(cache, fmt)
    x = torch.randn(tokens, get_format(fmt).dims, generator=g).to(torch.bfloat16)
    write_slots(flat, quantize(x, fmt), torch.arange(tokens), fmt, PAGE)
    # The pages move, then the engine's view is taken again: `.to(device)` of the strided view
    # itself would copy it compact, dropping each page's padding.
    return paged_view(flat.to(device), get_format(fmt), PAGE)


def _signature(launches: list[Any]) -> list[tuple[str, tuple[Any, ...], tuple[Any, ...]]]:
    """Each launch as (kernel, its non-tensor arguments, its keyword arguments): what must be equal."""
    out = []
    for la in launches:
        scalars = tuple(a for a in la.args if not isinstance(a, torch.Tensor))
        out.append((la.fn.fn.__name__, scalars, tuple(sorted((k, str(v)) for k, v in la.kwargs.items()))))
    return out


def _pointers(launches: list[Any]) -> set[int]:
    return {a.untyped_storage().data_ptr() for la in launches for a in la.args if isinstance(a, torch.Tensor)}


def test_flash_mla_entry_point_launches_what_the_launcher_launches_on_the_engines_caches(
        target_name: str, device: str) -> None:
    g = torch.Generator().manual_seed(3)
    tk = TunedKernels.defaults(target_name, H, TOPK, WINDOW, warmup=False)
    comp, win = _filled("nvfp4_288", 2 * TOPK, g, device), _filled("fp8_528", 2 * WINDOW, g, device)
    b = 3
    q = torch.randn(b, 1, H, 512, generator=g).to(torch.bfloat16).to(device)
    ci = torch.randint(0, 2 * TOPK, (b, 1, TOPK), generator=g, dtype=torch.int32).to(device)
    wi = torch.randint(0, 2 * WINDOW, (b, 1, WINDOW), generator=g, dtype=torch.int32).to(device)
    with record_launches() as via_entry:
        tk.flash_mla_with_kvcache(q, win, None, None, 512, None, softmax_scale=0.1, indices=wi, extra_k_cache=comp,
                                  extra_indices_in_kvcache=ci)
    cfg = tk.config_for("decode", ("nvfp4_288", "fp8_528"), "T", b, heads=H, topk=TOPK, window=WINDOW)
    (cflat, _), (wflat, _) = as_pages(comp, "nvfp4_288"), as_pages(win, "fp8_528")
    with record_launches() as direct:
        decode(q.view(b, H, 512), cflat, "nvfp4_288", ci.view(b, TOPK), wflat, "fp8_528", wi.view(b, WINDOW), PAGE,
               0.1, None, cfg, counters=torch.zeros(64, dtype=torch.int32, device=device))
    assert via_entry and _signature(via_entry) == _signature(direct)
    # The caches the kernels read are the engine's tensors, not copies of them.
    assert {comp.untyped_storage().data_ptr(), win.untyped_storage().data_ptr()} <= _pointers(via_entry)
    # With FlashMLA's topk_length / extra_topk_length the kernels read the engine's own index lists
    # and lengths: the bound is applied inside the kernel, nothing is rewritten or copied first.
    lens_c = torch.tensor([5, 40, 0], dtype=torch.int32, device=device)
    lens_w = torch.tensor([20, 3, 7], dtype=torch.int32, device=device)
    with record_launches() as bounded:
        tk.flash_mla_with_kvcache(q, win, None, None, 512, None, softmax_scale=0.1, indices=wi, extra_k_cache=comp,
                                  extra_indices_in_kvcache=ci, topk_length=lens_w, extra_topk_length=lens_c)
    assert [la.fn.fn.__name__ for la in bounded] == [la.fn.fn.__name__ for la in via_entry]
    assert {t.untyped_storage().data_ptr() for t in (ci, wi, lens_c, lens_w)} <= _pointers(bounded)


def test_paged_logits_entry_point_launches_what_the_launcher_launches_on_the_engines_cache(
        target_name: str, device: str) -> None:
    g = torch.Generator().manual_seed(4)
    tk = TunedKernels.defaults(target_name, H, TOPK, WINDOW, warmup=False)
    ctx, hi, fmt = [50, 20], 64, "fp8_132"
    pages = sum(-(-c // PAGE) for c in ctx)
    cache = _filled(fmt, pages * PAGE, g, device)
    assert cache.shape == (pages, PAGE, 1, 132) and as_pages(cache, fmt)[0].shape[1] == page_bytes(fmt, PAGE)
    block_table = torch.tensor([[0, 1, 2, 3], [4, 5, 0, 0]], dtype=torch.int32, device=device)
    q = (torch.randn(2, 1, hi, 128, generator=g) * 0.5).to(torch.float8_e4m3fn).to(device)
    w = torch.rand(2, hi, generator=g).to(device)
    lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    with record_launches() as via_entry:
        tk.fp8_paged_mqa_logits(q, cache, w, lens, block_table, None, 64)
    cfg = tk.config_for("logits", (fmt, "fp8"), "B", 2, heads=hi, ctx=64)
    flat, _ = as_pages(cache, fmt)
    seq_of = torch.arange(2, dtype=torch.int32, device=device)
    with record_launches() as direct:
        logits(q.view(2, hi, 128), w, flat, fmt, PAGE, block_table, seq_of,
               torch.zeros(2, dtype=torch.int32, device=device), lens, 64, cfg)
    assert via_entry and _signature(via_entry) == _signature(direct)
    assert cache.untyped_storage().data_ptr() in _pointers(via_entry)
