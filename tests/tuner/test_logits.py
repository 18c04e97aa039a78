"""The indexer logits kernel against the float64 reference: every legal variant, both cache formats,
both query dtypes, several page sizes, sequences of different lengths sharing one shuffled cache,
decode-like and prefill-like inputs; outputs are poisoned first so an unwritten element fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.golden_files import check_golden
from tests.ptx_emulation import asm_of, run_ptx
from catalog.core import Config
from tuner.formats import get_format
from catalog.families.logits import E2M1_ONLY_DOTS, KEY_SCALED_DOTS, LOGITS_BUCKETS, LOGITS_FORMATS, VARIANTS, WGMMA_DESC_TYPE, default_config, dot_config, legality, logits_key, parse_variant, render_variant, space, variant_of
from tuner.kernels.logits import FAMILY, logits, make_query, paged_sequences, random_cache, wgmma_descriptor
from tuner.kernels.logits.inputs import to_device
from tuner.reference import compare, logits_reference

TOL = 1e-2


def _legal_dots(fmt: str, q_dtype: str, target: str) -> list[Config]:
    """The default config switched to each variant of the space that may run on `target`."""
    sp = space(fmt, q_dtype)
    base = default_config(fmt, q_dtype)
    out = []
    for dot in sp.params[0].choices:
        for backend in sp.params[1].choices:
            cfg = dot_config(base, dot, backend)
            if sp.infeasible(cfg) is None and legality(variant_of(cfg), target) is None:
                out.append(cfg)
    return out


def _problem(kind: str, fmt: str, q_dtype: str, page: int, device: str, heads: int = 64, seed: int = 0) -> dict:
    """Sequences of lengths not a multiple of any block, in one cache through a shuffled block table.

    decode: one token per sequence (one with a sliding k_start, one with an empty range);
    prefill: the last tokens of two sequences, causal, interleaved so that groups of 2 tokens both
    share and straddle sequences."""
    g = torch.Generator().manual_seed(seed)
    lengths = [45, 300, 131]
    bt, pages = paged_sequences(lengths, page, g, spare_pages=3)
    cache = random_cache(fmt, pages, page, "cpu", g)
    if kind == "decode":
        seq_of = [0, 1, 2, 1]
        k_start = [0, 0, 17, 5]
        k_end = [45, 300, 131, 5]  # the last token has nothing to score
    else:
        seq_of = [1, 1, 1, 2, 2, 1, 0]
        k_start = [0, 0, 0, 0, 0, 0, 0]
        k_end = [296, 297, 298, 130, 131, 299, 45]
    t = len(seq_of)
    q, w = make_query(t, heads, q_dtype, g)
    as_i32 = lambda v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
    return {
        "q": to_device(q, device), "w": w.to(device), "cache": cache.to(device), "page_size": page,
        "block_table": bt.to(device), "seq_of": as_i32(seq_of), "k_start": as_i32(k_start), "k_end": as_i32(k_end),
        "max_len": 307,  # wider than every sequence: the tail columns are -inf
    }


def _check_config(p: dict, fmt: str, cfg: Config | None) -> None:
    out = torch.full((p["w"].shape[0], p["max_len"]), float("nan"), device=p["w"].device)  # poison
    logits(p["q"], p["w"], p["cache"], fmt, p["page_size"], p["block_table"], p["seq_of"], p["k_start"], p["k_end"],
           p["max_len"], cfg, out=out)
    ref = logits_reference(to_device(p["q"], "cpu"), p["w"].cpu(), p["cache"].cpu(), fmt, p["page_size"], p["block_table"].cpu(),
                           p["seq_of"].cpu(), p["k_start"].cpu(), p["k_end"].cpu(), p["max_len"])
    assert torch.isfinite(ref).any() and torch.isneginf(ref).any()
    err = compare(out.cpu(), ref, TOL)
    assert err is None, f"{fmt} page {p['page_size']} {cfg.to_json() if cfg else 'default'}: {err}"


@pytest.mark.parametrize("fmt", LOGITS_FORMATS)
@pytest.mark.parametrize("q_dtype", ["fp8", "bf16"])
@pytest.mark.parametrize("page", [16, 64, 128])
@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_logits_matches_reference(fmt: str, q_dtype: str, page: int, kind: str, target_name: str, device: str) -> None:
    p = _problem(kind, fmt, q_dtype, page, device, seed=page)
    cfgs = _legal_dots(fmt, q_dtype, target_name)
    assert cfgs, f"no legal variant for {fmt} q={q_dtype} on {target_name}"
    sp = space(fmt, q_dtype)

    def _check(c: Config) -> None:
        # A variation the space rules out for its variant (PREFETCH with tl.dot_scaled on e2m1
        # records, a variant only GPUs reach) is refused by the launcher: not run.
        if sp.infeasible(c) is None:
            _check_config(p, fmt, c)

    for cfg in cfgs:
        _check(cfg)
        if kind == "prefill":
            # Query groups (sharing and straddling sequences), fewer heads per dot, small tiles, and
            # the other page lookup (and, at page 64, keys on M with two tokens' heads on N). A
            # prefill program of one query token reads as a decode one does, so the one-token
            # variations below run on the decode problem only (the interpreter's prefill runs took
            # a fifth of the suite's CPU time).
            other = "key" if cfg["PAGE_LOOKUP"] == "tile" else "tile"
            _check(cfg.replace(QT=2, HEADS=32, BLOCK_N=32, TILES=2, PAGE_LOOKUP=other, num_warps=2,
                               MMA="keys_m" if page == 64 else "heads_m", PREFETCH=int(page == 128)))
            continue
        if page == 64:
            # The other MMA orientation (keys on M: scores transposed, heads summed along N; or
            # heads on M). The page size only moves addresses, which both compute alike: one is enough.
            _check(cfg.replace(MMA="heads_m" if cfg["MMA"] == "keys_m" else "keys_m"))
        # Each tile's loads issued one iteration early (PREFETCH): 16-key tiles cross a 16-key page
        # every tile; the program's last tile prefetches nothing.
        _check(cfg.replace(PREFETCH=1, BLOCK_N=16, TILES=4))
        # Tiles by tensor-descriptor loads (whole rows, or 32-dim chunks on the chunked e2m1 paths):
        # 16-key tiles, two to four per page at pages 64 and 128 (the descriptor's page-row
        # offset), one per page at 16.
        _check(cfg.replace(LOADS="descriptor", BLOCK_N=16, TILES=4, num_stages=3))
        if cfg["dot"] in KEY_SCALED_DOTS and page >= 32:
            # The key-scaled paths read the scale rows by descriptor too, from 32-key tiles on.
            _check(cfg.replace(LOADS="descriptor", BLOCK_N=32, TILES=2, num_stages=3))


def test_default_config_runs(device: str) -> None:
    _check_config(_problem("decode", "mxfp4_68", "fp8", 64, device), "mxfp4_68", None)


def test_configs_from_before_the_mma_prefetch_and_loads_axes_still_run(device: str) -> None:
    # A bundle tuned before MMA, PREFETCH and LOADS existed holds configs without them: they mean
    # what the kernel did then (heads on M, no prefetch, gathered rows), and an engine that fetches
    # one must not fail.
    old = {k: v for k, v in default_config("mxfp4_68", "fp8").as_dict().items()
           if k not in ("MMA", "PREFETCH", "LOADS")}
    _check_config(_problem("decode", "mxfp4_68", "fp8", 64, device), "mxfp4_68", Config.from_dict(old))


@pytest.mark.parametrize("page", [32, 256])
@pytest.mark.parametrize("heads", [16, 32])
def test_other_page_sizes_and_heads(page: int, heads: int, target_name: str, device: str) -> None:
    for fmt in LOGITS_FORMATS:
        p = _problem("prefill", fmt, "fp8", page, device, heads=heads, seed=heads)
        cfg = _legal_dots(fmt, "fp8", target_name)[0].replace(BLOCK_N=64, TILES=1, QT=4, HEADS=16)
        _check_config(p, fmt, cfg)


def test_empty_shapes_and_out_of_range(device: str) -> None:
    fmt, page = "mxfp4_68", 16
    p = _problem("decode", fmt, "fp8", page, device)
    got = logits(p["q"][:0], p["w"][:0], p["cache"], fmt, page, p["block_table"], p["seq_of"][:0], p["k_start"][:0],
                 p["k_end"][:0], 50)
    assert got.shape == (0, 50)
    # k_end past max_len is cut at max_len; k_start >= k_end scores nothing.
    ks = torch.tensor([0, 200, 3, 0], dtype=torch.int32, device=device)
    ke = torch.tensor([45, 100, 131, 0], dtype=torch.int32, device=device)
    out = logits(p["q"], p["w"], p["cache"], fmt, page, p["block_table"], p["seq_of"], ks, ke, 40)
    ref = logits_reference(p["q"].cpu(), p["w"].cpu(), p["cache"].cpu(), fmt, page, p["block_table"].cpu(),
                           p["seq_of"].cpu(), ks.cpu(), ke.cpu(), 40)
    assert compare(out.cpu(), ref, TOL) is None
    assert bool(torch.isneginf(out[1]).all()) and bool(torch.isneginf(out[3]).all())


def test_logits_rejects_bad_arguments(device: str) -> None:
    fmt, page = "mxfp4_68", 16
    p = _problem("decode", fmt, "fp8", page, device)
    args = [p["q"], p["w"], p["cache"], fmt, page, p["block_table"], p["seq_of"], p["k_start"], p["k_end"], 64]

    def call(**change):
        a = list(args)
        names = ["q", "w", "cache", "fmt", "page", "block_table", "seq_of", "k_start", "k_end", "max_len"]
        cfg = change.pop("config", None)
        for k, v in change.items():
            a[names.index(k)] = v
        return logits(*a, config=cfg)

    with pytest.raises(ValueError, match="logits reads"):
        call(fmt="nvfp4_288")
    with pytest.raises(ValueError, match=r"q must be \[T, heads, 128\]"):
        call(q=p["q"][:, :, :64])
    with pytest.raises(ValueError, match="bf16 or fp8"):
        call(q=p["q"].float())
    with pytest.raises(ValueError, match="index heads"):
        call(q=p["q"][:, :48].contiguous(), w=p["w"][:, :48].contiguous())
    with pytest.raises(ValueError, match="w must be"):
        call(w=p["w"].double())
    with pytest.raises(ValueError, match="cache must be"):
        call(page=32)
    with pytest.raises(ValueError, match="block_table must be"):
        call(block_table=p["block_table"].long())
    with pytest.raises(ValueError, match="seq_of must be"):
        call(seq_of=p["seq_of"][:2])
    with pytest.raises(ValueError, match="k_end must be"):
        call(k_end=p["k_end"].long())
    with pytest.raises(ValueError, match="max_len"):
        call(max_len=-1)
    with pytest.raises(ValueError, match="page_size"):
        call(page=0)
    with pytest.raises(ValueError, match="infeasible"):
        call(config=default_config(fmt, "fp8").replace(BLOCK_N=48))
    with pytest.raises(ValueError, match="infeasible"):  # an fp8 dot needs an fp8 query
        call(q=p["q"].to(torch.bfloat16), config=default_config(fmt, "bf16").replace(dot="fp8"))
    with pytest.raises(ValueError, match="out must be"):
        logits(*args, out=torch.empty(1, 64, device=device))


def test_space_is_data_and_family_protocol() -> None:
    for fmt in LOGITS_FORMATS:
        for qdt in ("fp8", "bf16"):
            key = logits_key(fmt, qdt)
            sp = FAMILY.space(key)
            doc = json.loads(json.dumps(sp.to_json()))
            assert [d["name"] for d in doc] == ["dot", "backend", "BLOCK_N", "TILES", "QT", "HEADS", "PAGE_LOOKUP",
                                                "MMA", "PREFETCH", "LOADS", "num_warps", "num_stages"]
            dflt = FAMILY.default_config(key)
            assert sp.infeasible(dflt) is None
            assert FAMILY.variant_of(dflt) in FAMILY.variants()
            assert FAMILY.render(key, dflt).source.startswith("# Generated by kvtune from templates/logits.py.j2")
    assert space("mxfp4_68", "bf16").params[0].choices == ("f16", "bf16", "scaled")
    assert space("fp8_132", "fp8").params[1].choices == ("soft",)
    assert space("fp8_132", "fp8").params[9].choices == space("mxfp4_68", "bf16").params[9].choices == ("gather", "descriptor")
    key = logits_key("mxfp4_68", "fp8")
    assert key.to_json()["formats"] == ["mxfp4_68", "fp8"] and key.heads == 64 and key.head_dim == 128
    buckets = FAMILY.buckets(key)
    assert [b.name() for b in buckets] == [b.name() for b in LOGITS_BUCKETS]
    # The issue's count: B=64 x 64K at 64 heads x 128 dims is 68.7 GFLOP over 285 MB of mxfp4 cache.
    from catalog.families.logits import logits_flops
    b64 = buckets[3]
    assert abs(logits_flops(key, b64) / 1e9 - 68.7) < 0.1
    assert 285e6 < FAMILY.bytes_moved(key, b64) < 305e6  # + the 16.8 MB of output


def test_family_inputs_run_and_verify(device: str) -> None:
    """make_inputs -> run -> verify at a shrunken bucket (the real ones are GPU-sized)."""
    from catalog.core import Bucket

    for fmt, qdt in (("mxfp4_68", "fp8"), ("fp8_132", "bf16")):
        key = logits_key(fmt, qdt)
        for bucket in (Bucket("B", 1, 2, 300), Bucket("T", 1, 5, 200)):
            inputs = FAMILY.make_inputs(key, bucket, device, seed=1)
            inputs["out"].fill_(float("nan"))
            out = FAMILY.run(key, FAMILY.default_config(key), inputs)
            assert out is inputs["out"]
            assert FAMILY.verify(key, inputs, out) is None
            out[0, 0] = 1e9  # a wrong value must be caught
            assert FAMILY.verify(key, inputs, out) is not None


@pytest.mark.parametrize("fmt", LOGITS_FORMATS)
def test_rendered_sources_match_golden(fmt: str) -> None:
    seen = set()
    for variant in VARIANTS:
        dot, backend = parse_variant(variant)
        if dot in E2M1_ONLY_DOTS and fmt != "mxfp4_68":
            with pytest.raises(ValueError, match="e2m1"):
                render_variant(fmt, dot, backend)
            continue
        src = render_variant(fmt, dot, backend).source
        if src in seen:  # fp8_132 decodes no e2m1: one source per dot path
            continue
        seen.add(src)
        check_golden(f"logits/{fmt}.{variant}.py", src)


# What cross-compiles where (the legality table of tuner.kernels.logits).
XCOMPILE_EXPECT = {
    "fp8": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "fp8lut": {"sm_90", "sm_100"},
    "fp8key": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "fp8keylut": {"sm_90", "sm_100"},
    "wgmma": {"sm_90"},
    "f16.soft": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "f16.ptx": {"sm_100"},
    "f16.gfx950": {"gfx950"},
    "bf16.soft": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "bf16.ptx": {"sm_100"},
    "bf16.gfx950": {"gfx950"},
    "scaled": {"sm_90", "sm_100", "gfx942", "gfx950"},
    # MXFP4 queries: decoded once per program for the e4m3 (and f16) paths, whose key paths keep
    # their own legality; tl.dot_scaled with an e2m1 query has no lowering on gfx942 (on sm_90
    # Triton upcasts both operands: it compiles, but the decode-once paths are sm_90's).
    "mxfp4q.fp8": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "mxfp4q.fp8lut": {"sm_90", "sm_100"},
    "mxfp4q.fp8key": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "mxfp4q.fp8keylut": {"sm_90", "sm_100"},
    "mxfp4q.f16.soft": {"sm_90", "sm_100", "gfx942", "gfx950"},
    "mxfp4q.f16.ptx": {"sm_100"},
    "mxfp4q.f16.gfx950": {"gfx950"},
    "mxfp4q.scaled": {"sm_90", "sm_100", "gfx950"},
}


def test_legality_table() -> None:
    for variant, legal in XCOMPILE_EXPECT.items():
        for t in ("sm_90", "sm_100", "gfx942", "gfx950"):
            assert (legality(variant, t) is None) == (t in legal), (variant, t)
    assert legality("fp8", "interp") is None and legality("f16.soft", "interp") is None
    assert legality("scaled", "interp") and legality("bf16.soft", "interp") and legality("wgmma", "interp")


@pytest.mark.parametrize("target", ("sm_90", "sm_100", "gfx942", "gfx950"))
def test_xcompile_table_matches_the_issue(target: str) -> None:
    """Every variant cross-compiles exactly where the legality table says, on each of the four
    targets (a test a target); the process aborts of the illegal inline-asm ones are rows of the
    table, not crashes of the tool."""
    out = subprocess.run([sys.executable, "-m", "kvtune.cli", "xcompile", "--kernel", "logits", "--target", target, "--json"],
                         capture_output=True, text=True, timeout=900, check=True)
    rows = json.loads(out.stdout)
    seen = set()
    for r in rows:
        assert r["kernel"] == "logits" and r["target"] == target
        seen.add((r["variant"], r["target"]))
        want = "compiled" if r["target"] in XCOMPILE_EXPECT[r["variant"]] else "illegal"
        assert r["status"] == want, r
        assert r["expected"] == ("legal" if want == "compiled" else "illegal")
        if r["status"] == "compiled":
            assert r["registers"] and r["registers"] > 0 and r["spills"] is not None
        else:
            assert r["error"]
    assert seen == {(v, target) for v in XCOMPILE_EXPECT}


def test_probe_contexts_reach_every_class_pair() -> None:
    # Brute force over every longest context up to the bucket's: the probes reach each
    # (max_len, page count) pair of Triton's integer classes (1, multiple of 16, neither) that any
    # context reaches, with one context per pair.
    from tuner.kernels.logits import _int_class, probe_contexts

    for ctx, page in ((65536, 64), (200, 64), (16384, 16), (5, 64), (1000, 256)):
        pairs = lambda cs: {(_int_class(c), _int_class(-(-c // page))) for c in cs}  # noqa: E731
        probes = probe_contexts(ctx, page)
        assert pairs(probes) == pairs(range(1, ctx + 1)) and len(probes) == len(pairs(probes)), (ctx, page)
    assert probe_contexts(65536, 64) == [1, 2, 16, 65471, 65472, 65535, 65536]


def test_fp8lut_lookup_asm_gives_the_e4m3_code_of_every_e2m1_nibble() -> None:
    # fp8lut cannot run under the interpreter (inline asm): its PTX, as rendered, is executed here
    # instruction by instruction on every byte value in every byte position, against the e4m3 code
    # of each nibble's e2m1 value (torch's float8_e4m3fn as the judge).
    import random

    asm, constraints, pack = asm_of(render_variant("mxfp4_68", "fp8lut").source)
    assert constraints == "=r,=r,r" and pack == 4
    e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    code = e2m1.to(torch.float8_e4m3fn).view(torch.uint8).tolist()  # nibble -> e4m3 byte
    words = [b * 0x01010101 for b in range(256)] + [random.Random(0).getrandbits(32) for _ in range(2000)]
    for x in words:
        out = run_ptx(asm, {"$2": x})
        for j in range(4):
            byte = (x >> (8 * j)) & 0xFF
            assert (out["$0"] >> (8 * j)) & 0xFF == code[byte & 0xF], (hex(x), j, "low nibble")
            assert (out["$1"] >> (8 * j)) & 0xFF == code[byte >> 4], (hex(x), j, "high nibble")


def test_fp8keylut_asm_gives_the_shifted_e4m3_code_of_every_nibble() -> None:
    # fp8keylut's PTX, executed on every byte value in every position with every chunk shift
    # (u << 3 for u = 0..11) and the flush marker (0x80) per byte: each nibble must come out as the
    # e4m3 code of its e2m1 value times 2**(u - 5) (torch's float8_e4m3fn as the judge), a flushed
    # one as a zero of its sign.
    import random

    asm, constraints, pack = asm_of(render_variant("mxfp4_68", "fp8keylut").source)
    assert constraints == "=r,=r,r,r" and pack == 4
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    shifts = [u << 3 for u in range(12)] + [0x80]

    def code(nib: int, sh: int) -> int:
        if sh == 0x80:
            return nib & 8 and 0x80
        return int(torch.tensor([e2m1[nib] * 2.0 ** ((sh >> 3) - 5)]).to(torch.float8_e4m3fn).view(torch.uint8))

    rng = random.Random(2)
    cases = [(b * 0x01010101, [sh] * 4) for b in range(256) for sh in shifts]
    cases += [(rng.getrandbits(32), [rng.choice(shifts) for _ in range(4)]) for _ in range(3000)]
    for x, sh in cases:
        out = run_ptx(asm, {"$2": x, "$3": sh[0] | sh[1] << 8 | sh[2] << 16 | sh[3] << 24})
        for j in range(4):
            byte = (x >> (8 * j)) & 0xFF
            assert (out["$0"] >> (8 * j)) & 0xFF == code(byte & 0xF, sh[j]), (hex(x), j, sh, "low nibble")
            assert (out["$1"] >> (8 * j)) & 0xFF == code(byte >> 4, sh[j]), (hex(x), j, sh, "high nibble")


def test_wgmma_codes_asm_gives_the_shifted_e4m3_code_of_every_nibble_in_order() -> None:
    # The wgmma path's PTX, executed on every byte value in every position (and random words),
    # for every chunk shift u (the kernel's code tables for u = 0..11; all zero for a flushed
    # chunk) and both halves of the word: output byte j of half h must be the e4m3 code of element
    # 4 h + j of the word (elements 2i and 2i+1 in the low and high nibble of byte i) times
    # 2**(u - 5), torch's float8_e4m3fn as the judge; a flushed one a zero of its sign.
    import random

    src = render_variant("mxfp4_68", "wgmma").source
    asm, constraints, pack = asm_of(src, "_codes")
    assert constraints == "=r," + ",".join(["r"] * 20) and pack == 4
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]

    def code(nib: int, u: int) -> int:
        if u < 0:
            return nib & 8 and 0x80
        return int(torch.tensor([e2m1[nib] * 2.0 ** (u - 5)]).to(torch.float8_e4m3fn).view(torch.uint8))

    rng = random.Random(3)
    words = [b * 0x01010101 for b in range(256)] + [rng.getrandbits(32) for _ in range(600)]
    for u in range(-1, 12):
        keep = int(u >= 0)
        la, lb = (u * 0x08080800 + 0x14100800) * keep, (u * 0x08080808 + 0x24201C18) * keep
        for x in words:
            for half in (0, 1):
                out = run_ptx(asm, {"$1": x, "$5": la, "$9": lb, "$13": 16 * half, "$17": 0xD9C8 + 0x2222 * half})
                for j in range(4):
                    k = 4 * half + j
                    nib = (x >> (4 * k)) & 0xF
                    assert (out["$0"] >> (8 * j)) & 0xFF == code(nib, u), (hex(x), u, half, j)
    # The tables the kernel builds are these (the same formula, in the rendered source).
    assert "la = (u * 0x08080800 + 0x14100800) * keep" in src and "lb = (u * 0x08080808 + 0x24201C18) * keep" in src


def test_wgmma_relu_asm_rounds_to_bf16_and_keeps_nan() -> None:
    import math
    import random
    import struct

    from tests.ptx_emulation import bf16_bits

    asm, constraints, pack = asm_of(render_variant("mxfp4_68", "wgmma").source, "_relu_bf16")
    assert constraints == "=r,r,r" and pack == 2
    rng = random.Random(4)
    vals = [0.0, -0.0, 1.0, -1.0, 3.1e38, -3.1e38, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40]
    vals += [rng.uniform(-1e6, 1e6) for _ in range(500)]
    bits = lambda f: struct.unpack("<I", struct.pack("<f", f))[0]  # noqa: E731
    for a, b in zip(vals, reversed(vals)):
        out = run_ptx(asm, {"$1": bits(a), "$2": bits(b)})["$0"]
        for half, v in ((0, a), (1, b)):  # element 0 in the low half
            want = bf16_bits(v if math.isnan(v) or v > 0 else 0.0)
            assert (out >> (16 * half)) & 0xFFFF == want, (a, b, half)


def test_wgmma_space_and_descriptor_type() -> None:
    # The wgmma path fixes all but TILES and num_stages; it exists for mxfp4_68 with an fp8 query.
    sp = space("mxfp4_68", "fp8")
    base = dot_config(default_config("mxfp4_68", "fp8"), "wgmma")
    assert sp.infeasible(base) is None and sp.infeasible(base.replace(TILES=1, num_stages=1)) is None
    for off in ({"BLOCK_N": 32}, {"QT": 2}, {"HEADS": 32}, {"MMA": "heads_m"}, {"LOADS": "gather"}, {"num_warps": 8}):
        assert "wgmma" in sp.infeasible(base.replace(**off)), off
    assert "wgmma" not in space("fp8_132", "fp8").params[0].choices
    assert "wgmma" not in space("mxfp4_68", "bf16").params[0].choices
    assert dot_config(default_config("mxfp4_68", "fp8", heads=32), "wgmma", heads=32)["HEADS"] == 32
    # Its descriptor, as Triton types it: the signature the xcompile table and warmup keys use, and
    # what a warmup stand-in built from that type specialises as.
    from tuner.warmup import backend_class, classify, stand_in_descriptor

    cache = random_cache("mxfp4_68", 3, 128, "cpu", torch.Generator().manual_seed(0))
    be = backend_class("sm_90")
    assert classify(wgmma_descriptor(cache, "mxfp4_68", 128), be)[0] == WGMMA_DESC_TYPE
    assert classify(stand_in_descriptor(WGMMA_DESC_TYPE), be)[0] == WGMMA_DESC_TYPE


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the wgmma path runs on sm_90 (a Gluon kernel)")
@pytest.mark.parametrize("page", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_wgmma_matches_reference(page: int, kind: str, target_name: str, device: str) -> None:
    # Every TMA ring depth (deeper than a program's tiles too), programs whose last tiles lie past
    # their sequences, 16..128 heads; pages under 64 keys run the same arithmetic by the Triton
    # kernel (fp8keylut).
    if legality("wgmma", target_name):
        pytest.skip(f"wgmma cannot run on {target_name}: {legality('wgmma', target_name)}")
    for heads, tiles, stages in ((64, 1, 1), (64, 2, 2), (64, 16, 3), (16, 2, 2), (32, 1, 3), (128, 4, 2)):
        p = _problem(kind, "mxfp4_68", "fp8", page, device, heads=heads, seed=page + heads)
        cfg = dot_config(default_config("mxfp4_68", "fp8", heads), "wgmma", heads=heads).replace(TILES=tiles,
                                                                                                 num_stages=stages)
        _check_config(p, "mxfp4_68", cfg)


@pytest.mark.parametrize("dot", ["fp8key", "fp8keylut", "wgmma"])
def test_key_scaled_paths_fold_chunk_scales_exactly_and_flush_only_far_chunks(dot: str, target_name: str,
                                                                             device: str) -> None:
    # fp8key folds each 32-dim chunk's scale, relative to its key's largest, into the e4m3
    # exponents: exact up to 11 binades below it; a chunk further below (or of scale byte 0) is
    # flushed. Scale bytes spread over 0..20 binades below each key's largest (and some zero): the
    # output must equal the reference of the same cache with exactly the far chunks zeroed (to
    # fp32 rounding), and the reference of the cache as it is within FORMATS.md's tolerance.
    if legality(dot, target_name):
        pytest.skip(f"{dot} cannot run on {target_name}: {legality(dot, target_name)}")
    p = _problem("decode", "mxfp4_68", "fp8", 64, device, seed=5)
    cache = p["cache"].cpu()
    page = p["page_size"]
    sc = cache[:, page * 64: page * 68].reshape(cache.shape[0], page, 4)
    g = torch.Generator().manual_seed(7)
    top = torch.randint(100, 150, (cache.shape[0], page, 1), generator=g)
    below = torch.tensor([0, 3, 11, 12, 20])[torch.randint(0, 5, sc.shape, generator=g)]
    below[..., 0] = 0  # every key has a chunk at its largest scale
    e = (top - below).masked_fill(torch.rand(sc.shape, generator=g) < 0.05, 0)  # scale byte 0: values 0
    e[..., 0] = top[..., 0]
    sc.copy_(e.to(torch.uint8))
    flushed = cache.clone()
    fsc = flushed[:, page * 64: page * 68].reshape(cache.shape[0], page, 4)
    fsc.masked_fill_(below > 11, 0)
    assert (below > 11).any() and (below == 11).any()

    def ref(c: torch.Tensor) -> torch.Tensor:
        return logits_reference(p["q"].cpu(), p["w"].cpu(), c, "mxfp4_68", page, p["block_table"].cpu(),
                                p["seq_of"].cpu(), p["k_start"].cpu(), p["k_end"].cpu(), p["max_len"])

    # Gathered, and by descriptor loads as benchmarked (the scale rows by descriptor too).
    base = dot_config(default_config("mxfp4_68", "fp8"), dot)
    cfgs = [base.replace(TILES=16)] if dot == "wgmma" else [base, base.replace(LOADS="descriptor", TILES=16, num_stages=3)]
    for cfg in cfgs:
        out = torch.full((p["q"].shape[0], p["max_len"]), float("nan"), device=device)
        logits(p["q"], p["w"], cache.to(device), "mxfp4_68", page, p["block_table"], p["seq_of"], p["k_start"],
               p["k_end"], p["max_len"], cfg, out=out)
        # Under the interpreter the fp8 products are summed in fp32; a GPU's fp8 MMA adds with fewer
        # bits; wgmma's head sum takes the relu'd scores rounded to bf16 (~2e-3 on these inputs).
        tight = 1e-5 if target_name == "interp" else 5e-3 if dot == "wgmma" else 2e-3
        assert compare(out.cpu(), ref(flushed), tight) is None, (cfg["LOADS"], compare(out.cpu(), ref(flushed), tight))
        assert compare(out.cpu(), ref(cache), TOL) is None


def test_descriptor_loads_are_nvidia_only() -> None:
    # TMA tiles: legal on NVIDIA and the interpreter; on AMD the search prunes them before any GPU
    # time, and the launcher refuses them (Triton's buffer-load lowering takes 32-bit offsets).
    from tuner.compile import compile_candidate

    cfg = default_config("fp8_132", "fp8").replace(LOADS="descriptor")
    for target in ("sm_90", "sm_100", "interp"):
        assert FAMILY.config_legality(cfg, target) is None
    for target in ("gfx942", "gfx950"):
        assert "NVIDIA" in FAMILY.config_legality(cfg, target)
        assert FAMILY.config_legality(cfg.replace(LOADS="gather"), target) is None
    assert compile_candidate("logits", logits_key("fp8_132", "fp8"), cfg, "gfx950").status == "illegal_on_arch"
    # A variant's own illegality still comes through (fp8lut is PTX).
    assert FAMILY.config_legality(default_config("mxfp4_68", "fp8").replace(dot="fp8lut"), "gfx950")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU with room for a > 2 GiB KV pool")
def test_pool_over_2gib_gathered_and_by_descriptor(target_name: str, device: str) -> None:
    # Pages past 2 GiB into the pool (64-bit offsets; the descriptor's page coordinate), read by
    # both LOADS paths (fp8_132), and by the wgmma path where it runs (mxfp4_68: TMA rows, scale
    # words by 64-bit addresses), against the reference on a small copy of the same pages.
    runs = [("fp8_132", default_config("fp8_132", "fp8").replace(LOADS=loads, num_stages=3)) for loads in ("gather", "descriptor")]
    if legality("wgmma", target_name) is None:
        runs.append(("mxfp4_68", dot_config(default_config("mxfp4_68", "fp8"), "wgmma")))
    for fmt, cfg in runs:
        page, g = 64, torch.Generator().manual_seed(7)
        pb = page * get_format(fmt).bytes_per_token
        pages = (2**31 + 2**25) // pb + 8
        big = torch.zeros(pages, pb, dtype=torch.uint8, device=device)
        small = random_cache(fmt, 8, page, device, g)
        where = torch.arange(pages - 8, pages, device=device)  # the last 8 pages, all past 2 GiB
        big[where] = small
        q, w = make_query(2, 64, "fp8", g)
        q, w = q.to(device), w.to(device)
        bt_small = torch.tensor([[3, 0, 5, 7], [1, 6, 2, 4]], dtype=torch.int32, device=device)
        bt_big = (where[bt_small.long()]).to(torch.int32)
        seq_of = torch.tensor([0, 1], dtype=torch.int32, device=device)
        ks = torch.tensor([0, 9], dtype=torch.int32, device=device)
        ke = torch.tensor([250, 256], dtype=torch.int32, device=device)
        ref = logits_reference(q.cpu(), w.cpu(), small.cpu(), fmt, page, bt_small.cpu(), seq_of.cpu(), ks.cpu(), ke.cpu(), 256)
        out = logits(q, w, big, fmt, page, bt_big, seq_of, ks, ke, 256, cfg)
        assert compare(out.cpu(), ref, TOL) is None, (fmt, cfg["dot"], cfg["LOADS"], compare(out.cpu(), ref, TOL))
        del big


def test_wgmma_stays_in_flight_across_the_back_edge_only_with_its_accumulator_chained() -> None:
    # What the wgmma template's loop and benchmarks/README.md rest on (ptxas of Triton 3.6, sm_90,
    # compiled on the CPU): a tile's MMA left in flight into the next iteration serialises every
    # wgmma of the loop when each tile gets a fresh accumulator, and does not when the one
    # loop-carried accumulator is passed back in (use_acc=False), a second MMA between or not.
    # In a process of its own without TRITON_INTERPRET: a Gluon kernel calling gl.sum compiles only
    # where triton.language was first imported outside the interpreter (its combine functions are
    # interpreter functions otherwise), which inside this test session depends on test order.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    probe = Path(__file__).resolve().parents[2] / "benchmarks" / "wgmma_pipelining_probe.py"
    table = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, check=True).stdout
    rows = {r.split("|")[1].strip(): r.split("|")[2].strip() for r in table.splitlines() if r.startswith("| ")}
    assert {k: rows.get(k) for k in ("alternating", "chained", "chained_mma2")} == \
        {"alternating": "yes", "chained": "no", "chained_mma2": "no"}, table


# ---------------------------------------------------------------------------------------------
# MXFP4 queries (q_dtype "mxfp4": values uint8[T, Hi, 64] + ue8m0 scales uint8[T, Hi, 4])
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", LOGITS_FORMATS)
@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_mxfp4_query_logits_matches_reference(fmt: str, page: int, kind: str, target_name: str, device: str) -> None:
    # Against the float64 reference of the dequantized query and keys: every MXFP4-query variant
    # that runs here (under the interpreter: the decode-once fp8, fp8key and f16 paths), in both MMA
    # orientations, with PREFETCH, descriptor loads and (prefill) query groups of two tokens.
    p = _problem(kind, fmt, "mxfp4", page, device, seed=page + 1)
    assert isinstance(p["q"], tuple) and p["q"][0].dtype == torch.uint8 and p["q"][1].shape[-1] == 4
    cfgs = _legal_dots(fmt, "mxfp4", target_name)
    assert cfgs and all(c["query"] == "mxfp4" for c in cfgs)
    if target_name == "interp":
        assert {variant_of(c) for c in cfgs} == ({"mxfp4q.fp8", "mxfp4q.fp8key", "mxfp4q.f16.soft"} if fmt == "mxfp4_68"
                                                 else {"mxfp4q.fp8", "mxfp4q.f16.soft"})
    sp = space(fmt, "mxfp4")
    for cfg in cfgs:
        # Prefill: the query groups of two tokens; the one-token variations on the decode problem only
        # (a prefill program of one query token reads as a decode one does).
        variations = ([cfg, cfg.replace(QT=2, HEADS=32, BLOCK_N=32, TILES=2, PAGE_LOOKUP="key", num_warps=2)]
                      if kind == "prefill" else
                      [cfg, cfg.replace(MMA="heads_m"), cfg.replace(PREFETCH=1, BLOCK_N=16, TILES=4),
                       cfg.replace(LOADS="descriptor", BLOCK_N=16, TILES=4, num_stages=3)])
        for c in variations:
            if sp.infeasible(c) is None:
                _check_config(p, fmt, c)


def test_mxfp4_query_folds_chunk_scales_exactly_and_flushes_only_far_chunks(target_name: str, device: str) -> None:
    # The decode-once paths fold each 32-dim chunk's scale, relative to its row's largest, into the
    # e4m3 exponents: exact up to 11 binades below it, further below flushed (as fp8key does keys).
    # Query chunks spread over 0..20 binades: the output equals the reference of the same query
    # with exactly the far chunks zeroed (to fp32 rounding), and the reference within tolerance.
    from tuner.formats import quantize_query

    fmt, page = "mxfp4_68", 64
    p = _problem("decode", fmt, "fp8", page, device, seed=9)
    g = torch.Generator().manual_seed(4)
    t = p["w"].shape[0]
    below = torch.tensor([0, 3, 11, 12, 20])[torch.randint(0, 5, (t, 64, 4), generator=g)]
    below[..., 0] = 0  # every row has a chunk at its largest scale
    x = torch.randn(t, 64, 128, generator=g) * (2.0 ** -below.double()).repeat_interleave(32, dim=-1)
    values, scales = quantize_query(x.to(torch.bfloat16))
    e = scales.int()
    far = (e.amax(dim=-1, keepdim=True) - e) > 11
    assert far.any() and ((e.amax(dim=-1, keepdim=True) - e) == 11).any()
    flushed = (values.clone(), scales.masked_fill(far, 0))  # scale byte 0: the chunk's values are 0

    def ref(q: tuple) -> torch.Tensor:
        return logits_reference(q, p["w"].cpu(), p["cache"].cpu(), fmt, page, p["block_table"].cpu(), p["seq_of"].cpu(),
                                p["k_start"].cpu(), p["k_end"].cpu(), p["max_len"])

    # Under the interpreter the products are summed in fp32; a GPU's fp8 MMA adds with fewer bits
    # (7.9e-5 for fp8key's K=128 dots on the H200), as in the key-side test above.
    tight = 1e-5 if target_name == "interp" else 2e-3
    for dot in ("fp8", "fp8key", "f16"):
        cfg = dot_config(default_config(fmt, "mxfp4"), dot)
        out = logits(to_device((values, scales), device), p["w"], p["cache"], fmt, page, p["block_table"], p["seq_of"],
                     p["k_start"], p["k_end"], p["max_len"], cfg)
        assert compare(out.cpu(), ref(flushed), tight) is None, (dot, compare(out.cpu(), ref(flushed), tight))
        assert compare(out.cpu(), ref((values, scales)), TOL) is None


def test_mxfp4_query_space_legality_and_key() -> None:
    from catalog.keys import make_key

    for fmt in LOGITS_FORMATS:
        sp = space(fmt, "mxfp4")
        assert [p.name for p in sp.params][-1] == "query" and sp.params[-1].choices == ("mxfp4",)
        dflt = default_config(fmt, "mxfp4")
        # The default runs on every target (and under the interpreter): the decode-once fp8 path.
        assert variant_of(dflt) == "mxfp4q.fp8" and dflt["MMA"] == "keys_m"
        assert all(legality(variant_of(dflt), t) is None for t in ("sm_90", "sm_100", "gfx942", "gfx950", "interp"))
        assert "wgmma" not in sp.params[0].choices and "bf16" not in sp.params[0].choices
        # A bf16/fp8 config is not an MXFP4 query's, nor the other way round (keys stay apart).
        assert "missing parameter query" in sp.infeasible(default_config(fmt, "fp8"))
        assert "unknown parameters" in space(fmt, "fp8").infeasible(dflt)
        key = logits_key(fmt, "mxfp4")
        assert key.formats == make_key("logits", "sm_90", formats=[fmt, "mxfp4"]).formats == (fmt, "mxfp4")
        assert FAMILY.render(key, dflt).source != FAMILY.render(logits_key(fmt, "fp8"), default_config(fmt, "fp8")).source
    assert make_key("logits", "sm_90", formats=["mxfp4_68", "mxfp4"]).formats == ("mxfp4_68", "mxfp4")
    assert legality("mxfp4q.scaled", "interp") and "gfx942" in legality("mxfp4q.scaled", "gfx942")
    assert legality("scaled", "gfx942") is None  # a bf16/fp8 query's scaled path is unaffected
    with pytest.raises(ValueError, match="MXFP4 query runs"):
        render_variant("mxfp4_68", "wgmma", q_dtype="mxfp4")
    # Bytes: a query row is its 68-byte record instead of 128 fp8 bytes.
    b64 = LOGITS_BUCKETS[3]
    fp8, q4 = FAMILY.bytes_moved(logits_key("mxfp4_68", "fp8"), b64), FAMILY.bytes_moved(logits_key("mxfp4_68", "mxfp4"), b64)
    assert fp8 - q4 == 64 * 64 * (128 - 68)


def test_mxfp4_query_family_inputs_run_verify_and_bad_arguments(device: str) -> None:
    from catalog.core import Bucket

    for fmt in LOGITS_FORMATS:
        key = logits_key(fmt, "mxfp4")
        for bucket in (Bucket("B", 1, 2, 300), Bucket("T", 1, 5, 200)):
            inputs = FAMILY.make_inputs(key, bucket, device, seed=1)
            inputs["out"].fill_(float("nan"))
            out = FAMILY.run(key, FAMILY.default_config(key), inputs)
            assert FAMILY.verify(key, inputs, out) is None
            out[0, 0] = 1e9
            assert FAMILY.verify(key, inputs, out) is not None
    p = _problem("decode", "mxfp4_68", "mxfp4", 16, device)
    v, sc = p["q"]
    args = [p["w"], p["cache"], "mxfp4_68", 16, p["block_table"], p["seq_of"], p["k_start"], p["k_end"], 64]
    with pytest.raises(ValueError, match="values must be"):
        logits((v.view(torch.int8), sc), *args)
    with pytest.raises(ValueError, match="scales must be"):
        logits((v, sc[:, :, :2].contiguous()), *args)
    with pytest.raises(ValueError, match="pair"):
        logits((v, sc, sc), *args)
    with pytest.raises(ValueError, match="infeasible"):  # wgmma reads an fp8 query
        logits(p["q"], *args, config=default_config("mxfp4_68", "mxfp4").replace(dot="wgmma"))
    # A config given without `query` is an MXFP4 query's when the query is one.
    cfg = Config.from_dict({k: v for k, v in default_config("mxfp4_68", "mxfp4").as_dict().items() if k != "query"})
    _check_config(p, "mxfp4_68", cfg)


def test_mxfp4_query_sources_match_golden() -> None:
    from catalog.families.logits import MXFP4Q_VARIANTS

    for fmt in LOGITS_FORMATS:
        seen = set()
        for variant in MXFP4Q_VARIANTS:
            dot, backend = parse_variant(variant)
            if dot in E2M1_ONLY_DOTS and fmt != "mxfp4_68":
                continue
            src = render_variant(fmt, dot, backend, "mxfp4").source
            if src in seen:  # fp8_132 decodes no e2m1: one source per dot path
                continue
            seen.add(src)
            assert "MXFP4 query" in src.splitlines()[1]
            check_golden(f"logits/{fmt}.{variant}.py", src)


@pytest.mark.parametrize("target", ["sm_90", "gfx950"])
def test_mxfp4_query_warmup_keys_cover_every_real_launch(target: str) -> None:
    # tuner.warmup.keys_for needs no change for the query's two tensors: they are two pointer
    # arguments (q_ptr, qs_ptr: *u8) the recorder classifies like any other.
    from catalog.core import Bucket
    from tests.tuner.test_warmup import test_reader_keys_cover_every_real_launch
    from tuner.warmup import keys_for

    for fmt in LOGITS_FORMATS:
        test_reader_keys_cover_every_real_launch("logits", Bucket("B", 1, 3, 200), ("cache",), (fmt, "mxfp4"), {}, target)
    keys = keys_for("logits", logits_key("mxfp4_68", "mxfp4", target), default_config("mxfp4_68", "mxfp4"),
                    Bucket("B", 1, 2, 200), target)
    assert keys and all({a.name: a.type for a in k.args}.get("qs_ptr") == "*u8" for k in keys)
    assert all({a.name: a.type for a in k.args}["q_ptr"] == "*u8" for k in keys)


def test_kernel_constexprs_follow_the_page_the_call_reads() -> None:
    # One derivation for the launcher and the cross-compiler: a descriptor config whose tiles
    # straddle pages (128 keys on 64-key pages) looks keys up one by one and gathers.
    from catalog.families.logits import kernel_constexprs
    from catalog.formats import get_format, page_bytes

    f = get_format("mxfp4_68")
    cfg = default_config("mxfp4_68", "fp8").replace(LOADS="descriptor")
    on_page = kernel_constexprs(cfg, f, "fp8", 64, 64, page_bytes(f, 64))
    assert on_page["TILE_LOOKUP"] and on_page["DESC"] and on_page["KEYS_M"] and on_page["Q_FP8"]
    straddling = kernel_constexprs(cfg.replace(BLOCK_N=128), f, "fp8", 64, 64, page_bytes(f, 64))
    assert not straddling["TILE_LOOKUP"] and not straddling["DESC"]
    assert not kernel_constexprs(cfg, f, "mxfp4", 64, 64, page_bytes(f, 64))["Q_FP8"]


def test_bench_picks_are_timed_or_refused_by_name() -> None:
    # benchmarks/bench_logits.py --pick: a pick the space or the target refuses stops the run with
    # the reason (an A/B of 2026-12-07 timed the default alone when `dot=wgmma` lacked the
    # LOADS=descriptor it needs); a feasible one is timed beside the default.
    from benchmarks.bench_logits import sweep_configs

    got = sweep_configs("mxfp4_68", False, "sm_90", False, ["dot=wgmma,LOADS=descriptor,TILES=16,num_stages=2"])
    assert [(c["dot"], c["LOADS"], c["TILES"]) for c in got] == [("fp8", "gather", 4), ("wgmma", "descriptor", 16)]
    with pytest.raises(SystemExit, match="runs LOADS=descriptor"):
        sweep_configs("mxfp4_68", False, "sm_90", False, ["dot=wgmma,TILES=16"])
    with pytest.raises(SystemExit, match="--pick"):
        sweep_configs("mxfp4_68", False, "gfx950", False, ["dot=wgmma,LOADS=descriptor"])
