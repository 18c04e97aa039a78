"""The sparse decode tile against the float64 reference: every legal variant, split and unsplit,
both MMA orientations, both list layouts (LISTS) and both merges (COMBINE), ragged and empty key
lists, different page sizes; plus the fused merge's counters and the legality table. sm_90's
Gluon kernels (the wgmma path) are test_decode_wgmma.py's."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from tests.golden_files import check_golden
from catalog.core import Bucket, Config
from tuner.formats import alloc_cache, page_bytes, quantize, write_slots
from catalog.codecs import e2m1_backend_legality
from catalog.families.decode import (DECODE_BUCKETS, ISSUE_PAIRS, MAX_SPLITS, PDL_TARGETS, cfg_backends, decode_key,
                                     default_config, render_variant, render_wgmma, space)
from catalog.families.decode_wgmma import is_wgmma, wgmma_reads
from tuner.kernels.decode import FAMILY, decode, make_decode_inputs, max_partials, run_decode, split_plan, verify_decode, workspace_numel
from tuner.reference import compare, decode_reference
from tuner.targets import GPU_TARGETS
from tests.tuner.decode_cases import H, T, TOPK, WINDOW, masked_past, poison, small_inputs


def _configs(comp: str, win: str, backend: str, sink: bool) -> list[Config]:
    base = default_config(comp, win).replace(backend=backend)
    if not sink:  # the list layouts and merges below only move partials: checked once, with the sink
        return [base, base.replace(NUM_SPLITS=2, BLOCK_N=32, MMA="keys_m", num_warps=4),
                base.replace(NUM_SPLITS=4, DOT="fp32"),
                # Records loaded one block early: 16-key blocks, several per split, ragged ends.
                base.replace(PREFETCH=1, BLOCK_N=16, MMA="keys_m", num_warps=4, NUM_SPLITS=1)]
    return [
        base,  # AUTO splits: 4 "SMs" under the interpreter -> 1 split at T=3
        base.replace(NUM_SPLITS=2, BLOCK_N=32, MMA="keys_m", num_warps=4),
        base.replace(NUM_SPLITS=4, DOT="fp32"),
        # One list per program, merged in-kernel: 2 + 1 programs (32-key chunks of 40 and 20 keys).
        base.replace(NUM_SPLITS=2, LISTS="apart", COMBINE="fused"),
        # One list per program, merged by decode_combine: 3 + 2 programs of 16 keys, keys on M.
        base.replace(NUM_SPLITS=4, LISTS="apart", BLOCK_N=16, MMA="keys_m", num_warps=4),
        # Both lists per program, merged in-kernel.
        base.replace(NUM_SPLITS=4, COMBINE="fused"),
        # One launch per list (the window launch's partials after the compressed one's), merged
        # by decode_combine, then by the last program of the second launch.
        base.replace(NUM_SPLITS=2, LISTS="separate"),
        base.replace(NUM_SPLITS=4, LISTS="separate", COMBINE="fused", MMA="keys_m", num_warps=4),
        base.replace(NUM_SPLITS=2, LISTS="separate", PREFETCH=1, BLOCK_N=16, MMA="keys_m", num_warps=4),
    ]


@pytest.mark.parametrize("pair", ISSUE_PAIRS, ids=["+".join(p) for p in ISSUE_PAIRS])
@pytest.mark.parametrize("sink", [False, True], ids=["nosink", "sink"])
def test_decode_matches_reference(pair: tuple[str, str], sink: bool, target_name: str, device: str) -> None:
    comp, win = pair
    inp = small_inputs(comp, win, device, sink)
    ro, rl = decode_reference(inp["q"], inp["comp_cache"], comp, inp["topk_idx"], inp["win_cache"], win,
                              inp["window_idx"], inp["page_size"], inp["sm_scale"], inp["attn_sink"],
                              win_page_size=inp["win_page_size"])
    assert torch.isneginf(rl[1]).all() and bool((ro[1] == 0).all())  # the reference agrees on the empty token
    legal = [b for b in cfg_backends(comp, win) if e2m1_backend_legality(b, target_name) is None]
    assert legal
    for backend in legal:
        for cfg in _configs(comp, win, backend, sink):
            poison(inp)
            o, lse = decode(inp["q"], inp["comp_cache"], comp, inp["topk_idx"], inp["win_cache"], win,
                            inp["window_idx"], inp["page_size"], inp["sm_scale"], inp["attn_sink"], cfg,
                            win_page_size=inp["win_page_size"], out=inp["out"], workspace=inp["workspace"])
            where = f"{comp}+{win} {cfg.to_json()}"
            assert compare(o, ro, 1e-2) is None, f"{where} o: {compare(o, ro, 1e-2)}"
            assert compare(lse, rl, 1e-2) is None, f"{where} lse: {compare(lse, rl, 1e-2)}"
            # No valid key: o = 0 and lse = -inf exactly, sink or not.
            assert bool((o[1] == 0).all()) and bool(torch.isneginf(lse[1]).all()), where


@pytest.mark.parametrize("pair", ISSUE_PAIRS, ids=["+".join(p) for p in ISSUE_PAIRS])
def test_list_lengths_bound_each_tokens_lists(pair: tuple[str, str], target_name: str, device: str) -> None:
    # FlashMLA's topk_length: each sequence (of seq_tokens query tokens) reads only the first len
    # slots of its lists, inside the kernel. Lengths of 0, inside and past the list, for one list or
    # both: the same outputs as the lists with those slots set to -1, in every list layout and merge.
    comp, win = pair
    inp = make_decode_inputs(comp, win, 4, H, TOPK, WINDOW, device, 11, page_size=16, win_page_size=8)
    comp_lens = torch.tensor([40, 0], dtype=torch.int32, device=device)  # sequences of 2 tokens each
    win_lens = torch.tensor([7, 99], dtype=torch.int32, device=device)
    legal = [b for b in cfg_backends(comp, win) if e2m1_backend_legality(b, target_name) is None]
    for i, cfg in enumerate(_configs(comp, win, legal[0], sink=True)):
        # Both lists' lengths in every layout; one list's alone in the default layout.
        for lens in ((comp_lens, win_lens),) + (((comp_lens, None), (None, win_lens)) if i == 0 else ()):
            args = (inp["q"], inp["comp_cache"], comp)
            kw = dict(page_size=16, sm_scale=inp["sm_scale"], attn_sink=inp["attn_sink"], config=cfg, win_page_size=8)
            want = decode(*args, masked_past(inp["topk_idx"], comp_lens, 2) if lens[0] is not None else inp["topk_idx"],
                          inp["win_cache"], win,
                          masked_past(inp["window_idx"], win_lens, 2) if lens[1] is not None else inp["window_idx"], **kw)
            got = decode(*args, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"], **kw,
                         topk_lens=lens[0], window_lens=lens[1], seq_tokens=2)
            where = f"{comp}+{win} {cfg.to_json()} lens={[x is not None for x in lens]}"
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), where
    with pytest.raises(ValueError, match="seq_tokens must divide"):
        decode(inp["q"], inp["comp_cache"], comp, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"], 16,
               inp["sm_scale"], win_page_size=8, topk_lens=comp_lens, seq_tokens=3)
    with pytest.raises(ValueError, match="topk_lens must be a contiguous int32"):
        decode(inp["q"], inp["comp_cache"], comp, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"], 16,
               inp["sm_scale"], win_page_size=8, topk_lens=comp_lens.long(), seq_tokens=2)


def test_sink_scales_output_but_not_lse(device: str) -> None:
    comp, win = "nvfp4_288", "fp8_528"
    inp = small_inputs(comp, win, device, sink=True, seed=3)
    args = (inp["q"], inp["comp_cache"], comp, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"], 16, inp["sm_scale"])
    o0, l0 = decode(*args, win_page_size=8)
    o1, l1 = decode(*args, attn_sink=inp["attn_sink"], win_page_size=8)
    live = torch.isfinite(l0)
    assert torch.equal(torch.isneginf(l0), torch.isneginf(l1))
    assert torch.allclose(l0[live], l1[live], rtol=1e-6, atol=1e-6)
    factor = torch.exp(l0) / (torch.exp(l0) + torch.exp(inp["attn_sink"])[None, :])
    want = o0.float() * factor[..., None]
    assert compare(o1[live], want[live], 1e-2) is None
    assert not torch.allclose(o0[live].float(), o1[live].float())  # the sink did something


def test_auto_split_launch_matches(device: str) -> None:
    """T = 1 under AUTO takes the split + combine path (flash-decoding), T = 3 does not."""
    comp, win = "fp8_528", "nvfp4_288"
    inp = make_decode_inputs(comp, win, 1, 12, 70, 9, device, 5, page_size=32)  # 12 heads: padded to 16
    poison(inp)
    from tuner.kernels.decode import resolve_splits, run_decode

    assert resolve_splits(default_config(comp, win), 1, 70, torch.device(device)) > 1
    assert verify_decode(comp, win, inp, run_decode(comp, win, None, inp)) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU with room for a > 2 GiB KV pool")
def test_pool_over_2gib_uses_64bit_offsets(device: str) -> None:
    comp, win, page = "fp8_528", "fp8_528", 64
    pages = (2**31 + 2**25) // page_bytes(comp, page) + 2
    big = alloc_cache(comp, pages, page, device=device)
    small = alloc_cache(win, 4, page, device=device)
    hi = torch.tensor([(pages - 1) * page + 5, (pages - 2) * page + 63], dtype=torch.int32)
    x = torch.randn(4, 512)
    write_slots(big, quantize(x[:2], comp).to(device), hi.to(device), comp, page)
    write_slots(small, quantize(x[2:], win).to(device), torch.tensor([1, 7], device=device), win, page)
    q = torch.randn(1, H, 512).to(torch.bfloat16).to(device)
    tk = hi[None, :].to(device)
    wi = torch.tensor([[1, 7]], dtype=torch.int32, device=device)
    o, lse = decode(q, big, comp, tk, small, win, wi, page, 0.05)
    ro, rl = decode_reference(q, big, comp, tk, small, win, wi, page, 0.05)
    assert compare(o, ro, 1e-2) is None and compare(lse, rl, 1e-2) is None


def test_decode_rejects_bad_arguments(device: str) -> None:
    comp, win = "nvfp4_288", "fp8_528"
    inp = small_inputs(comp, win, device, sink=True)
    ok = dict(q=inp["q"], comp_cache=inp["comp_cache"], comp_fmt=comp, topk_idx=inp["topk_idx"],
              win_cache=inp["win_cache"], win_fmt=win, window_idx=inp["window_idx"], page_size=16,
              sm_scale=0.1, attn_sink=inp["attn_sink"], win_page_size=8)

    def bad(match: str, **changes: object) -> None:
        with pytest.raises(ValueError, match=match):
            decode(**{**ok, **changes})

    bad("512-dim records", comp_fmt="mxfp4_68")
    bad("unknown record format", win_fmt="fp4")
    bad("q must be bf16", q=inp["q"].float())
    bad("q must be bf16", q=inp["q"][..., :256])
    bad("comp_cache must be a contiguous uint8", page_size=32)  # pages of the wrong size
    bad("win_cache must be a contiguous uint8", win_page_size=None)  # defaults to 16: wrong for this cache
    bad("a page must stay under 2 GiB", page_size=2**23)  # 2**23 records of 288 bytes
    bad("topk_idx must be int32", topk_idx=inp["topk_idx"].long())
    bad("window_idx must be int32", window_idx=inp["window_idx"][:2])
    bad("at least one slot", window_idx=inp["window_idx"][:, :0])
    bad("attn_sink must be", attn_sink=inp["attn_sink"][:4])
    bad("sm_scale must be finite", sm_scale=math.inf)
    bad("infeasible decode config", config=default_config(comp, win).replace(BLOCK_N=24))
    bad("infeasible decode config", config=default_config(comp, win).replace(DOT="fp32", BLOCK_N=64))
    bad("heads must be", q=torch.zeros(T, 129, 512, dtype=torch.bfloat16, device=device))
    bad("counters must be", counters=torch.zeros(T - 1, dtype=torch.int32, device=device))
    bad("counters must be", counters=torch.zeros(T, dtype=torch.int64, device=device))
    bad("workspace must be", config=default_config(comp, win).replace(NUM_SPLITS=2, LISTS="apart"),
        workspace=torch.empty(workspace_numel(T, H, 2), device=device))  # apart: 3 partials per token here
    with pytest.raises(ValueError, match="unknown e2m1 backend"):
        render_variant(comp, win, "cuda")


def test_space_is_data() -> None:
    sp = space("nvfp4_288", "fp8_528")
    doc = json.loads(json.dumps(sp.to_json()))
    assert [p["name"] for p in doc] == ["backend", "BLOCK_N", "NUM_SPLITS", "LISTS", "COMBINE", "DOT", "MMA", "PREFETCH",
                                        "num_warps", "num_stages"]
    assert [p["name"] for p in doc if p["render"]] == ["backend"]
    grid = list(sp.grid())
    assert default_config("nvfp4_288", "fp8_528") in grid
    assert all(sp.infeasible(c) is None for c in grid)
    assert all(not (c["DOT"] == "fp32" and c["BLOCK_N"] == 64) for c in grid)
    # The new axes default to today's kernel, and no constraint involves them.
    d = default_config("nvfp4_288", "fp8_528")
    assert d["LISTS"] == "both" and d["COMBINE"] == "kernel"
    triton_grid = [c for c in grid if not is_wgmma(c)]
    assert sum(1 for c in triton_grid if c["LISTS"] == "apart" and c["COMBINE"] == "fused") * 6 == len(triton_grid)
    # The wgmma path: one config per split count, warps (one warpgroup or two) and merge (decode_combine,
    # or the programs themselves); its other parameters are fixed.
    wg = sorted((c["num_warps"], c["NUM_SPLITS"], c["COMBINE"]) for c in grid if c["MMA"] == "wgmma")
    assert wg == [(w, s, m) for w in (4, 8) for s in (0, 1, 2, 4, 8, 16, 32) for m in ("fused", "kernel")]
    # No e2m1 side: no backend axis, and every backend renders the same module.
    assert cfg_backends("fp8_584", "fp8_584") == ("soft",)
    assert render_variant("fp8_584", "fp8_584", "ptx").source == render_variant("fp8_584", "fp8_584", "soft").source


def test_family_protocol(device: str) -> None:
    key = decode_key("nvfp4_288", "fp8_528", "interp", heads=16, topk=24, window=8)
    fam = FAMILY
    assert fam.name == "decode" and list(fam.variants()) == ["soft", "ptx", "gfx950", "lut", "wgmma"]
    buckets = fam.buckets(key)
    assert buckets == list(DECODE_BUCKETS) and buckets[0].lo == 1 and buckets[-1].hi == 64
    assert all(a.hi + 1 == b.lo for a, b in zip(buckets, buckets[1:]))  # 1..64 without gaps
    cfg = fam.default_config(key)
    assert fam.variant_of(cfg) == "soft" and fam.render(key, cfg).source == render_variant("nvfp4_288", "fp8_528", "soft").source
    inputs = fam.make_inputs(key, Bucket("T", 2, 2), device, seed=1)
    poison(inputs)
    out = fam.run(key, cfg, inputs)
    assert fam.verify(key, inputs, out) is None
    # A corrupted output is caught.
    out[0][0, 3, 7] = float("nan")
    assert fam.verify(key, inputs, out)
    # Seed shape at T=64: ~215 KB of records per token for this pair (the issue's 3.7 us floor).
    seed_key = decode_key("nvfp4_288", "fp8_528", "sm_90")
    b64 = fam.bytes_moved(seed_key, Bucket("T", 33, 64))
    assert 64 * (512 * 288 + 128 * 528) < b64 < 64 * (512 * 288 + 128 * 528) * 1.2
    assert fam.bytes_moved(decode_key("fp8_584", "fp8_584", "sm_90"), Bucket("T", 33, 64)) > 1.8 * 64 * (512 * 288 + 128 * 528)


def test_legality_table() -> None:
    for variant in FAMILY.variants():
        for target in ("sm_90", "sm_100", "gfx942", "gfx950", "interp"):
            if variant == "wgmma":  # sm_90's Gluon kernel
                assert (FAMILY.legality(variant, target) is None) == (target == "sm_90")
            else:
                assert FAMILY.legality(variant, target) == e2m1_backend_legality(variant, target)
    assert FAMILY.legality("soft", "sm_90") is None and FAMILY.legality("ptx", "sm_90")
    assert FAMILY.legality("lut", "sm_90") is None and FAMILY.legality("lut", "gfx950") and FAMILY.legality("lut", "interp")


@pytest.mark.parametrize("pair", ISSUE_PAIRS, ids=["+".join(p) for p in ISSUE_PAIRS])
def test_rendered_sources_match_golden(pair: tuple[str, str]) -> None:
    comp, win = pair
    for b in cfg_backends(comp, win):
        check_golden(f"decode/{comp}+{win}.{b}.py", render_variant(comp, win, b).source)
    if wgmma_reads(comp, win):
        check_golden(f"decode/{comp}+{win}.wgmma.py", render_wgmma(comp, win).source)


@pytest.mark.parametrize("target", ("sm_90", "sm_100", "gfx942", "gfx950"))
def test_xcompile_table_matches_the_issue(target: str) -> None:
    """soft compiles on all four GPU targets; ptx (e2m1 decode via cvt.rn.f16x2.e2m1x2) only on
    sm_100; gfx950 (v_cvt_scalef32_pk_f32_fp4) only on gfx950; lut (prmt tables) on both NVIDIA
    targets; wgmma (Gluon, Hopper) only on sm_90 -- for the main kernel of every issue pair, its
    split build, and the combine kernel; the combine as a programmatic dependent launch (the wgmma
    path's, griddepcontrol) on the NVIDIA targets only. A test a target: four shorter tests share
    out over the suite's workers better than one long one."""
    out = subprocess.run([sys.executable, "-m", "kvtune.cli", "xcompile", "--kernel", "decode", "--target", target, "--json"],
                         capture_output=True, text=True, timeout=900, check=True)
    rows = json.loads(out.stdout)
    expect = {"soft": {"sm_90", "sm_100", "gfx942", "gfx950"}, "ptx": {"sm_100"}, "gfx950": {"gfx950"},
              "lut": {"sm_90", "sm_100"}, "wgmma": {"sm_90"}}
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        assert r["kernel"] == "decode" and r["target"] == target
        seen.add((r["variant"], r["detail"], r["target"]))
        legal = expect[r["variant"]] & set(PDL_TARGETS if r["detail"].endswith(" pdl") else GPU_TARGETS)
        want = "compiled" if r["target"] in legal else "illegal"
        assert r["status"] == want, r
        assert r["expected"] == ("legal" if want == "compiled" else "illegal"), r
        if r["status"] == "compiled":
            assert r["registers"] and r["registers"] > 0 and r["spills"] is not None
        else:
            assert r["error"]
    for comp, win in ISSUE_PAIRS:
        for b in cfg_backends(comp, win):
            assert (b, f"{comp}+{win}", target) in seen
    assert ("soft", "combine", target) in seen and ("soft", "nvfp4_288+fp8_528 split8", target) in seen
    assert ("soft", "nvfp4_288+fp8_528 apart fused separate comp", target) in seen
    assert ("soft", "nvfp4_288+fp8_528 apart fused separate win", target) in seen
    assert ("soft", "nvfp4_288+fp8_528 split8 prefetch", target) in seen and ("soft", "fp8_584+fp8_584 prefetch", target) in seen
    for pair in ("nvfp4_288+fp8_528", "fp8_528+nvfp4_288", "fp8_584+fp8_584", "nvfp4_288+fp8_528 split"):
        assert ("wgmma", pair, target) in seen
    assert ("wgmma", "fp8_584+fp8_584 split 64 heads 8 warps heads on M", target) in seen  # MMA=wgmma_hm
    assert ("wgmma", "nvfp4_288+fp8_528 split 64 heads 8 warps heads on M", target) in seen
    for pair in ("fp8_584+fp8_584", "nvfp4_288+fp8_528"):  # MMA=wgmma_hmws and wgmma_hmpv
        assert ("wgmma", f"{pair} split 64 heads 8 warps heads on M warp-specialised", target) in seen
        assert ("wgmma", f"{pair} split heads on M warp-specialised QK/PV", target) in seen
    assert ("wgmma", "fp8_584+fp8_584 split warp-specialised", target) in seen  # MMA=wgmma_ws
    assert ("wgmma", "nvfp4_288+fp8_528 split warp-specialised", target) in seen
    # PREFETCH=1 (the producer's L2 prefetch) on each warp-specialised build
    assert ("wgmma", "nvfp4_288+fp8_528 split warp-specialised prefetch", target) in seen
    # COMBINE=fused: the heads-on-N builds' programs merging their partials (one and two warpgroups, ws)
    for detail in ("split merged in kernel", "split 32 heads 8 warps merged in kernel",
                   "split warp-specialised merged in kernel"):
        assert ("wgmma", f"nvfp4_288+fp8_528 {detail}", target) in seen
    assert ("wgmma", "fp8_584+fp8_584 split 64 heads 8 warps heads on M warp-specialised prefetch", target) in seen
    assert ("wgmma", "nvfp4_288+fp8_528 split heads on M warp-specialised QK/PV prefetch", target) in seen
    for pair in ("fp8_584+fp8_584", "nvfp4_288+fp8_528"):  # MMA=wgmma_hmpvc, a 2-CTA cluster
        assert ("wgmma", f"{pair} split 2-CTA cluster QK/PV prefetch", target) in seen
    assert ("soft", "combine pdl", target) in seen
    # PTX handed to AMDGPU fails in the child (LLD / asm errors), never in this process.
    aborted = [r for r in rows if r["variant"] == "ptx" and r["target"].startswith("gfx")]
    assert len(aborted) == (len([p for p in ISSUE_PAIRS if "nvfp4_288" in p]) if target.startswith("gfx") else 0)


def test_apart_split_plan() -> None:
    """LISTS=apart: one chunk size for both lists (the compressed list's share per split, in whole
    BLOCK_N blocks), so every program walks about the same number of keys; always partials."""
    cpu = torch.device("cpu")
    base = default_config("nvfp4_288", "fp8_528").replace(LISTS="apart")

    def plan(s: int, bn: int = 32, t: int = 1, topk: int = 512, window: int = 128) -> tuple[int, int, int]:
        p = split_plan(base.replace(NUM_SPLITS=s, BLOCK_N=bn), t, topk, window, cpu)
        assert p.apart and p.partial and p.comp_chunk == p.win_chunk
        return p.comp_splits, p.programs - p.comp_splits, p.comp_chunk

    assert plan(1) == (1, 1, 512)  # even one split per list writes two partials
    assert plan(2) == (2, 1, 256)
    assert plan(4) == (4, 1, 128)
    assert plan(16) == (16, 4, 32)  # one 32-key gather round per program
    assert plan(32) == (16, 4, 32)  # chunks never below one block
    assert plan(32, bn=16) == (32, 8, 16)
    assert plan(2, topk=40, window=20) == (2, 1, 32)
    # LISTS=separate: the same chunks, launched one list at a time.
    sep = split_plan(base.replace(LISTS="separate", NUM_SPLITS=16), 1, 512, 128, cpu)
    assert sep.separate and (sep.comp_splits, sep.programs, sep.comp_chunk) == (16, 20, 32)
    # AUTO (4 "SMs" under the interpreter): halved until the window's programs fit in one wave too.
    auto = base.replace(NUM_SPLITS=0)
    assert split_plan(auto, 1, 70, 9, cpu).programs <= 4
    # LISTS=both is today's plan.
    both = split_plan(base.replace(LISTS="both", NUM_SPLITS=4), 1, 512, 128, cpu)
    assert (both.programs, both.comp_chunk, both.win_chunk, both.apart) == (4, 128, 32, False)
    # make_decode_inputs' workspace covers every config of the space.
    for topk, window in ((512, 128), (40, 20), (24, 8), (16, 200)):
        bound = max_partials(topk, window)
        for c in space("nvfp4_288", "fp8_528").grid():
            if c["NUM_SPLITS"] <= MAX_SPLITS:
                assert split_plan(c, 1, topk, window, cpu).programs <= bound, (topk, window, c.to_json())


def test_fused_merge_leaves_counters_zero_and_replays(device: str) -> None:
    """A fused launch leaves its arrival counters at zero, so the same buffers serve the next
    launch (what a CUDA-graph replay does) with the same result; and it matches decode_combine."""
    comp, win = "nvfp4_288", "fp8_528"
    inp = small_inputs(comp, win, device, sink=True, seed=7)
    assert int(inp["counters"].abs().sum()) == 0
    base = default_config(comp, win)
    for cfg in (base.replace(NUM_SPLITS=2, LISTS="apart", COMBINE="fused"), base.replace(NUM_SPLITS=4, COMBINE="fused"),
                base.replace(NUM_SPLITS=2, LISTS="separate", COMBINE="fused")):
        results = []
        for _ in range(2):
            poison(inp)
            o, lse = run_decode(comp, win, cfg, inp)
            assert int(inp["counters"].abs().sum()) == 0, cfg.to_json()
            assert verify_decode(comp, win, inp, (o, lse)) is None, cfg.to_json()
            results.append((o.clone(), lse.clone()))
        assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1]), cfg.to_json()
        # The same partials merged by the second kernel.
        poison(inp)
        ok, lk = run_decode(comp, win, cfg.replace(COMBINE="kernel"), inp)
        assert compare(results[0][0], ok, 1e-3) is None and compare(results[0][1], lk, 1e-5) is None, cfg.to_json()
    # Without caller-provided counters the launcher makes its own (zeroed) ones.
    cfg = base.replace(NUM_SPLITS=2, LISTS="apart", COMBINE="fused")
    i = inp
    o, lse = decode(i["q"], i["comp_cache"], comp, i["topk_idx"], i["win_cache"], win, i["window_idx"], i["page_size"],
                    i["sm_scale"], i["attn_sink"], cfg, win_page_size=i["win_page_size"])
    assert verify_decode(comp, win, inp, (o, lse)) is None
    # A config tuned before LISTS/COMBINE existed still runs (as LISTS=both, COMBINE=kernel).
    old = Config.from_dict({k: v for k, v in base.replace(NUM_SPLITS=2).as_dict().items() if k not in ("LISTS", "COMBINE")})
    poison(inp)
    assert verify_decode(comp, win, inp, run_decode(comp, win, old, inp)) is None


def test_combine_tile_sizes_the_block_by_the_partials() -> None:
    # The H200 sweep's rule (benchmarks/results/merge_in_kernel/combine_sweep_h200.md): about 2048
    # values a program, never a slice under 16 dims from 5 partials up (64 dims at 5 partials took
    # 2-2.4x as long), and narrower slices only where the programs would not cover the SMs.
    from tuner.kernels.decode.launch import combine_tile

    assert combine_tile(2, 16, 64, 132) == (64, 4)
    assert combine_tile(4, 16, 64, 132) == (32, 4)
    assert [combine_tile(s, 16, 64, 132) for s in (8, 16, 32)] == [(16, 4)] * 3
    assert combine_tile(8, 16, 1, 132) == (4, 4)  # one token's 16 heads: 128 programs of 4 dims
    assert combine_tile(64, 16, 64, 132) == (16, 8)  # 16384 values: 8 warps keep 64 a thread


@pytest.mark.parametrize("parts,heads,sms", [(2, 16, 0), (5, 16, 0), (16, 16, 0), (32, 16, 0), (45, 12, 0),
                                             (20, 64, 0), (10, 40, 0), (20, 16, 1024)])
def test_combine_merges_any_number_of_partials(parts: int, heads: int, sms: int, device: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # decode_combine alone, on synthetic partials (running max in log2 units, sum of exp2, the
    # unnormalised output): every block size it is launched with (2 to 64 splits, 12 to 64 heads in
    # blocks of 16, 40 with a block half full,
    # and, on a device of `sms` SMs, the narrowest slices a small batch's merge takes) against the
    # flash-decoding merge in float64. Head 0 of token 1 has no key in any split (o = 0,
    # lse = -inf); some splits of the others have none (m = -inf, l = 0).
    import tuner.kernels.decode.launch as D
    from tuner.kernels.decode import _module, launch_combine

    if sms:
        monkeypatch.setattr(D, "sm_count", lambda dev: sms)
        assert D.combine_tile(32, 16, 3, sms)[0] == 4

    g = torch.Generator().manual_seed(parts * 100 + heads)
    t = 3
    m = torch.randn(t, parts, heads, generator=g, dtype=torch.float64) * 4
    m[torch.rand(t, parts, heads, generator=g) < 0.3] = float("-inf")
    m[1, :, 0] = float("-inf")
    ell = torch.where(torch.isinf(m), 0.0, torch.rand(t, parts, heads, generator=g, dtype=torch.float64) * 5 + 0.5)
    po = torch.randn(t, parts, heads, 512, generator=g, dtype=torch.float64) * ell[..., None]
    sink = torch.randn(heads, generator=g, dtype=torch.float64)

    big = m.amax(dim=1)
    big_use = torch.where(torch.isinf(big), 0.0, big)
    w = torch.exp2(m - big_use[:, None, :])
    lsum = (ell * w).sum(dim=1)
    want_o = (po * w[..., None]).sum(dim=1) / (lsum + torch.exp2(sink * math.log2(math.e) - big_use))[..., None]
    want_o = torch.where((lsum > 0)[..., None], want_o, 0.0)
    want_lse = torch.where(lsum > 0, (big_use + torch.log2(lsum.clamp_min(1e-300))) * math.log(2), float("-inf"))

    ws = torch.cat([po.float().flatten(), torch.stack([m, ell], dim=-1).float().flatten()]).to(device)
    part_o, part_ml = ws[: po.numel()], ws[po.numel():]
    o = torch.full((t, heads, 512), float("nan"), dtype=torch.bfloat16, device=device)
    lse = torch.full((t, heads), float("nan"), dtype=torch.float32, device=device)
    launch_combine(_module("fp8_528", "fp8_528", "soft"), part_o, part_ml, sink.float().to(device), o, lse, parts, True)
    assert compare(o.cpu(), want_o.float(), 1e-2) is None, compare(o.cpu(), want_o.float(), 1e-2)
    assert torch.equal(torch.isneginf(lse.cpu()), torch.isneginf(want_lse))
    live = torch.isfinite(want_lse)
    assert torch.allclose(lse.cpu()[live].double(), want_lse[live], rtol=1e-5, atol=1e-5)
    assert bool((o[1, 0] == 0).all())


def test_lut_backend_asm_gives_the_fp32_of_every_e2m1_nibble() -> None:
    # lut cannot run under the interpreter (inline PTX): its asm, as rendered, is executed
    # instruction by instruction on every byte value in every byte position; each nibble must come
    # out as the fp32 bits of its e2m1 value (element 2i from the low nibble in $0..$3, 2i+1 from
    # the high nibble in $4..$7), the signed zero included.
    import random
    import struct

    from tests.ptx_emulation import asm_of, run_ptx

    asm, constraints, pack = asm_of(render_variant("nvfp4_288", "fp8_528", "lut").source)
    assert constraints == "=r,=r,=r,=r,=r,=r,=r,=r,r" and pack == 4
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    bits = [struct.unpack("<I", struct.pack("<f", v))[0] for v in e2m1]
    words = [b * 0x01010101 for b in range(256)] + [random.Random(1).getrandbits(32) for _ in range(2000)]
    for x in words:
        out = run_ptx(asm, {"$8": x})
        for j in range(4):
            byte = (x >> (8 * j)) & 0xFF
            assert out[f"${j}"] == bits[byte & 0xF], (hex(x), j, "low nibble")
            assert out[f"${4 + j}"] == bits[byte >> 4], (hex(x), j, "high nibble")


def test_lut_scaled_bf16_asm_gives_every_nibble_times_its_scale() -> None:
    # The lut reader's bf16 path: four bytes ($4) and their four bf16 scales ($5, $6 as pairs) ->
    # the bf16 products, element 2i of bytes 0..3 in $0, $1 and element 2i+1 in $2, $3. Executed on
    # every byte value in every position, with e4m3 and ue8m0 scale values from the smallest to
    # the largest, NaN included; every product must be the exact one (or NaN), or an infinity where
    # the fp32 the reference dequantizes to overflows too (6 * 2**127).
    import math
    import random
    import struct

    from tests.ptx_emulation import asm_of, bf16_bits, bf16_value, run_ptx

    asm, constraints, pack = asm_of(render_variant("nvfp4_288", "fp8_528", "lut").source, "_e2m1_scaled_bf16")
    assert constraints == "=r,=r,=r,=r,r,r,r" and pack == 4
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    e4m3 = [float(torch.tensor([c], dtype=torch.uint8).view(torch.float8_e4m3fn).float()) for c in range(0x7F)]
    scales = sorted({bf16_bits(v) for v in e4m3 + [2.0 ** e for e in range(-127, 128)]}) + [bf16_bits(math.nan)]
    rng = random.Random(3)
    cases = [(b * 0x01010101, [s] * 4) for b in range(256) for s in rng.sample(scales, 4)]
    cases += [(rng.getrandbits(32), [rng.choice(scales) for _ in range(4)]) for _ in range(3000)]
    for x, sc in cases:
        out = run_ptx(asm, {"$4": x, "$5": sc[0] | sc[1] << 16, "$6": sc[2] | sc[3] << 16})
        for j in range(4):
            byte, s = (x >> (8 * j)) & 0xFF, bf16_value(sc[j])
            for nib, reg in ((byte & 0xF, f"${j // 2}"), (byte >> 4, f"${2 + j // 2}")):
                got = (out[reg] >> (16 * (j % 2))) & 0xFFFF
                want = e2m1[nib] * s
                if abs(want) > 3.4028234663852886e38:  # past fp32's largest: inf, as in fp32
                    want = math.copysign(math.inf, want)
                if math.isnan(want):
                    assert math.isnan(bf16_value(got)), (hex(x), j, sc)
                else:
                    assert bf16_value(got) == want and got == bf16_bits(want), (hex(x), j, nib, s, hex(got))
                    assert struct.pack("<f", bf16_value(got)) == struct.pack("<f", want)  # signed zeros too
