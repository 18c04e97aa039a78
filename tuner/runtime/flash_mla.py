"""FlashMLA's `flash_mla_with_kvcache` (sparse decode, DeepSeek V4 / V4.1) mapped onto kvtune's
decode tile (`tuner.kernels.decode.decode`).

FlashMLA attends, per query token, to `indices` slots of `k_cache` plus `extra_indices_in_kvcache`
slots of `extra_k_cache`. V4.1 pairs an fp8_528 sliding-window cache (`k_cache`) with an nvfp4_288
compressed cache (`extra_k_cache`); V4 has fp8_584 on both sides. kvtune's decode tile takes the
same two lists as (compressed, window): `extra_*` is its compressed list, `k_cache`/`indices` its
window list. Both caches are read in place (`views.as_pages`); q and the index lists are viewed
as `[T = B * s_q, ...]`.

`topk_length` / `extra_topk_length` (B,) go to the launcher as they are: the Triton decode kernels
read each token's length on the device and stop their key loop there (the caller's index lists are
neither copied nor rewritten); the wgmma kernel has no bound of its own yet, so for its configs the
launcher masks the lists past the length on the device (see `tuner.kernels.decode.decode`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from catalog.formats import RecordFormat
from tuner.runtime.views import as_pages, format_of

WINDOW_FORMATS = ("fp8_584", "fp8_528")  # k_cache, told by its bytes per token
COMPRESSED_FORMATS = ("fp8_584", "fp8_528", "nvfp4_288")  # extra_k_cache
HEAD_DIM = 512


@dataclass(frozen=True)
class SparseDecodeCall:
    """One flash_mla_with_kvcache call as the decode launcher's arguments."""

    q: torch.Tensor  # bf16[T, H, 512]
    comp_cache: torch.Tensor  # uint8[pages, page_bytes] views
    comp_fmt: RecordFormat
    comp_idx: torch.Tensor  # int32[T, topk]
    comp_page: int
    win_cache: torch.Tensor
    win_fmt: RecordFormat
    win_idx: torch.Tensor  # int32[T, window]
    win_page: int
    comp_lens: torch.Tensor | None  # int32[B]: extra_topk_length
    win_lens: torch.Tensor | None  # int32[B]: topk_length
    sm_scale: float
    sink: torch.Tensor | None
    batch: int
    s_q: int

    @property
    def tokens(self) -> int:
        return self.batch * self.s_q

    @property
    def heads(self) -> int:
        return int(self.q.shape[1])

    @property
    def formats(self) -> tuple[str, str]:
        return (self.comp_fmt.name, self.win_fmt.name)


def _index_list(idx: torch.Tensor | None, length: torch.Tensor | None, b: int, s_q: int, what: str) -> torch.Tensor:
    if idx is None:
        raise ValueError(f"{what} is required (sparse mode)")
    if idx.dtype != torch.int32 or idx.dim() != 3 or tuple(idx.shape[:2]) != (b, s_q) or idx.shape[2] < 1:
        raise ValueError(f"{what} must be int32[B={b}, s_q={s_q}, n >= 1], got {idx.dtype}{tuple(idx.shape)}")
    if length is not None and (length.dtype != torch.int32 or tuple(length.shape) != (b,) or not length.is_contiguous()):
        raise ValueError(f"the length of {what} must be a contiguous int32[B={b}], got {length.dtype}{tuple(length.shape)}")
    return idx.reshape(b * s_q, int(idx.shape[2]))


def adapt(q: torch.Tensor, k_cache: torch.Tensor, head_dim_v: int, softmax_scale: float | None, causal: bool,
          is_fp8_kvcache: bool, indices: torch.Tensor | None, attn_sink: torch.Tensor | None,
          extra_k_cache: torch.Tensor | None, extra_indices_in_kvcache: torch.Tensor | None,
          topk_length: torch.Tensor | None, extra_topk_length: torch.Tensor | None) -> SparseDecodeCall:
    """Check a call's arguments against what kvtune runs and view them as the decode launcher's."""
    if indices is None:
        raise ValueError("dense mode (indices=None) is not supported: kvtune runs FlashMLA's sparse decode only")
    if causal:
        raise ValueError("causal=True is not supported: sparse decode attends to the listed slots only")
    if not is_fp8_kvcache:
        raise ValueError("is_fp8_kvcache=False is not supported: the caches are quantized records")
    if head_dim_v != HEAD_DIM:
        raise ValueError(f"head_dim_v must be {HEAD_DIM}, got {head_dim_v}")
    if extra_k_cache is None or extra_indices_in_kvcache is None:
        raise ValueError("extra_k_cache and extra_indices_in_kvcache (the compressed cache and its top-k) are "
                         "required: kvtune's decode tile reads a compressed list and a window list")
    if q.dim() != 4 or q.shape[3] != HEAD_DIM or q.dtype != torch.bfloat16:
        raise ValueError(f"q must be bf16[B, s_q, H, {HEAD_DIM}], got {q.dtype}{tuple(q.shape)}")
    b, s_q, h = (int(x) for x in q.shape[:3])
    wf = format_of(k_cache, WINDOW_FORMATS, "k_cache")
    cf = format_of(extra_k_cache, COMPRESSED_FORMATS, "extra_k_cache")
    win, wps = as_pages(k_cache, wf, "k_cache")
    comp, cps = as_pages(extra_k_cache, cf, "extra_k_cache")
    scale = float(softmax_scale) if softmax_scale is not None else HEAD_DIM ** -0.5
    return SparseDecodeCall(
        q=q.reshape(b * s_q, h, HEAD_DIM), comp_cache=comp, comp_fmt=cf,
        comp_idx=_index_list(extra_indices_in_kvcache, extra_topk_length, b, s_q, "extra_indices_in_kvcache"),
        comp_page=cps, win_cache=win, win_fmt=wf,
        win_idx=_index_list(indices, topk_length, b, s_q, "indices"), win_page=wps,
        comp_lens=extra_topk_length, win_lens=topk_length,
        sm_scale=scale, sink=attn_sink, batch=b, s_q=s_q,
    )


def outputs(o: torch.Tensor, lse: torch.Tensor, call: SparseDecodeCall) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's return shapes, as views of the launcher's outputs: out (B, s_q, H, 512) bf16 and
    softmax_lse (B, H, s_q) fp32 (a transposed view when s_q > 1)."""
    b, s_q, h = call.batch, call.s_q, call.heads
    return o.view(b, s_q, h, HEAD_DIM), lse.view(b, s_q, h).transpose(1, 2)
