"""DeepGEMM's `fp8_paged_mqa_logits` (the sparse-attention indexer's scores over a paged K cache)
mapped onto kvtune's logits launcher (`tuner.kernels.logits.logits`).

DeepGEMM's call: `q (B, next_n, Hi, 128)`, `kv_cache (blocks, P, 1, 132 | 68)`, `weights
(B * next_n, Hi)`, `context_lens (B,)` or `(B, next_n)`, `block_table (B, max_blocks)`. Row
`b * next_n + i` scores sequence b's positions `< context_len - next_n + i + 1` (1-D lengths: the
next_n tokens of multi-token prediction are the sequence's last next_n), or `< context_lens[b, i]`
(2-D). kvtune's launcher takes the same rows with `seq_of`, `k_start`, `k_end` per row: `seq_of`
and `k_start` depend on (B, next_n) only and are made once per shape; `k_end` is one small
device op per call (no host sync). The output is -inf outside each row's range whatever
`clean_logits` says (DeepGEMM leaves it unspecified without cleaning).

An MXFP4 query comes as DeepGEMM's FP4 path takes it, a pair `(values, scales)`: values uint8
(B, next_n, Hi, 64) (int8 is read as the same bytes), each row's e2m1 pairs, element 2i in the
low nibble; scales uint8 (B, next_n, Hi, 4), its ue8m0 scale per 32 dims (or the same four bytes
as one int32 (B, next_n, Hi), little-endian). Both are read in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch

from catalog.formats import RecordFormat
from tuner.runtime.views import as_pages, format_of

LOGITS_FORMATS = ("fp8_132", "mxfp4_68")
HEAD_DIM = 128


Query = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class PagedLogitsCall:
    q: Query  # [T = B * next_n, Hi, 128] fp8 e4m3 or bf16, or MXFP4 (uint8[T, Hi, 64], uint8[T, Hi, 4])
    w: torch.Tensor  # fp32[T, Hi]
    cache: torch.Tensor  # uint8[blocks, page_bytes] view
    fmt: RecordFormat
    page_size: int
    block_table: torch.Tensor
    seq_of: torch.Tensor
    k_start: torch.Tensor
    k_end: torch.Tensor
    max_len: int

    @property
    def q_values(self) -> torch.Tensor:
        return self.q[0] if isinstance(self.q, tuple) else self.q

    @property
    def rows(self) -> int:
        return int(self.q_values.shape[0])

    @property
    def heads(self) -> int:
        return int(self.q_values.shape[1])


RowConstants = Callable[[int, int, torch.device], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""(B, next_n, device) -> (seq_of int32[T], k_start int32[T], end offsets int32[next_n]), cached."""


def row_constants(b: int, next_n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """seq_of (row -> its sequence), k_start (0), and the MTP offsets `i - next_n + 1` of a row's
    end relative to its sequence's context length."""
    rows = torch.arange(b * next_n, dtype=torch.int32, device=device)
    return (rows // next_n, torch.zeros(b * next_n, dtype=torch.int32, device=device),
            torch.arange(next_n, dtype=torch.int32, device=device) - (next_n - 1))


def _mxfp4_query(q: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """An MXFP4 query pair as uint8 (values (B, next_n, Hi, 64), scales (B, next_n, Hi, 4)), in place."""
    if len(q) != 2:
        raise ValueError(f"an MXFP4 q is a pair (values, scales), got {len(q)} tensors")
    v, sc = q
    if v.dtype == torch.int8:
        v = v.view(torch.uint8)
    if v.dtype != torch.uint8 or v.dim() != 4 or v.shape[3] != HEAD_DIM // 2:
        raise ValueError(f"MXFP4 q values must be uint8 (B, next_n, Hi, {HEAD_DIM // 2}), got {v.dtype}{tuple(v.shape)}")
    if sc.dtype == torch.int32 and tuple(sc.shape) == tuple(v.shape[:3]) and sc.is_contiguous():
        sc = sc.view(torch.uint8).view(*v.shape[:3], 4)  # four ue8m0 bytes a word, little-endian
    if sc.dtype != torch.uint8 or tuple(sc.shape) != (*v.shape[:3], HEAD_DIM // 32):
        raise ValueError(f"MXFP4 q scales must be uint8 (B, next_n, Hi, {HEAD_DIM // 32}), got {sc.dtype}{tuple(sc.shape)}")
    return v, sc


def _rows(q: Query, t: int, hi: int) -> Query:
    """The query as the launcher takes it: [T, Hi, ...] (views; a copy only of a strided query)."""
    if isinstance(q, tuple):
        return tuple(x.reshape(t, hi, x.shape[3]).contiguous() for x in q)  # type: ignore[return-value]
    return q.reshape(t, hi, HEAD_DIM)


def adapt(q: Query, kv_cache: torch.Tensor, weights: torch.Tensor, context_lens: torch.Tensor,
          block_table: torch.Tensor, max_model_len: int, constants: RowConstants) -> PagedLogitsCall:
    if isinstance(q, tuple):
        q = _mxfp4_query(q)
        lead = q[0].shape[:3]
    elif q.dim() != 4 or q.shape[3] != HEAD_DIM:
        raise ValueError(f"q must be (B, next_n, Hi, {HEAD_DIM}), got {tuple(q.shape)}")
    else:
        lead = q.shape[:3]
    b, next_n, hi = (int(x) for x in lead)
    t = b * next_n
    f = format_of(kv_cache, LOGITS_FORMATS, "kv_cache")
    cache, page = as_pages(kv_cache, f, "kv_cache")
    if weights.dtype != torch.float32 or tuple(weights.shape) != (t, hi):
        raise ValueError(f"weights must be fp32[B * next_n = {t}, Hi = {hi}], got {weights.dtype}{tuple(weights.shape)}")
    if context_lens.dtype != torch.int32 or tuple(context_lens.shape) not in ((b,), (b, next_n)):
        raise ValueError(f"context_lens must be int32[B={b}] or int32[B, next_n={next_n}], "
                         f"got {context_lens.dtype}{tuple(context_lens.shape)}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != b:
        raise ValueError(f"block_table must be int32[B={b}, max_blocks], got {block_table.dtype}{tuple(block_table.shape)}")
    seq_of, k_start, offs = constants(b, next_n, weights.device)
    if context_lens.dim() == 2:
        k_end = context_lens.reshape(t)
        if not k_end.is_contiguous():
            k_end = k_end.contiguous()
    elif next_n == 1:  # each row ends at its context length: the engine's tensor as it is, no kernel
        k_end = context_lens if context_lens.is_contiguous() else context_lens.contiguous()
    else:
        # Row b*next_n + i sees positions < context_len - next_n + i + 1; a context shorter than
        # next_n leaves the early rows empty, never negative.
        k_end = (context_lens[:, None] + offs[None, :]).clamp_(min=0).reshape(t)
    return PagedLogitsCall(
        q=_rows(q, t, hi), w=weights if weights.is_contiguous() else weights.contiguous(), cache=cache,
        fmt=f, page_size=page, block_table=block_table if block_table.is_contiguous() else block_table.contiguous(),
        seq_of=seq_of, k_start=k_start, k_end=k_end, max_len=int(max_model_len),
    )
