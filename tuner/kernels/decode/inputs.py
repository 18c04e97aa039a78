"""A decode launch's inputs (random records in paged caches, ragged slot lists), its run from them
and its check against the float64 reference (FORMATS.md reader tolerance)."""

from __future__ import annotations

import math
from typing import Any

import torch

from catalog.core import Config
from catalog.families.decode import DECODE_PAGE_SIZE, MAX_SPLITS, _fmt512
from catalog.formats import RecordFormat
from tuner.formats import alloc_cache, quantize, write_slots
from tuner.kernels.base import device_generator
from tuner.kernels.decode.launch import decode, max_partials, workspace_numel
from tuner.reference import compare, decode_reference

TOL = 1e-2  # FORMATS.md reader tolerance with bf16 operands


def _random_cache(fmt: RecordFormat, n_slots: int, page_size: int, device: str, g: torch.Generator) -> torch.Tensor:
    """A cache whose first `n_slots` slots hold records of random latents (magnitudes spread over a
    few decades per token, as real latents are); pages past them stay zero."""
    pages = -(-n_slots // page_size)
    # On a GPU the latents are drawn and quantized there (see device_generator).
    dev = torch.device(device)
    dg = device_generator(g, dev)
    x = torch.randn(n_slots, 512, generator=dg, device=dev) * torch.exp(torch.randn(n_slots, 1, generator=dg, device=dev))
    cache = alloc_cache(fmt, pages, page_size, device=dev, fill=0)
    write_slots(cache, quantize(x.to(torch.bfloat16), fmt), torch.arange(n_slots, device=dev), fmt, page_size)
    return cache


def _ragged_slots(n_tok: int, n: int, pool: int, g: torch.Generator, hole_every: int = 32) -> torch.Tensor:
    """int32[T, n]: distinct slots per token from a shared pool (so keys are not all L2-resident),
    with about one in `hole_every` entries -1 (short sequences, evicted entries)."""
    idx = torch.stack([torch.randperm(pool, generator=g)[:n] for _ in range(n_tok)]).int()
    holes = torch.randint(0, hole_every, (n_tok, n), generator=g) == 0
    return torch.where(holes, torch.full_like(idx, -1), idx)


def make_decode_inputs(
    comp_fmt: str, win_fmt: str, n_tok: int, heads: int, topk: int, window: int, device: str, seed: int,
    page_size: int = DECODE_PAGE_SIZE, win_page_size: int | None = None, sink: bool = True, max_splits: int = MAX_SPLITS,
) -> dict[str, Any]:
    """One launch's inputs with preallocated outputs, workspace and arrival counters (see `decode`'s
    `out`, `workspace`, `counters`), sized for any config with NUM_SPLITS <= max_splits."""
    cf, wf = _fmt512(comp_fmt), _fmt512(win_fmt)
    wps = win_page_size or page_size
    g = torch.Generator().manual_seed(seed)
    comp_pool = max(n_tok * topk, 2 * topk)
    win_pool = max(n_tok * window, 2 * window)
    inputs: dict[str, Any] = {
        "q": torch.randn(n_tok, heads, 512, generator=g).to(torch.bfloat16).to(device),
        "comp_cache": _random_cache(cf, comp_pool, page_size, device, g),
        "topk_idx": _ragged_slots(n_tok, topk, comp_pool, g).to(device),
        "win_cache": _random_cache(wf, win_pool, wps, device, g),
        "window_idx": _ragged_slots(n_tok, window, win_pool, g).to(device),
        "attn_sink": (torch.randn(heads, generator=g) * 2).to(device) if sink else None,
        "sm_scale": 1.0 / math.sqrt(512),
        "page_size": page_size,
        "win_page_size": wps,
        "out": (torch.empty(n_tok, heads, 512, dtype=torch.bfloat16, device=device),
                torch.empty(n_tok, heads, dtype=torch.float32, device=device)),
        "workspace": torch.empty(workspace_numel(n_tok, heads, max_partials(topk, window, max_splits)),
                                 dtype=torch.float32, device=device),
        "counters": torch.zeros(max(n_tok, 1), dtype=torch.int32, device=device),  # left zero by every launch
    }
    return inputs


def run_decode(comp_fmt: str, win_fmt: str, config: Config | None, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    i = inputs
    return decode(i["q"], i["comp_cache"], comp_fmt, i["topk_idx"], i["win_cache"], win_fmt, i["window_idx"],
                  i["page_size"], i["sm_scale"], i["attn_sink"], config, win_page_size=i["win_page_size"],
                  out=i["out"], workspace=i["workspace"], counters=i.get("counters"))


def verify_decode(comp_fmt: str, win_fmt: str, inputs: dict[str, Any], outputs: tuple[torch.Tensor, torch.Tensor]) -> str | None:
    i = inputs
    ro, rl = decode_reference(i["q"], i["comp_cache"], comp_fmt, i["topk_idx"], i["win_cache"], win_fmt,
                              i["window_idx"], i["page_size"], i["sm_scale"], i["attn_sink"], win_page_size=i["win_page_size"])
    o, lse = outputs
    bad_o = compare(o, ro, TOL)
    if bad_o:
        return f"o: {bad_o}"
    bad_l = compare(lse, rl, TOL)
    return f"lse: {bad_l}" if bad_l else None
