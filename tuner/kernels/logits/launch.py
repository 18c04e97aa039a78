"""The logits launcher: argument checks, the config a launch runs, and the launches of
logits_kernel (gathered rows or tensor-descriptor loads) and of the wgmma path's
logits_wgmma_kernel. Inputs, verification and cross-compile cases live beside it (`inputs`,
`xcompile`).

A query is a tensor (bf16 or fp8 e4m3, [T, Hi, 128]) or an MXFP4 query `(values, scales)`:
uint8[T, Hi, 64] and uint8[T, Hi, 4], one mxfp4_68 record per row (`tuner.kernels.pack.quant_query`)."""

from __future__ import annotations

from typing import Any, Union

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from catalog.core import Config
from catalog.families.logits import (MXFP4_Q, WGMMA_BLOCK_N, WGMMA_SWIZZLE, _check_fmt, _check_heads, config_legality,
                                     default_config, desc_box, kernel_constexprs, render_variant, scale_desc, space)
from catalog.formats import RecordFormat, get_format, page_bytes
from templates import render as R
from tuner.targets import detect

Q_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}

Query = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]  # a bf16/fp8 tensor, or MXFP4 (values, scales)


def q_dtype_name(dtype: torch.dtype) -> str:
    for name, dt in Q_DTYPES.items():
        if dt == dtype:
            return name
    raise ValueError(f"q must be bf16 or fp8 e4m3 (torch.float8_e4m3fn), got {dtype}")


def _check_index(name: str, t: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> None:
    if t.dtype != torch.int32 or tuple(t.shape) != shape or not t.is_contiguous() or t.device != device:
        raise ValueError(f"{name} must be a contiguous int32{list(shape)} on {device}, got {t.dtype}{list(t.shape)} on {t.device}")


def query_dtype_name(q: Query) -> str:
    """The query dtype a logits key names for `q`: "mxfp4" for a (values, scales) pair."""
    return MXFP4_Q if isinstance(q, tuple) else q_dtype_name(q.dtype)


def query_tensors(q: Query) -> tuple[torch.Tensor, ...]:
    """The kernel's query arguments: (values, scales) of an MXFP4 query, else (q,)."""
    return tuple(q) if isinstance(q, tuple) else (q,)


def _check_mxfp4_query(q: tuple[torch.Tensor, torch.Tensor], dims: int) -> None:
    if len(q) != 2:
        raise ValueError(f"an MXFP4 query is a pair (values, scales), got {len(q)} tensors")
    v, sc = q
    if v.dtype != torch.uint8 or v.dim() != 3 or v.shape[2] != dims // 2 or not v.is_contiguous():
        raise ValueError(f"MXFP4 query values must be a contiguous uint8[T, heads, {dims // 2}], got {v.dtype}{list(v.shape)}")
    shape = (v.shape[0], v.shape[1], dims // 32)
    if sc.dtype != torch.uint8 or tuple(sc.shape) != shape or not sc.is_contiguous() or sc.device != v.device:
        raise ValueError(f"MXFP4 query scales must be a contiguous uint8{list(shape)} on {v.device}, "
                         f"got {sc.dtype}{list(sc.shape)} on {sc.device}")


def _check_query(q: Query, w: torch.Tensor, f: RecordFormat) -> tuple[str, int, int]:
    """(query dtype name, T, heads) of a query and its weights as `logits` takes them."""
    if isinstance(q, tuple):
        _check_mxfp4_query(q, f.dims)
        qdt, q = MXFP4_Q, q[0]
    else:
        if q.dim() != 3 or q.shape[2] != f.dims:
            raise ValueError(f"q must be [T, heads, {f.dims}], got {list(q.shape)}")
        qdt = q_dtype_name(q.dtype)
    t, hi = q.shape[0], q.shape[1]
    _check_heads(hi)
    if not q.is_contiguous():
        raise ValueError("q must be contiguous")
    dev = q.device
    if w.dtype != torch.float32 or tuple(w.shape) != (t, hi) or not w.is_contiguous() or w.device != dev:
        raise ValueError(f"w must be a contiguous fp32[{t}, {hi}] on {dev}, got {w.dtype}{list(w.shape)}")
    return qdt, t, hi


def _check_cache(cache: torch.Tensor, f: RecordFormat, page_size: int, dev: torch.device) -> int:
    """The page bytes of a paged cache as `logits` takes it."""
    if not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    pb = page_bytes(f, page_size)
    if cache.dtype != torch.uint8 or cache.dim() != 2 or cache.shape[1] != pb or not cache.is_contiguous() or cache.device != dev:
        raise ValueError(f"cache must be a contiguous uint8[num_pages, {pb}] on {dev} for {f.name} with page size {page_size}")
    return pb


def _check_positions(block_table: torch.Tensor, seq_of: torch.Tensor, k_start: torch.Tensor, k_end: torch.Tensor,
                     t: int, max_len: int, dev: torch.device) -> None:
    if block_table.dim() != 2:
        raise ValueError(f"block_table must be int32[B, max_pages], got {list(block_table.shape)}")
    _check_index("block_table", block_table, tuple(block_table.shape), dev)
    for name, x in (("seq_of", seq_of), ("k_start", k_start), ("k_end", k_end)):
        _check_index(name, x, (t,), dev)
    if not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be a non-negative int, got {max_len!r}")


def _output(out: torch.Tensor | None, t: int, max_len: int, dev: torch.device) -> torch.Tensor:
    if out is None:
        return torch.empty(t, max_len, dtype=torch.float32, device=dev)
    if out.dtype != torch.float32 or tuple(out.shape) != (t, max_len) or not out.is_contiguous() or out.device != dev:
        raise ValueError(f"out must be a contiguous fp32[{t}, {max_len}] on {dev}")
    return out


def _checked_config(config: Config | None, f: RecordFormat, qdt: str, hi: int, page_size: int) -> Config:
    """The config a launch runs: `config` or the key's default, feasible and runnable here."""
    cfg = config or default_config(f, qdt, hi)
    # Configs tuned before the MMA, PREFETCH and LOADS axes existed meant what the kernel did then.
    cfg = Config.from_dict({"MMA": "heads_m", "PREFETCH": 0, "LOADS": "gather", **cfg.as_dict()})
    if qdt == MXFP4_Q and "query" not in cfg.as_dict():
        cfg = cfg.replace(query=MXFP4_Q)  # an MXFP4 query's configs say so (a config given without it)
    why = space(f, qdt, hi).infeasible(cfg)
    if why:
        raise ValueError(f"infeasible logits config {cfg.to_json()}: {why}")
    if cfg["dot"] == "wgmma" and page_size % WGMMA_BLOCK_N:
        # Pages smaller than its 64-key tiles (16, 32): the same codes and key scales by the Triton
        # kernel, its rows gathered.
        cfg = cfg.replace(dot="fp8keylut", LOADS="gather")
    illegal = config_legality(cfg, detect().name)
    if illegal:
        raise ValueError(f"config {cfg.to_json()} cannot run here: {illegal}")
    return cfg


def logits(
    q: Query,
    w: torch.Tensor,
    cache: torch.Tensor,
    fmt: str | RecordFormat,
    page_size: int,
    block_table: torch.Tensor,
    seq_of: torch.Tensor,
    k_start: torch.Tensor,
    k_end: torch.Tensor,
    max_len: int,
    config: Config | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """MQA indexer logits: fp32[T, max_len], `sum_h w[t,h] * relu(q[t,h] . K_j)` for
    `k_start[t] <= j < k_end[t]` (K_j: position j of sequence `seq_of[t]`), -inf elsewhere.
    `q`: bf16 or fp8 e4m3 [T, heads, 128], or an MXFP4 query (values uint8[T, heads, 64], scales
    uint8[T, heads, 4]).

    `out` (optional, fp32[T, max_len] contiguous) is written in place, so a caller can capture the
    launch in a CUDA graph. Index tensors are read on the device: no host synchronisation.
    """
    f = _check_fmt(fmt)
    qdt, t, hi = _check_query(q, w, f)
    dev = w.device
    pb = _check_cache(cache, f, page_size, dev)
    _check_positions(block_table, seq_of, k_start, k_end, t, max_len, dev)
    out = _output(out, t, max_len, dev)
    cfg = _checked_config(config, f, qdt, hi, page_size)
    if t == 0 or max_len == 0:
        return out
    if block_table.shape[0] == 0 or block_table.shape[1] == 0:
        raise ValueError("block_table must have at least one sequence and one page column")
    mod = R.load(render_variant(f, cfg["dot"], cfg["backend"], qdt))
    launch = _launch_wgmma if cfg["dot"] == "wgmma" else _launch_triton
    launch(mod, q, w, cache, f, page_size, pb, block_table, seq_of, k_start, k_end, max_len, cfg, out)
    return out


def _launch_wgmma(mod: Any, q: torch.Tensor, w: torch.Tensor, cache: torch.Tensor, f: RecordFormat, page_size: int,
                  pb: int, block_table: torch.Tensor, seq_of: torch.Tensor, k_start: torch.Tensor, k_end: torch.Tensor,
                  max_len: int, cfg: Config, out: torch.Tensor) -> None:
    """logits_wgmma_kernel over checked arguments: a program a token and TILES 64-key tiles."""
    t, hi = q.shape[0], q.shape[1]
    k_desc = wgmma_descriptor(cache, f, page_size)
    grid = (triton.cdiv(max_len, WGMMA_BLOCK_N * cfg["TILES"]), t)
    mod.logits_wgmma_kernel[grid](
        q, w, cache, k_desc, block_table, seq_of, k_start, k_end, out, t, max_len, block_table.shape[1], pb,
        HI=hi, PAGE=page_size, BLOCK_N=WGMMA_BLOCK_N, TILES=cfg["TILES"], NBUF=cfg["num_stages"], num_warps=4,
    )


def _launch_triton(mod: Any, q: Query, w: torch.Tensor, cache: torch.Tensor, f: RecordFormat, page_size: int,
                   pb: int, block_table: torch.Tensor, seq_of: torch.Tensor, k_start: torch.Tensor,
                   k_end: torch.Tensor, max_len: int, cfg: Config, out: torch.Tensor) -> None:
    """logits_kernel over checked arguments: a program takes QT tokens against TILES tiles."""
    qs = query_tensors(q)
    t, hi = qs[0].shape[0], qs[0].shape[1]
    bn, tiles, qt = cfg["BLOCK_N"], cfg["TILES"], cfg["QT"]
    consts = kernel_constexprs(cfg, f, query_dtype_name(q), hi, page_size, pb)
    k_desc = s_desc = cache
    if consts["DESC"]:
        k_desc = TensorDescriptor(cache, [cache.shape[0], page_size, f.data_bytes], [pb, f.data_bytes, 1],
                                  [1, bn, desc_box(f, cfg["dot"])])
    if consts["DESC"] and scale_desc(f, cfg["dot"], bn):
        # The scale rows (one 32-bit word a key) follow a page's data rows: a 16-byte aligned start.
        scales = cache.view(torch.int32)[:, page_size * f.data_bytes // 4:]
        s_desc = TensorDescriptor(scales, [cache.shape[0], page_size], [pb // 4, 1], [1, bn])
    grid = (triton.cdiv(max_len, bn * tiles), triton.cdiv(t, qt))
    mod.logits_kernel[grid](
        *qs, w, cache, k_desc, s_desc, block_table, seq_of, k_start, k_end, out,
        t, max_len, block_table.shape[1], pb,
        **consts, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )


def wgmma_descriptor(cache: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> Any:
    """The wgmma path's TMA descriptor: each page's data rows, [pages, page_size, data_bytes], in
    boxes of one 64-key tile, staged with the 64-byte swizzle its kernel reads them by."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    f = get_format(fmt)
    pb = cache.shape[1]
    layout = gl.NVMMASharedLayout(swizzle_byte_width=WGMMA_SWIZZLE, element_bitwidth=8, rank=3)
    return GluonDescriptor(cache, [cache.shape[0], page_size, f.data_bytes], [pb, f.data_bytes, 1],
                           [1, WGMMA_BLOCK_N, f.data_bytes], layout)
