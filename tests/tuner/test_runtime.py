"""The runtime's drop-in entry points against the float64 references: FlashMLA's sparse
`flash_mla_with_kvcache` and DeepGEMM's `fp8_paged_mqa_logits` on engine-shaped (blocks, P, 1,
bytes) caches read in place, ragged top-k lengths, -1 slots, sinks, MTP rows; and pack through
both cache shapes. Sizes are small: under the interpreter each launch runs on the CPU."""

from __future__ import annotations

import pytest
import torch

from catalog.formats import get_format, page_bytes
from tuner.formats import alloc_cache, quantize, read_slots, write_slots
from tuner.kernels.logits import random_cache
from tuner.reference import compare, decode_reference, logits_reference
from tuner.runtime import TunedKernels, alloc_paged_cache, as_pages, paged_view
from tuner.targets import detect

H, TOPK, WINDOW = 16, 40, 20
HI = 64  # index heads: the logits key's


@pytest.fixture(scope="module")
def tk() -> TunedKernels:
    return TunedKernels.defaults(detect().name, H, TOPK, WINDOW)


def _filled(fmt: str, slots: int, page: int, device: str, g: torch.Generator) -> torch.Tensor:
    """A kvtune (pages, page_bytes) cache whose first `slots` slots hold records of random latents."""
    c = alloc_cache(fmt, -(-slots // page), page, device=device, fill=0)
    x = torch.randn(slots, 512, generator=g) * torch.exp(torch.randn(slots, 1, generator=g))
    write_slots(c, quantize(x.to(torch.bfloat16), fmt).to(device), torch.arange(slots, device=device), fmt, page)
    return c


def _engine_view(flat: torch.Tensor, fmt: str, page: int) -> torch.Tensor:
    """The cache as an engine holds it: (blocks, P, 1, bytes). Where a page is exactly P records
    wide, a plain view of a packed tensor (what an engine allocates); else the padded-stride view
    `alloc_paged_cache` gives."""
    f = get_format(fmt)
    if page_bytes(f, page) == page * f.bytes_per_token:
        return flat.view(flat.shape[0], page, 1, f.bytes_per_token)
    return paged_view(flat, f, page)


@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")], ids="+".join)
def test_flash_mla_with_kvcache_matches_reference(tk: TunedKernels, pair: tuple[str, str], page: int,
                                                  device: str) -> None:
    comp, win = pair
    b, s_q = 2, 2
    g = torch.Generator().manual_seed(page)
    cc, wc = _filled(comp, 2 * TOPK, page, device, g), _filled(win, 2 * WINDOW, page, device, g)
    q = torch.randn(b, s_q, H, 512, generator=g).to(torch.bfloat16).to(device)
    ci = torch.stack([torch.randperm(2 * TOPK, generator=g)[:TOPK] for _ in range(b * s_q)]).int().view(b, s_q, TOPK)
    wi = torch.stack([torch.randperm(2 * WINDOW, generator=g)[:WINDOW] for _ in range(b * s_q)]).int().view(b, s_q, WINDOW)
    ci[0, 1, 3::7] = -1  # evicted entries
    wi[1, 0, :5] = -1
    topk_len = torch.tensor([TOPK, 17], dtype=torch.int32)  # sequence 1 has 17 compressed keys
    win_len = torch.tensor([9, WINDOW], dtype=torch.int32)
    sink = torch.randn(H, generator=g) * 2
    kc, kw = _engine_view(cc, comp, page), _engine_view(wc, win, page)
    dev = lambda t: t.to(device)  # noqa: E731
    o, lse = tk.flash_mla_with_kvcache(
        q, kw, None, None, 512, None, softmax_scale=0.07, indices=dev(wi), attn_sink=dev(sink),
        extra_k_cache=kc, extra_indices_in_kvcache=dev(ci), topk_length=dev(win_len), extra_topk_length=dev(topk_len))
    assert o.shape == (b, s_q, H, 512) and o.dtype == torch.bfloat16
    assert lse.shape == (b, H, s_q) and lse.dtype == torch.float32
    # The reference on the same lists with the lengths applied by hand.
    ci_ref, wi_ref = ci.clone(), wi.clone()
    ci_ref[1, :, 17:] = -1
    wi_ref[0, :, 9:] = -1
    ro, rl = decode_reference(q.view(b * s_q, H, 512), cc, comp, dev(ci_ref.view(b * s_q, TOPK)), wc, win,
                              dev(wi_ref.view(b * s_q, WINDOW)), page, 0.07, dev(sink))
    assert compare(o.reshape(b * s_q, H, 512), ro, 1e-2) is None
    assert compare(lse.transpose(1, 2).reshape(b * s_q, H), rl, 1e-2) is None
    # The caller's index lists are not rewritten (the lengths mask a tensor of the call's own).
    assert int((ci == -1).sum()) == len(range(3, TOPK, 7)) and bool((wi[0, 0, 9:] >= 0).all())


def test_flash_mla_without_sink_or_lengths_and_one_query(tk: TunedKernels, device: str) -> None:
    comp, win, page = "nvfp4_288", "fp8_528", 64
    g = torch.Generator().manual_seed(5)
    cc, wc = _filled(comp, 2 * TOPK, page, device, g), _filled(win, 2 * WINDOW, page, device, g)
    q = torch.randn(3, 1, H, 512, generator=g).to(torch.bfloat16).to(device)
    ci = torch.randint(0, 2 * TOPK, (3, 1, TOPK), generator=g, dtype=torch.int32).to(device)
    wi = torch.randint(0, 2 * WINDOW, (3, 1, WINDOW), generator=g, dtype=torch.int32).to(device)
    ci[2], wi[2] = -1, -1  # a token with no key at all: o = 0, lse = -inf
    o, lse = tk.flash_mla_with_kvcache(q, _engine_view(wc, win, page), None, None, 512, None, indices=wi,
                                       extra_k_cache=_engine_view(cc, comp, page), extra_indices_in_kvcache=ci)
    assert lse.shape == (3, H, 1) and lse.is_contiguous()
    ro, rl = decode_reference(q.view(3, H, 512), cc, comp, ci.view(3, TOPK), wc, win, wi.view(3, WINDOW), page,
                              512 ** -0.5)  # FlashMLA's default scale: 1 / sqrt(head dim)
    assert compare(o.view(3, H, 512), ro, 1e-2) is None and compare(lse.view(3, H), rl, 1e-2) is None
    assert bool((o[2] == 0).all()) and bool(torch.isneginf(lse[2]).all())


def test_flash_mla_refuses_what_it_does_not_run(tk: TunedKernels, device: str) -> None:
    page = 16
    kw = alloc_paged_cache("fp8_528", 4, page, device, fill=0)
    kc = alloc_paged_cache("nvfp4_288", 4, page, device, fill=0)
    q = torch.zeros(1, 1, H, 512, dtype=torch.bfloat16, device=device)
    idx = torch.zeros(1, 1, 8, dtype=torch.int32, device=device)
    ok = dict(indices=idx, extra_k_cache=kc, extra_indices_in_kvcache=idx)
    with pytest.raises(ValueError, match="dense mode"):
        tk.flash_mla_with_kvcache(q, kw, None, None, 512, None)
    with pytest.raises(ValueError, match="causal"):
        tk.flash_mla_with_kvcache(q, kw, None, None, 512, None, causal=True, **ok)
    with pytest.raises(ValueError, match="extra_k_cache"):
        tk.flash_mla_with_kvcache(q, kw, None, None, 512, None, indices=idx)
    with pytest.raises(ValueError, match="288 bytes"):  # nvfp4_288 only as the compressed cache
        tk.flash_mla_with_kvcache(q, kc, None, None, 512, None, **{**ok, "extra_k_cache": kw})
    # A packed fp8_528 cache at P = 16 has pages of 8448 bytes; the kernels read 8704 (FORMATS.md).
    packed = torch.zeros(4, page, 1, 528, dtype=torch.uint8, device=device)
    with pytest.raises(ValueError, match="alloc_paged_cache"):
        tk.flash_mla_with_kvcache(q, packed, None, None, 512, None, **ok)


def test_cache_views_are_the_engine_storage(device: str) -> None:
    for fmt, page in (("fp8_528", 16), ("fp8_584", 64), ("nvfp4_288", 64), ("fp8_132", 16), ("mxfp4_68", 64)):
        four = alloc_paged_cache(fmt, 3, page, device, fill=0)
        flat, p = as_pages(four, fmt)
        assert p == page and flat.shape == (3, page_bytes(fmt, page)) and flat.is_contiguous()
        assert flat.data_ptr() == four.data_ptr()
        flat[2, -1] = 7  # the last page's last byte is the engine's too
        assert four.untyped_storage().nbytes() == flat.numel()
    fp8 = torch.zeros(2, 16, 1, 132, dtype=torch.float8_e4m3fn, device=device)  # DeepGEMM's fp8 dtype
    flat, _ = as_pages(fp8, "fp8_132")
    assert flat.dtype == torch.uint8 and flat.data_ptr() == fp8.data_ptr()


def _mtp_ends(ctx: list[int], next_n: int) -> list[int]:
    return [max(0, c - next_n + i + 1) for c in ctx for i in range(next_n)]


@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("fmt", ["fp8_132", "mxfp4_68"])
@pytest.mark.parametrize("q_dtype", [torch.float8_e4m3fn, torch.bfloat16], ids=["fp8", "bf16"])
def test_fp8_paged_mqa_logits_matches_reference(tk: TunedKernels, fmt: str, next_n: int, page: int,
                                                q_dtype: torch.dtype, device: str) -> None:
    b, max_len = 2, 150
    g = torch.Generator().manual_seed(next_n * page)
    ctx = [130, 37]
    need = [-(-c // page) for c in ctx]
    pages = sum(need) + 1
    flat = random_cache(fmt, pages, page, device, g)
    perm = torch.randperm(pages, generator=g).int()
    bt = torch.zeros(b, max(need) + 1, dtype=torch.int32)
    bt[0, : need[0]], bt[1, : need[1]] = perm[: need[0]], perm[need[0] : sum(need)]
    q = torch.randn(b, next_n, HI, 128, generator=g).to(q_dtype).to(device)
    w = (torch.randn(b * next_n, HI, generator=g) / 8).to(device)
    lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    kv = flat.view(pages, page, 1, get_format(fmt).bytes_per_token)  # DeepGEMM's layout: a plain view
    out = tk.fp8_paged_mqa_logits(q, kv, w, lens, bt.to(device), None, max_len, clean_logits=True)
    assert out.shape == (b * next_n, max_len) and out.dtype == torch.float32
    t = b * next_n
    seq_of = torch.arange(t, dtype=torch.int32) // next_n
    ref = logits_reference(q.view(t, HI, 128).cpu(), w.cpu(), flat.cpu(), fmt, page, bt, seq_of,
                           torch.zeros(t, dtype=torch.int32), torch.tensor(_mtp_ends(ctx, next_n), dtype=torch.int32),
                           max_len)
    assert compare(out.cpu(), ref, 1e-2) is None
    if next_n == 2:
        # 2-D context lengths: each row's own end (DeepGEMM's is_context_lens_2d).
        ends = torch.tensor([[100, 130], [0, 37]], dtype=torch.int32)
        out2 = tk.fp8_paged_mqa_logits(q, kv, w, ends.to(device), bt.to(device), None, max_len, clean_logits=False)
        ref2 = logits_reference(q.view(t, HI, 128).cpu(), w.cpu(), flat.cpu(), fmt, page, bt, seq_of,
                                torch.zeros(t, dtype=torch.int32), ends.view(-1), max_len)
        assert compare(out2.cpu(), ref2, 1e-2) is None
        assert bool(torch.isneginf(out2[2]).all())  # a row with no position


@pytest.mark.parametrize("fmt", ["nvfp4_288", "fp8_528"])
def test_pack_through_both_cache_shapes(tk: TunedKernels, fmt: str, device: str) -> None:
    page, n = 16, 21
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(n, 512, generator=g) * 3).to(torch.bfloat16).to(device)
    slots = torch.randperm(4 * page, generator=g)[:n].to(device)
    slots[4] = -1
    four = alloc_paged_cache(fmt, 4, page, device, fill=0)
    assert tk.pack(x, slots, four, fmt) is four
    flat = alloc_cache(fmt, 4, page, device=device, fill=0)
    tk.pack(x, slots.int(), flat, fmt, page_size=page)  # int32 slots as some engines keep them
    assert torch.equal(as_pages(four, fmt)[0], flat)
    keep = slots >= 0
    got = read_slots(flat, slots[keep], fmt, page).cpu()
    assert torch.equal(got, quantize(x[keep].cpu(), fmt))



@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("fmt", ["fp8_132", "mxfp4_68"])
def test_fp8_paged_mqa_logits_takes_an_mxfp4_query_pair(tk: TunedKernels, fmt: str, next_n: int, page: int,
                                                        device: str) -> None:
    # DeepGEMM's FP4 path: q = (values uint8 (B, next_n, Hi, 64), scales uint8 (B, next_n, Hi, 4)), the
    # query's mxfp4_68 records (here written by the pack family's query quantiser); the scales may also
    # come as one int32 word per row. Against the reference of the dequantized query.
    from tuner.formats import dequantize_query
    from tuner.kernels.pack import quant_query

    b, max_len = 2, 150
    g = torch.Generator().manual_seed(3 + next_n * page)
    ctx = [130, 37]
    need = [-(-c // page) for c in ctx]
    pages = sum(need) + 1
    flat = random_cache(fmt, pages, page, device, g)
    perm = torch.randperm(pages, generator=g).int()
    bt = torch.zeros(b, max(need) + 1, dtype=torch.int32)
    bt[0, : need[0]], bt[1, : need[1]] = perm[: need[0]], perm[need[0] : sum(need)]
    x = torch.randn(b, next_n, HI, 128, generator=g).to(torch.bfloat16).to(device)
    values, scales = quant_query(x)
    assert values.shape == (b, next_n, HI, 64) and scales.shape == (b, next_n, HI, 4)
    # The runtime's quantiser gives the same bytes, under the quantiser's own key.
    rv, rs = tk.quant_query(x)
    assert torch.equal(rv, values) and torch.equal(rs, scales)
    assert any(k.formats == ("mxfp4_68", "query") for (k, _, _) in tk.misses.totals)
    w = (torch.randn(b * next_n, HI, generator=g) / 8).to(device)
    lens = torch.tensor(ctx, dtype=torch.int32, device=device)
    kv = flat.view(pages, page, 1, get_format(fmt).bytes_per_token)
    t = b * next_n
    seq_of = torch.arange(t, dtype=torch.int32) // next_n
    q_ref = dequantize_query(values.cpu(), scales.cpu()).view(t, HI, 128)
    ref = logits_reference(q_ref, w.cpu(), flat.cpu(), fmt, page, bt, seq_of, torch.zeros(t, dtype=torch.int32),
                           torch.tensor(_mtp_ends(ctx, next_n), dtype=torch.int32), max_len)
    packed = scales.view(torch.int32).view(b, next_n, HI)  # four ue8m0 bytes a word
    for q in ((values, scales), (values, packed)):
        out = tk.fp8_paged_mqa_logits(q, kv, w, lens, bt.to(device), None, max_len, clean_logits=True)
        assert out.shape == (t, max_len) and out.dtype == torch.float32
        assert compare(out.cpu(), ref, 1e-2) is None
    # Served under the key's own query dtype (no bundle entry here: the default of (fmt, mxfp4)).
    assert any(k.formats == (fmt, "mxfp4") for (k, _, _) in tk.misses.totals)
    with pytest.raises(ValueError, match="scales must be"):
        tk.fp8_paged_mqa_logits((values, scales[..., :2]), kv, w, lens, bt.to(device), None, max_len)
