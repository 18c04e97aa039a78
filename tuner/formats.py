"""The torch reference codec and paged layout of the record formats (their specs: `catalog.formats`).

`quantize` is the byte-exact reference every writer kernel is checked against; it uses torch's own
float8 conversion for e4m3 (round-to-nearest-even after a clamp) and a threshold table for e2m1, so
it shares no rounding code with the Triton templates it judges.
"""

from __future__ import annotations

import torch

from catalog.formats import FORMATS, RecordFormat, get_format, page_bytes  # noqa: F401  (re-exported for the codec's callers)

# ---------------------------------------------------------------------------------------------
# Element codecs (torch reference)
# ---------------------------------------------------------------------------------------------

E2M1_LEVELS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e2m1_encode(a: torch.Tensor) -> torch.Tensor:
    """fp32 -> e2m1 nibble codes (int32), round-to-nearest ties-to-even-code, saturating at 6.

    The thresholds are FORMATS.md's table: a tie goes to the even code (0.25->0, 0.75->1.0,
    1.25->1.0, 1.75->2.0, 2.5->2.0, 3.5->4.0, 5->4.0). NaN compares false everywhere, so it gives 0
    (plus its sign bit); the record's tile rule zeroes NaN tiles anyway.
    """
    m = a.abs()
    code = (
        (m > 0.25).int()
        + (m >= 0.75).int()
        + (m > 1.25).int()
        + (m >= 1.75).int()
        + (m > 2.5).int()
        + (m >= 3.5).int()
        + (m > 5.0).int()
    )
    return code | (torch.signbit(a).int() << 3)


def e2m1_decode(code: torch.Tensor) -> torch.Tensor:
    levels = torch.tensor(E2M1_LEVELS, dtype=torch.float32, device=code.device)
    mag = levels[(code & 7).long()]
    return torch.where((code & 8) != 0, -mag, mag)


def e4m3_encode(a: torch.Tensor) -> torch.Tensor:
    """fp32 -> e4m3fn bytes (uint8): clamp to +-448, then torch's round-to-nearest-even."""
    return a.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


def pow2ceil_exponent(v: torch.Tensor) -> torch.Tensor:
    """Biased fp32 exponent of the smallest power of two >= v (v positive, finite, normal), exactly
    from the bits: the exponent field, plus one when the mantissa is non-zero."""
    bits = v.contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    return exp + ((bits & 0x7FFFFF) != 0).int()


def exponent_to_float(e: torch.Tensor) -> torch.Tensor:
    """Biased exponent (1..254) -> the fp32 power of two 2**(e-127), exactly."""
    return (e.int() << 23).view(torch.float32)


def bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """fp32/bf16 -> bf16 bit patterns (int32 holding 16 bits): round-to-nearest-even; a NaN keeps
    its sign and top payload bits and is made quiet (torch's own CPU conversion is not consistent
    about NaN between its scalar and vector paths, so the rule is written out here)."""
    if x.dtype == torch.bfloat16:
        return x.contiguous().view(torch.int16).int() & 0xFFFF
    bits = x.float().contiguous().view(torch.int32).long() & 0xFFFFFFFF
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    nan = torch.isnan(x.float())
    return torch.where(nan, (bits >> 16) | 0x40, rounded).int()


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------

_NAN_SCALE_BYTE = {"e4m3": 0x7F, "ue8m0": 0xFF}


def quantize(x: torch.Tensor, fmt: str | RecordFormat) -> torch.Tensor:
    """x[N, dims] (bf16 or fp32) -> records uint8[N, data_bytes + scale_bytes] (data row, then
    scale row, as they would sit in a page if the page held one token)."""
    f = get_format(fmt)
    if x.dim() != 2 or x.shape[1] != f.dims:
        raise ValueError(f"{f.name} expects x[N, {f.dims}], got {tuple(x.shape)}")
    n = x.shape[0]
    xf = x.float()
    q = xf[:, : f.qdims].reshape(n, f.n_tiles, f.tile)
    bad = (~torch.isfinite(q)).any(dim=-1)  # [n, tiles]
    amax = torch.where(torch.isfinite(q), q.abs(), torch.zeros_like(q)).amax(dim=-1)

    if f.scale == "e4m3":  # nvfp4_288
        s_bytes = e4m3_encode((amax / 6.0).clamp(2.0**-9, 448.0))
        s_val = e4m3_decode(s_bytes)
        v = q / s_val[..., None]
    elif f.scale == "ue8m0":
        if f.elem == "e2m1":  # mxfp4_68
            e = pow2ceil_exponent(torch.clamp(amax, min=6.0 * 2.0**-126) / 6.0).clamp(0, 254)
        else:  # fp8_528, fp8_584
            e = pow2ceil_exponent(torch.clamp(amax / 448.0, min=1e-4))
        s_bytes = e.to(torch.uint8)
        v = q / exponent_to_float(e)[..., None]
    else:  # fp32: fp8_132
        s_val = exponent_to_float(pow2ceil_exponent(torch.clamp(amax / 448.0, min=1e-4)))
        s_bytes = None
        v = q / s_val[..., None]

    if f.elem == "e2m1":
        codes = e2m1_encode(v)
        codes = torch.where(bad[..., None], torch.zeros_like(codes), codes).reshape(n, f.qdims)
        elem = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    else:
        elem = e4m3_encode(torch.where(bad[..., None], torch.zeros_like(v), v))
        elem = torch.where(bad[..., None], torch.zeros_like(elem), elem).reshape(n, f.qdims)

    parts = [elem]
    if f.bf16_dims:
        b = bf16_bits(x[:, f.qdims :])
        parts.append(torch.stack([b & 0xFF, (b >> 8) & 0xFF], dim=-1).reshape(n, -1).to(torch.uint8))
    if f.scale == "fp32":
        s_val = torch.where(bad, torch.full_like(s_val, float("nan")), s_val)
        parts.append(s_val.reshape(n, 1).contiguous().view(torch.uint8).reshape(n, 4))
    else:
        assert s_bytes is not None
        s_bytes = torch.where(bad, torch.full_like(s_bytes, _NAN_SCALE_BYTE[f.scale]), s_bytes)
        parts.append(s_bytes)
        if f.scale_pad:
            parts.append(torch.zeros(n, f.scale_pad, dtype=torch.uint8, device=x.device))
    rec = torch.cat(parts, dim=1)
    assert rec.shape[1] == f.bytes_per_token
    return rec


def dequantize(records: torch.Tensor, fmt: str | RecordFormat) -> torch.Tensor:
    """records uint8[N, bytes_per_token] -> float32[N, dims]: element value times its tile scale."""
    f = get_format(fmt)
    n = records.shape[0]
    data = records[:, : f.data_bytes]
    srow = records[:, f.data_bytes :]
    if f.elem == "e2m1":
        b = data[:, : f.elem_bytes].int()
        codes = torch.stack([b & 0xF, b >> 4], dim=-1).reshape(n, f.qdims)
        vals = e2m1_decode(codes)
    else:
        vals = e4m3_decode(data[:, : f.elem_bytes])
    if f.scale == "e4m3":
        scale = e4m3_decode(srow[:, : f.n_tiles])
    elif f.scale == "ue8m0":
        e = srow[:, : f.n_tiles].int()
        scale = torch.where(e == 0xFF, torch.full(e.shape, float("nan"), device=e.device), exponent_to_float(e.clamp(max=254)))
    else:
        scale = srow[:, :4].contiguous().view(torch.float32).reshape(n, 1)
    out = (vals.reshape(n, f.n_tiles, f.tile) * scale[..., None]).reshape(n, f.qdims)
    if f.bf16_dims:
        t = data[:, f.elem_bytes :].int()
        bits = (t[:, 0::2] | (t[:, 1::2] << 8)).to(torch.int16)
        out = torch.cat([out, bits.view(torch.bfloat16).float()], dim=1)
    return out


# ---------------------------------------------------------------------------------------------
# Paged layout: a page of P tokens holds all P data rows, then all P scale rows.
# ---------------------------------------------------------------------------------------------


def slot_offsets(slots: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat byte offsets (int64) of each slot's data row and scale row in a cache viewed as bytes."""
    f = get_format(fmt)
    s = slots.long()
    base = (s // page_size) * page_bytes(f, page_size)
    off = s % page_size
    return base + off * f.data_bytes, base + page_size * f.data_bytes + off * f.scale_bytes


def alloc_cache(
    fmt: str | RecordFormat, num_pages: int, page_size: int, device: str | torch.device = "cpu", fill: int | None = 0
) -> torch.Tensor:
    """A cache uint8[num_pages, page_bytes]; `fill=None` leaves it uninitialised."""
    shape = (num_pages, page_bytes(fmt, page_size))
    if fill is None:
        return torch.empty(shape, dtype=torch.uint8, device=device)
    return torch.full(shape, fill, dtype=torch.uint8, device=device)


def _row_index(slots: torch.Tensor, f: RecordFormat, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    d, s = slot_offsets(slots, f, page_size)
    dcols = torch.arange(f.data_bytes, device=slots.device)
    scols = torch.arange(f.scale_bytes, device=slots.device)
    return d[:, None] + dcols, s[:, None] + scols


def write_slots(cache: torch.Tensor, records: torch.Tensor, slots: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> None:
    """Reference writer: scatter records into their slots; slot -1 is skipped."""
    f = get_format(fmt)
    keep = slots >= 0
    d, s = _row_index(slots[keep], f, page_size)
    flat = cache.view(-1)
    recs = records[keep]
    flat[d.reshape(-1)] = recs[:, : f.data_bytes].reshape(-1)
    flat[s.reshape(-1)] = recs[:, f.data_bytes :].reshape(-1)


def read_slots(cache: torch.Tensor, slots: torch.Tensor, fmt: str | RecordFormat, page_size: int) -> torch.Tensor:
    """Gather the records of `slots` (any shape) -> uint8[*slots.shape, bytes_per_token].
    A slot of -1 reads as an all-zero record (callers mask it; it has no bytes in the cache)."""
    f = get_format(fmt)
    flat_slots = slots.reshape(-1)
    keep = flat_slots >= 0
    d, s = _row_index(flat_slots.clamp(min=0), f, page_size)
    flat = cache.view(-1)
    rec = torch.cat([flat[d], flat[s]], dim=1)
    rec[~keep] = 0
    return rec.reshape(*slots.shape, f.bytes_per_token)


# ---------------------------------------------------------------------------------------------
# MXFP4 queries: a dense mxfp4_68 record per (token, head) row, as two tensors
# ---------------------------------------------------------------------------------------------

QUERY_FORMAT = "mxfp4_68"


def quantize_query(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x[..., 128] (bf16 or fp32) -> (values uint8[..., 64], scales uint8[..., 4]): each row's
    mxfp4_68 record (`quantize`), its data row and its scale row as two dense tensors."""
    f = get_format(QUERY_FORMAT)
    if x.shape[-1] != f.dims:
        raise ValueError(f"an mxfp4 query has rows of {f.dims} dims, got {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    rec = quantize(x.reshape(-1, f.dims), f)
    return (rec[:, : f.data_bytes].reshape(*lead, f.data_bytes).contiguous(),
            rec[:, f.data_bytes :].reshape(*lead, f.scale_bytes).contiguous())


def dequantize_query(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(values uint8[..., 64], scales uint8[..., 4]) -> float32[..., 128]: element times its tile scale."""
    f = get_format(QUERY_FORMAT)
    lead = tuple(values.shape[:-1])
    if values.shape[-1] != f.data_bytes or tuple(scales.shape) != lead + (f.scale_bytes,):
        raise ValueError(f"an mxfp4 query is values[..., {f.data_bytes}] and scales[..., {f.scale_bytes}], "
                         f"got {tuple(values.shape)} and {tuple(scales.shape)}")
    rec = torch.cat([values.reshape(-1, f.data_bytes), scales.reshape(-1, f.scale_bytes)], dim=1)
    return dequantize(rec, f).reshape(*lead, f.dims)
