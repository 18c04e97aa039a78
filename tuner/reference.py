"""Float64 references for the reader kernels (FORMATS.md "Kernel semantics"), computed from the
*dequantized* records, and the comparison every reader test and every benchmark verification uses."""

from __future__ import annotations

import math

import torch

from tuner.formats import RecordFormat, dequantize, dequantize_query, get_format, read_slots


def query_values(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """A logits query as values: a bf16/fp8 tensor as it is, an MXFP4 query (values, scales)
    dequantized (float32[T, Hi, 128]: each element times its 32-dim tile's scale)."""
    return dequantize_query(*q) if isinstance(q, tuple) else q


def gather_dequant(cache: torch.Tensor, slots: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> torch.Tensor:
    """float32[*slots.shape, dims]: the dequantized records of `slots` (-1 slots read as zeros)."""
    f = get_format(fmt)
    rec = read_slots(cache, slots, f, page_size)
    return dequantize(rec.reshape(-1, f.bytes_per_token), f).reshape(*slots.shape, f.dims)


def decode_reference(
    q: torch.Tensor,
    comp_cache: torch.Tensor,
    comp_fmt: str | RecordFormat,
    topk_idx: torch.Tensor,
    win_cache: torch.Tensor,
    win_fmt: str | RecordFormat,
    window_idx: torch.Tensor,
    page_size: int,
    sm_scale: float,
    attn_sink: torch.Tensor | None = None,
    win_page_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MQA decode over the keys of both lists (K = V). Returns (o float64[T, H, dims],
    lse float64[T, H]). The sink scales o but never enters lse; a row with no key gives o = 0,
    lse = -inf."""
    wps = win_page_size or page_size
    kc = gather_dequant(comp_cache, topk_idx, comp_fmt, page_size).double()
    kw = gather_dequant(win_cache, window_idx, win_fmt, wps).double()
    keys = torch.cat([kc, kw], dim=1)  # [T, J, D]
    valid = torch.cat([topk_idx >= 0, window_idx >= 0], dim=1)  # [T, J]
    s = sm_scale * torch.einsum("thd,tjd->thj", q.double(), keys)
    s = s.masked_fill(~valid[:, None, :], -math.inf)
    m = s.amax(dim=-1, keepdim=True)  # -inf for rows with no key
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m_safe)  # exp(-inf) = 0 on absent keys
    den = p.sum(dim=-1)
    lse = torch.where(den > 0, m_safe.squeeze(-1) + torch.log(den), torch.full_like(den, -math.inf))
    norm = den
    if attn_sink is not None:
        norm = den + torch.exp(attn_sink.double()[None, :] - m_safe.squeeze(-1))
    o = torch.einsum("thj,tjd->thd", p, keys) / torch.where(den > 0, norm, torch.ones_like(norm))[..., None]
    return o, lse


def logits_reference(
    q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
    w: torch.Tensor,
    cache: torch.Tensor,
    fmt: str | RecordFormat,
    page_size: int,
    block_table: torch.Tensor,
    seq_of: torch.Tensor,
    k_start: torch.Tensor,
    k_end: torch.Tensor,
    max_len: int,
    chunk: int = 8,
) -> torch.Tensor:
    """MQA indexer logits: float64[T, max_len], `sum_h w[t,h] * relu(q[t,h] . K_j)` for
    `k_start[t] <= j < k_end[t]`, else -inf. K_j is the record at logical position j of sequence
    `seq_of[t]`. Computed `chunk` query tokens at a time to bound memory. `q` may be an MXFP4
    query (values, scales): the reference is then computed from its dequantized values."""
    q = query_values(q)
    t_all = q.shape[0]
    out = torch.full((t_all, max_len), -math.inf, dtype=torch.float64, device=q.device)
    j = torch.arange(max_len, device=q.device)
    max_pages = block_table.shape[1]
    for t0 in range(0, t_all, chunk):
        ts = slice(t0, min(t0 + chunk, t_all))
        seqs = seq_of[ts].long()
        pidx = (j // page_size).clamp(max=max_pages - 1)
        pages = block_table[seqs][:, pidx].long()  # [t, max_len]
        live = (j[None, :] >= k_start[ts, None]) & (j[None, :] < k_end[ts, None]) & (pages >= 0)
        slots = torch.where(live, pages * page_size + (j % page_size)[None, :], torch.full_like(pages, -1))
        k = gather_dequant(cache, slots, fmt, page_size).double()  # [t, max_len, D]
        sc = torch.einsum("thd,tjd->thj", q[ts].double(), k).clamp(min=0)
        val = torch.einsum("th,thj->tj", w[ts].double(), sc)
        out[ts] = torch.where(live, val, torch.full_like(val, -math.inf))
    return out


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float) -> str | None:
    """FORMATS.md's reader tolerance: relative Frobenius error over the finite reference entries
    <= tol, no NaN where the reference has none, and -inf exactly where the reference has it.
    Returns None when it holds, else what broke (failures are data)."""
    out = out.double().cpu()
    ref = ref.double().cpu()
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    nan_bad = torch.isnan(out) & ~torch.isnan(ref)
    if nan_bad.any():
        return f"{int(nan_bad.sum())} NaN where the reference has a value (first at {nan_bad.nonzero()[0].tolist()})"
    ninf_ref = torch.isneginf(ref)
    if not torch.equal(torch.isneginf(out), ninf_ref):
        bad = torch.isneginf(out) != ninf_ref
        return f"-inf pattern differs at {int(bad.sum())} entries (first at {bad.nonzero()[0].tolist()})"
    fin = torch.isfinite(ref)
    if not torch.isfinite(out[fin]).all():
        return "non-finite output where the reference is finite"
    num = (out[fin] - ref[fin]).norm()
    den = ref[fin].norm()
    err = float(num / den) if den > 0 else float(num)
    if not err <= tol:
        return f"relative error {err:.3e} > {tol:.1e}"
    return None
