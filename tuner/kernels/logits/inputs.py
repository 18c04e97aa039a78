"""A logits launch's inputs (random records in a shuffled page pool, a decode batch or a causal
prefill), the contexts a warmup probe launches at, the run from the inputs and the check against
the float64 reference (FORMATS.md: bf16 and fp8 operands). An MXFP4 query is a pair (values,
scales) wherever a query goes."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from catalog.core import Bucket, Config, ProblemKey
from catalog.families.logits import DECODE_CTX, HEAD_DIM, MXFP4_Q, SEED_PAGE, _check_fmt, _key_parts
from catalog.formats import RecordFormat
from tuner.formats import alloc_cache, quantize_query
from tuner.kernels.base import device_generator
from tuner.kernels.logits.launch import logits
from tuner.reference import compare, logits_reference

TOL = 1e-2  # FORMATS.md: bf16 (and fp8) operands


def random_cache(fmt: str | RecordFormat, num_pages: int, page_size: int, device: str | torch.device, g: torch.Generator) -> torch.Tensor:
    """A cache of valid random records, built in place (quantizing millions of rows would need
    gigabytes of temporaries): uniform element bytes, scales over a few binades, no NaN."""
    f = _check_fmt(fmt)
    dev = torch.device(device)
    dg = device_generator(g, dev)  # drawn where the cache lives
    cache = alloc_cache(f, num_pages, page_size, device=dev, fill=0)
    data = cache[:, : page_size * f.data_bytes]
    data.copy_(torch.randint(0, 256, data.shape, generator=dg, dtype=torch.uint8, device=dev))
    sc = cache[:, page_size * f.data_bytes : page_size * f.bytes_per_token]
    if f.elem == "e2m1":
        sc.copy_(torch.randint(124, 131, sc.shape, generator=dg, dtype=torch.uint8, device=dev))
    else:
        data[(data == 0x7F) | (data == 0xFF)] = 0  # e4m3 NaN codes
        e = torch.randint(120, 131, (num_pages, page_size), generator=dg, dtype=torch.int32, device=dev)
        sc.copy_((e << 23).view(torch.uint8).reshape(sc.shape))
    return cache


def make_query(t: int, heads: int, q_dtype: str, g: torch.Generator) -> tuple[Any, torch.Tensor]:
    """A random query in `q_dtype` and its weights. "mxfp4": the (values, scales) of a bf16 query
    quantised by the reference (the records the pack family's query quantiser writes)."""
    q = torch.randn(t, heads, HEAD_DIM, generator=g)
    w = torch.randn(t, heads, generator=g) / math.sqrt(heads)
    if q_dtype == "fp8":
        return q.to(torch.float8_e4m3fn), w
    if q_dtype == MXFP4_Q:
        return quantize_query(q.to(torch.bfloat16)), w
    return q.to(torch.bfloat16), w


def to_device(q: Any, device: str | torch.device) -> Any:
    """A query (a tensor, or an MXFP4 pair) on `device`."""
    return tuple(x.to(device) for x in q) if isinstance(q, tuple) else q.to(device)


def query_rows(q: Any, rows: torch.Tensor) -> Any:
    """Rows of a query (a tensor, or an MXFP4 pair)."""
    return tuple(x[rows] for x in q) if isinstance(q, tuple) else q[rows]


def paged_sequences(lengths: Sequence[int], page_size: int, g: torch.Generator, spare_pages: int = 0) -> tuple[torch.Tensor, int]:
    """A block table (int32[B, max_pages], -1 past each sequence's end) over one shuffled pool of
    pages, and the pool's page count."""
    need = [-(-n // page_size) for n in lengths]
    max_pages = max(1, max(need, default=1))
    num_pages = sum(need) + spare_pages
    perm = torch.randperm(max(num_pages, 1), generator=g)
    bt = torch.full((len(lengths), max_pages), -1, dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[at : at + n].int()
        at += n
    return bt, max(num_pages, 1)


def _int_class(v: int) -> str:
    # How Triton specialises an integer argument: the value 1, a multiple of 16, or neither.
    return "1" if v == 1 else "16" if v % 16 == 0 else "-"


def probe_contexts(ctx: int, page_size: int) -> list[int]:
    """The fewest longest-contexts in [1, ctx] that reach every (max_len, page count) pair of
    specialisation classes some context in [1, ctx] reaches. Classes repeat every 16 pages, so
    the top 16 pages plus the first two pages hold every reachable pair."""
    found: dict[tuple[str, str], int] = {}
    top = range(ctx, max(0, ctx - 16 * page_size - 16), -1)
    low = range(1, min(ctx, 2 * page_size + 16) + 1)
    for c in (*top, *low):
        found.setdefault((_int_class(c), _int_class(-(-c // page_size))), c)
    return sorted(found.values())


def _positions(bucket: Bucket, ctx: int) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sequence lengths, seq_of, k_start, k_end) of a bucket's query tokens."""
    if bucket.dim == "B":  # decode: one query token per sequence, at the end of its context
        b = bucket.rep
        return ([ctx] * b, torch.arange(b, dtype=torch.int32), torch.zeros(b, dtype=torch.int32),
                torch.full((b,), ctx, dtype=torch.int32))
    if bucket.dim == "T":  # prefill: the last T positions of one sequence, causal
        t = bucket.rep
        return ([ctx], torch.zeros(t, dtype=torch.int32), torch.zeros(t, dtype=torch.int32),
                (ctx - t + 1 + torch.arange(t)).clamp(min=1).int())
    raise ValueError(f"logits buckets are over B (decode sequences) or T (prefill tokens), not {bucket.dim!r}")


def make_inputs(key: ProblemKey, bucket: Bucket, device: str, seed: int, page_size: int = SEED_PAGE,
                probe: bool = False) -> dict[str, Any]:
    """One launch's inputs at the bucket's size and context. `probe`: the same shapes, dtypes and
    integers (all Triton specialises on) over a one-page pool of zeros, for enumerating warmup
    keys cheaply: a 64 x 64K decode needs 285 MB of random records otherwise."""
    f, qdt = _key_parts(key)
    g = torch.Generator().manual_seed(seed)
    ctx = bucket.ctx or DECODE_CTX
    lengths, seq_of, k_start, k_end = _positions(bucket, ctx)
    t = len(seq_of)
    bt, num_pages = paged_sequences(lengths, page_size, g)
    # A probe's MXFP4 query: zero records of its shapes (nothing specialises on their bytes; quantising
    # a 4096-token prefill's query per probed size would cost seconds each).
    probe_q4 = probe and qdt == MXFP4_Q
    q, w = make_query(t, key.heads, "bf16" if probe_q4 else qdt, g)
    if probe_q4:
        q = (torch.zeros(t, key.heads, HEAD_DIM // 2, dtype=torch.uint8), torch.zeros(t, key.heads, 4, dtype=torch.uint8))
    if probe:  # the block table's shape (max_pages is a kernel integer), every entry on one zero page
        bt.zero_()
        cache = alloc_cache(f, 1, page_size, device=device, fill=0)
    else:
        cache = random_cache(f, num_pages, page_size, device, g)
    return {
        "q": to_device(q, device), "w": w.to(device),
        "cache": cache,
        "page_size": page_size, "block_table": bt.to(device),
        "seq_of": seq_of.to(device), "k_start": k_start.to(device), "k_end": k_end.to(device),
        "max_len": ctx,
        "out": torch.empty(t, ctx, dtype=torch.float32, device=device),
    }


def run_inputs(key: ProblemKey, config: Config, inputs: dict[str, Any]) -> torch.Tensor:
    return logits(inputs["q"], inputs["w"], inputs["cache"], key.formats[0], inputs["page_size"], inputs["block_table"],
                  inputs["seq_of"], inputs["k_start"], inputs["k_end"], inputs["max_len"], config, out=inputs["out"])


def verify_inputs(key: ProblemKey, inputs: dict[str, Any], outputs: torch.Tensor, max_rows: int = 8, seed: int = 0) -> str | None:
    """Against the float64 reference on up to `max_rows` rows (a seeded sample, first and last
    always in): the reference gathers and dequantizes every key of a row, so full checks of big
    shapes would take minutes."""
    t = outputs.shape[0]
    if t <= max_rows:
        rows = torch.arange(t)
    else:
        g = torch.Generator().manual_seed(seed)
        mid = torch.randperm(t - 2, generator=g)[: max_rows - 2] + 1
        rows = torch.cat([torch.tensor([0, t - 1]), mid]).sort().values
    dev = inputs["w"].device
    r = rows.to(dev)
    ref = logits_reference(query_rows(inputs["q"], r), inputs["w"][r], inputs["cache"], key.formats[0], inputs["page_size"],
                           inputs["block_table"], inputs["seq_of"][r], inputs["k_start"][r], inputs["k_end"][r],
                           inputs["max_len"], chunk=2)
    err = compare(outputs[r], ref, TOL)
    return None if err is None else f"rows {rows.tolist()[:8]}: {err}"
