"""The wgmma decode path (sm_90's Gluon kernels, templates/decode_wgmma.py.j2): its exact
conversions (executed on the CPU by a PTX emulator), the space and plan it takes, each build's
sm_90 compile (registers, spills, shared memory), and on an H100 / H200 each build against the
float64 reference. The Triton decode kernels' tests are test_decode.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from catalog.core import Config
from catalog.families.decode import decode_key, default_config, render_wgmma, space
from catalog.families.decode_wgmma import wgmma_config, wgmma_reads
from tests.tuner.decode_cases import masked_past, poison, small_inputs
from tuner.kernels.decode import FAMILY, decode, make_decode_inputs, run_decode, verify_decode, wgmma_plan


def test_wgmma_e2m1_asm_gives_every_nibble_times_its_scale() -> None:
    # The wgmma kernel's table-free e2m1 -> bf16: four bytes ($4) and one scale pair ($5, the e4m3
    # scale times 2**(126 - K_SHIFT) in both halves) -> nibbles i and i + 4 of the word as one bf16
    # pair in $i (the order _group_order relabels), each value the exact e2m1 * scale * 2**-K_SHIFT. Executed on every byte value in every position and on random
    # words, with every e4m3 scale value (zero, subnormals, 448, NaN).
    import math
    import random
    import re
    import struct

    from tests.ptx_emulation import asm_of, bf16_bits, bf16_value, run_ptx

    source = render_wgmma("nvfp4_288", "fp8_528").source
    k_shift = int(re.search(r"^K_SHIFT = gl.constexpr\((\d+)\)$", source, re.M).group(1))
    asm, constraints, pack = asm_of(source, "_e2m1_scaled_bf16")
    assert constraints == "=r,=r,=r,=r,r,r,r" and pack == 4
    e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    e4m3 = [float(torch.tensor([c], dtype=torch.uint8).view(torch.float8_e4m3fn).float()) for c in range(0x80)]
    rng = random.Random(5)
    cases = [(b * 0x01010101, s) for b in range(256) for s in rng.sample(e4m3, 6)]
    cases += [(rng.getrandbits(32), rng.choice(e4m3)) for _ in range(3000)] + [(rng.getrandbits(32), 448.0)] * 50
    for x, s in cases:
        sb = bf16_bits(s * 2.0 ** (126 - k_shift))
        assert math.isnan(s) or bf16_value(sb) == s * 2.0 ** (126 - k_shift)  # the scale itself is exact
        out = run_ptx(asm, {"$4": x, "$5": sb | sb << 16})
        for i in range(4):
            for half, nib in ((0, (x >> (4 * i)) & 0xF), (1, (x >> (4 * (i + 4))) & 0xF)):
                got = (out[f"${i}"] >> (16 * half)) & 0xFFFF
                want = e2m1[nib] * s * 2.0 ** -k_shift
                if math.isnan(want):
                    assert math.isnan(bf16_value(got)), (hex(x), i, half, s)
                else:
                    assert got == bf16_bits(want), (hex(x), i, half, nib, s, hex(got))
                    assert struct.pack("<f", bf16_value(got)) == struct.pack("<f", want)  # signed zeros too


def test_wgmma_e4m3_asm_gives_every_code_times_its_scale() -> None:
    # The wgmma kernel's conversion-free e4m3 -> bf16: eight bytes ($4, $5) and one bf16 scale
    # pair ($6, built as the kernel builds it from the ue8m0 byte) -> e_i and e_i+4 as one bf16
    # pair in $i (_group_order's order), each the e4m3 value * 2**(s - 127) * 2**-E4M3_SHIFT, exact
    # for every scale byte s in 63..194 (scales 2**-64..2**67; the pack writes 114 and up).
    # Every code in every position, and random words: zero, subnormal codes,
    # 448, byte 0 as 0.0, a NaN tile (zero bytes, scale 0xFF) as NaN.
    import math
    import random
    import re
    import struct

    from tests.ptx_emulation import asm_of, bf16_bits, bf16_value, run_ptx

    source = render_wgmma("fp8_584", "fp8_584").source
    shift = int(re.search(r"^E4M3_SHIFT = gl.constexpr\((\d+)\)$", source, re.M).group(1))
    assert "t = gl.minimum(sb + (120 - E4M3_SHIFT), 255) << 7" in source  # the factor built below
    asm, constraints, pack = asm_of(source, "_e4m3_scaled_bf16")
    assert constraints == "=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r" and pack == 8
    e4m3 = [float(torch.tensor([c], dtype=torch.uint8).view(torch.float8_e4m3fn).float()) for c in range(256)]
    rng = random.Random(11)
    # Every code with the scale bytes at the edges and the pack's range (114..140), then random.
    scales = [0, 1, 2, 62, 63, 64, 100, *range(114, 141), 193, 194, 195, 254, 255]
    cases = [(c * 0x0101010101010101, s) for c in range(256) for s in scales]
    cases += [(rng.getrandbits(64), rng.randrange(256)) for _ in range(2000)]
    for x, s in cases:
        t = min(s + 120 - shift, 255) << 7
        out = run_ptx(asm, {"$4": x & 0xFFFFFFFF, "$5": x >> 32, "$6": t | t << 16})
        for i in range(4):
            for half, code in ((0, (x >> (8 * i)) & 0xFF), (1, (x >> (8 * (i + 4))) & 0xFF)):
                got = (out[f"${i}"] >> (16 * half)) & 0xFFFF
                v = e4m3[code] if code & 0x7F != 0x7F else math.copysign(480.0, -1 if code & 0x80 else 1)
                if s == 0:  # byte 0 reads as 0.0: the product is +-0
                    assert got & 0x7FFF == 0, (hex(x), i, half, s)
                    continue
                if s == 0xFF or s > 194:  # no bf16 factor: a NaN tile's zeros read as NaN
                    assert bf16_value(got) != bf16_value(got) or math.isinf(bf16_value(got)), (hex(x), s)
                    continue
                want = v * 2.0 ** (s - 127 - shift)
                assert got == bf16_bits(want), (hex(x), i, half, code, s, hex(got))  # rounded as bf16 has it
                if s >= 63:  # scales of 2**-64 and more (the pack writes 2**-13 and more): exact
                    assert struct.pack("<f", bf16_value(got)) == struct.pack("<f", want), (hex(x), s)


def _wgmma(comp: str, win: str, splits: int = 0) -> Config:
    return wgmma_config(default_config(comp, win)).replace(NUM_SPLITS=splits)


def test_wgmma_space_fixes_its_parameters() -> None:
    sp = space("nvfp4_288", "fp8_528")
    assert sp.infeasible(_wgmma("nvfp4_288", "fp8_528")) is None
    assert _wgmma("nvfp4_288", "fp8_528")["num_warps"] == 4  # a config comes onto the path with one warpgroup
    assert sp.infeasible(_wgmma("nvfp4_288", "fp8_528").replace(num_warps=8)) is None  # or two
    assert "num_stages=1" in sp.infeasible(_wgmma("nvfp4_288", "fp8_528").replace(num_stages=2))
    assert "backend=soft" in sp.infeasible(_wgmma("nvfp4_288", "fp8_528").replace(backend="lut"))
    # fp8_584 (bf16 dims) is read too; beside fp8_528 two lists' stage buffers would not fit.
    assert space("fp8_584", "fp8_584").infeasible(_wgmma("fp8_584", "fp8_584")) is None
    assert "records" in space("fp8_528", "fp8_584").infeasible(_wgmma("fp8_528", "fp8_584"))
    assert FAMILY.variant_of(_wgmma("nvfp4_288", "fp8_528")) == "wgmma"
    # A search's sample of the path runs as the path's config, its split count kept; others as drawn.
    key = decode_key("nvfp4_288", "fp8_528", "sm_90")
    drawn = default_config("nvfp4_288", "fp8_528").replace(MMA="wgmma", BLOCK_N=16, LISTS="apart", PREFETCH=1,
                                                           backend="lut", num_stages=3, NUM_SPLITS=4, num_warps=4)
    assert FAMILY.canonical_config(key, drawn) == _wgmma("nvfp4_288", "fp8_528", 4)
    # Its warps are drawn too (one warpgroup or two): kept.
    assert FAMILY.canonical_config(key, drawn.replace(num_warps=8)) == _wgmma("nvfp4_288", "fp8_528", 4).replace(num_warps=8)
    assert sp.infeasible(FAMILY.canonical_config(key, drawn)) is None
    other = drawn.replace(MMA="keys_m")
    assert FAMILY.canonical_config(key, other) == other
    assert FAMILY.render(decode_key("nvfp4_288", "fp8_528", "sm_90"), _wgmma("nvfp4_288", "fp8_528")).template == "decode_wgmma.py.j2"


def test_wgmma_modules_include_the_merge_it_launches() -> None:
    # A bundle stores every module a config launches kernels of, since its warmup keys name each
    # kernel's module by hash: the wgmma path merges with the Triton module's decode_combine.
    from tuner.kernels.decode import _module

    key = decode_key("nvfp4_288", "fp8_528", "sm_90")
    cfg = _wgmma("nvfp4_288", "fp8_528")
    wg, merge = FAMILY.modules(key, cfg)
    assert wg == FAMILY.render(key, cfg) and "def decode_wgmma_kernel(" in wg.source
    assert "def decode_combine(" in merge.source
    # The launcher's merge module is that one (generated modules are named by their source hash).
    assert _module("nvfp4_288", "fp8_528", "soft").__name__.endswith(merge.source_hash)
    triton_cfg = default_config("nvfp4_288", "fp8_528")
    assert FAMILY.modules(key, triton_cfg) == [FAMILY.render(key, triton_cfg)]
    # A trial's time belongs to both sources: a stored wgmma trial goes stale when either changes,
    # a one-module config keeps its module's hash.
    from catalog.families.base import measured_hash
    from templates.render import source_hash

    assert measured_hash(FAMILY.modules(key, cfg)) == source_hash(f"{wg.source_hash}+{merge.source_hash}")
    assert measured_hash(FAMILY.modules(key, triton_cfg)) == FAMILY.render(key, triton_cfg).source_hash


def test_wgmma_plan_covers_every_tile_once() -> None:
    dev = torch.device("cpu")
    for splits, want in ((1, (1, 10)), (2, (2, 5)), (4, (4, 3)), (8, (5, 2)), (16, (10, 1)), (32, (10, 1))):
        parts, per = wgmma_plan(_wgmma("nvfp4_288", "fp8_528", splits), 1, 512, 128, dev)
        assert (parts, per) == want
        assert (parts - 1) * per < 10 <= parts * per  # no empty program, no tile left out
    assert wgmma_plan(_wgmma("nvfp4_288", "fp8_528"), 1, 40, 20, dev) == (2, 1)  # AUTO, 4 "SMs": at most the tiles
    # AUTO counts every head group's programs against the SMs: 4 "SMs", 2 groups -> 2 shares a group.
    assert wgmma_plan(_wgmma("nvfp4_288", "fp8_528"), 1, 512, 128, dev, head_groups=2) == (2, 5)
    # The register-producer build: two tiles a program at least (one a consumer warpgroup), and its two
    # partials a program within MAX_SPLITS (top-k 2048: 34 tiles, 12 programs of three).
    wsr = _wgmma("nvfp4_288", "fp8_528").replace(MMA="wgmma_wsr")
    for splits, want in ((1, (1, 10)), (4, (4, 3)), (8, (5, 2)), (32, (5, 2)), (0, (4, 3))):
        assert wgmma_plan(wsr.replace(NUM_SPLITS=splits), 1, 512, 128, dev) == want
    assert wgmma_plan(wsr.replace(NUM_SPLITS=32), 1, 2048, 128, dev) == (12, 3)


def test_wgmma_merge_in_kernel_only_where_the_grid_is_resident(monkeypatch: pytest.MonkeyPatch) -> None:
    # COMBINE=fused on the heads-on-N builds: each program waits for its token's others, so the
    # launch merges in the kernel only where every program is resident at once (no more programs
    # than SMs, one an SM) and a token's partials fit one block; else decode_combine merges.
    import tuner.kernels.decode.buffers as L

    monkeypatch.setattr(L, "sm_count", lambda device: 132)
    dev = torch.device("cpu")
    assert L.merge_fits(10, 10, dev) and L.merge_fits(2, 128, dev) and L.merge_fits(16, 132, dev)
    assert not L.merge_fits(1, 1, dev)  # one program a token: nothing to merge
    assert not L.merge_fits(2, 133, dev)  # a program could wait on one not yet resident
    assert not L.merge_fits(32, 32, dev)  # more partials than the merge's block
    # The path keeps COMBINE on the builds that merge themselves, fixes it on the others.
    for mma in ("wgmma", "wgmma_ws"):
        cfg = wgmma_config(default_config("nvfp4_288", "fp8_528").replace(MMA=mma, COMBINE="fused"))
        assert cfg["COMBINE"] == "fused" and space("nvfp4_288", "fp8_528").infeasible(cfg) is None
    hm = wgmma_config(default_config("fp8_584", "fp8_584").replace(MMA="wgmma_hmpv", COMBINE="fused"))
    assert hm["COMBINE"] == "kernel"
    # The register-producer build's programs write two partials each: decode_combine merges them, always.
    assert wgmma_config(default_config("nvfp4_288", "fp8_528").replace(MMA="wgmma_wsr", COMBINE="fused"))["COMBINE"] == "kernel"


def test_wgmma_heads_a_program_by_warps_and_shared_memory() -> None:
    from catalog.families.decode_wgmma import SM90_SHARED_MAX, WGMMA_SHARED_SLACK, wgmma_heads, wgmma_shared_bytes

    one, two = _wgmma("nvfp4_288", "fp8_528"), _wgmma("nvfp4_288", "fp8_528").replace(num_warps=8)
    pair = ("nvfp4_288", "fp8_528")
    assert [wgmma_heads(one, h, *pair) for h in (8, 16, 32, 64)] == [16, 16, 16, 16]
    assert [wgmma_heads(two, h, *pair) for h in (8, 16, 17, 64)] == [16, 16, 32, 32]
    # Lists of one record format take the stage buffers in turn: room for a 32-head query.
    assert wgmma_shared_bytes("fp8_528", "fp8_528", 32) < wgmma_shared_bytes("nvfp4_288", "fp8_528", 32)
    assert wgmma_heads(two, 64, "fp8_528", "fp8_528") == 32 and wgmma_heads(two, 64, "fp8_584", "fp8_584") == 32
    assert wgmma_heads(two, 64, "fp8_528", "nvfp4_288") == 32
    # fp8_584 beside fp8_528: two lists' stage buffers leave no room for 16 heads' query; not read.
    assert wgmma_shared_bytes("fp8_528", "fp8_584", 16) + WGMMA_SHARED_SLACK > SM90_SHARED_MAX
    assert not wgmma_reads("fp8_528", "fp8_584") and not wgmma_reads("fp8_584", "fp8_528")
    # The seeds of a search, in the order the recorded tunes picked them: the one-warpgroup build,
    # the warp-specialised one, past 32 heads the QK / PV split with PREFETCH=1, and where there
    # are more heads than 16 the two-warpgroup build and the merge in the kernel.
    ws = one.replace(MMA="wgmma_ws")
    hmpv = _wgmma(*pair).replace(MMA="wgmma_hmpv", PREFETCH=1)
    fused = one.replace(COMBINE="fused")
    assert FAMILY.seed_configs(decode_key(*pair, "sm_90", heads=16), "sm_90") == [one, ws]
    assert FAMILY.seed_configs(decode_key(*pair, "sm_90", heads=32), "sm_90") == [one, ws, two, fused]
    assert FAMILY.seed_configs(decode_key(*pair, "sm_90", heads=64), "sm_90") == [one, ws, hmpv, two, fused]
    assert FAMILY.seed_configs(decode_key(*pair, "gfx950", heads=64), "gfx950") == []


def test_past_64_heads_only_the_wgmma_path_runs(device: str) -> None:
    # Keys: 65..128 heads on sm_90 for the pairs the wgmma path reads; elsewhere refused with why.
    from catalog.keys import make_key

    key = make_key("decode", "sm_90", 128, 512, 128, formats=("nvfp4_288", "fp8_528"))
    for arch, fmts, heads in (("gfx950", ("nvfp4_288", "fp8_528"), 128), ("interp", ("nvfp4_288", "fp8_528"), 65),
                              ("sm_90", ("fp8_528", "fp8_584"), 128), ("sm_90", ("nvfp4_288", "fp8_528"), 129)):
        with pytest.raises(ValueError, match="1..64 local heads.*up to 128 on sm_90's wgmma path"):
            make_key("decode", arch, heads, 512, 128, formats=fmts)
    # Its space: the wgmma path is the default (two warpgroups), the Triton tile's configs infeasible.
    sp = FAMILY.space(key)
    d = sp.default()
    assert d == _wgmma("nvfp4_288", "fp8_528").replace(num_warps=8) and sp.infeasible(d) is None
    assert "at most 64 heads" in sp.infeasible(default_config("nvfp4_288", "fp8_528"))
    assert {c["MMA"] for c in sp.grid() if sp.infeasible(c) is None} == {"wgmma", "wgmma_hm", "wgmma_ws", "wgmma_hmws",
                                                                          "wgmma_hmpv", "wgmma_hmpvs", "wgmma_wss",
                                                                          "wgmma_hmpvc", "wgmma_wsr"}
    assert FAMILY.space(decode_key("nvfp4_288", "fp8_528", "sm_90", heads=64)).default() == default_config("nvfp4_288", "fp8_528")
    # A launch: a Triton config is refused before anything runs; the default goes to the wgmma
    # launcher (which runs on an sm_90 GPU only; there, test_wgmma_matches_reference_at_every_head_count).
    inp = make_decode_inputs("nvfp4_288", "fp8_528", 2, 128, 40, 20, device, seed=3)
    with pytest.raises(ValueError, match="at most 64 heads"):
        run_decode("nvfp4_288", "fp8_528", default_config("nvfp4_288", "fp8_528"), inp)
    if not _SM90:
        with pytest.raises(ValueError, match="wgmma"):
            run_decode("nvfp4_288", "fp8_528", sp.default(), inp)
    inp584 = make_decode_inputs("fp8_528", "fp8_584", 2, 65, 40, 20, device, seed=3)
    with pytest.raises(ValueError, match="wgmma path only"):
        run_decode("fp8_528", "fp8_584", None, inp584)


def test_wgmma_refused_where_it_cannot_run(device: str) -> None:
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("runs here (see test_wgmma_matches_reference_on_sm90)")
    inp = small_inputs("nvfp4_288", "fp8_528", device, sink=True)
    with pytest.raises(ValueError, match="wgmma"):
        run_decode("nvfp4_288", "fp8_528", _wgmma("nvfp4_288", "fp8_528"), inp)


def _sm90_static_profile(pair: tuple[str, str], cfg_text: str, predicted_shared: int, max_spills: int = 0,
                         cp_async: bool = True) -> dict[str, str]:
    """`benchmarks/static_profile.py` of one wgmma build, compiled on the CPU for sm_90 (in a
    process without TRITON_INTERPRET), checked as every wgmma build must be: no spills (or at most
    the `max_spills` bytes its H200 timings were taken with), at most 255 registers, shared memory
    from `predicted_shared` to that plus the compiler's slack (and within sm_90's opt-in limit),
    records by cp.async (LDGSTS; `cp_async=False`: by plain loads), MMAs by wgmma. Its row."""
    from catalog.families.decode_wgmma import SM90_SHARED_MAX, WGMMA_SHARED_SLACK

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "static_profile.py"
    out = subprocess.run([sys.executable, str(script), "decode", "--fmt", ",".join(pair), "--cfg", cfg_text, "--loops"],
                         env=env, capture_output=True, text=True, check=True).stdout
    summary, _, loop_table = out.partition("Innermost loops")
    rows = [r.split("|")[1:-1] for r in summary.splitlines() if r.startswith("| ")]
    got = dict(zip([c.strip() for c in rows[0]], [v.strip() for v in rows[-1]]))
    lrows = [[v.strip() for v in r.split("|")[1:-1]] for r in loop_table.splitlines() if r.startswith("| ")]
    got["loops"] = [dict(zip(lrows[0], r)) for r in lrows[1:]]  # type: ignore[assignment]
    assert got["config"] == cfg_text, out
    assert int(got["spills"]) <= max_spills and int(got["registers"]) <= 255, out
    assert predicted_shared <= int(got["shared_bytes"]) <= predicted_shared + WGMMA_SHARED_SLACK <= SM90_SHARED_MAX, \
        (predicted_shared, out)
    assert (int(got["cp.async"]) >= 8 if cp_async else int(got["ld.global"]) >= 8) and int(got["wgmma"]) > 0, out
    return got


@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")], ids=lambda p: "+".join(p))
def test_wgmma_kernel_fits_sm90_copies_records_async_and_does_not_spill(pair: tuple[str, str], warps: int) -> None:
    # Compiled on the CPU for sm_90 (benchmarks/static_profile.py, in a process without
    # TRITON_INTERPRET), with one warpgroup (16 heads) and two (the heads `wgmma_heads` gives them
    # at 64 heads): a launch needs its shared memory within the opt-in limit (the stage buffers of
    # two tiles a list take most of it; nvfp4_288 + fp8_528 is the largest pair read), as
    # `wgmma_shared_bytes` predicts it, the records travel by cp.async (LDGSTS), and the
    # registers hold without spilling, as the H200 timings in
    # benchmarks/results/decode_cp_async.md assume.
    from catalog.families.decode_wgmma import wgmma_heads, wgmma_shared_bytes

    hb = wgmma_heads(_wgmma(*pair).replace(num_warps=warps), 64, *pair)
    _sm90_static_profile(pair, "MMA=wgmma" + (f",num_warps={warps}" if warps != 4 else ""),
                         wgmma_shared_bytes(*pair, hb))


def test_wgmma_heads_on_m_is_a_build_of_the_space_where_it_reads_the_pair(device: str) -> None:
    # MMA=wgmma_hm: every pair the wgmma path reads (the V4.1 pair's lists in one stage region),
    # two warpgroups, the path's fixed parameters; the tuner seeds its QK / PV split past 32 heads (not it); a launch
    # refuses it off sm_90.
    from catalog.families.decode import SPEC, decode_key
    from catalog.families.decode_wgmma import WGMMA_HM_WARPS

    hm = wgmma_config(default_config("fp8_584", "fp8_584").replace(MMA="wgmma_hm"))
    assert hm["MMA"] == "wgmma_hm" and hm["num_warps"] == WGMMA_HM_WARPS and hm["BLOCK_N"] == 64
    assert wgmma_config(hm.replace(num_warps=4)) == hm  # the build's warps are fixed
    v41 = wgmma_config(default_config("nvfp4_288", "fp8_528").replace(MMA="wgmma_hm"))
    for heads in (16, 64, 128):
        assert space("fp8_584", "fp8_584", heads).infeasible(hm) is None
        assert space("nvfp4_288", "fp8_528", heads).infeasible(v41) is None
        assert space("fp8_528", "nvfp4_288", heads).infeasible(v41) is None
    assert "num_warps=8" in space("fp8_584", "fp8_584").infeasible(hm.replace(num_warps=4))
    assert SPEC.canonical_config(decode_key("fp8_584", "fp8_584", "sm_90", 64), hm.replace(num_warps=4)) == hm
    assert SPEC.variant_of(hm) == "wgmma" and SPEC.render(decode_key("fp8_584", "fp8_584", "sm_90", 64), hm).source
    seeds = {h: [c["MMA"] for c in SPEC.seed_configs(decode_key("fp8_584", "fp8_584", "sm_90", h), "sm_90")]
             for h in (16, 32, 64, 128)}
    past32 = ["wgmma", "wgmma_ws", "wgmma_hmpv", "wgmma", "wgmma"]  # wgmma_hm itself is left to the search
    assert seeds == {16: ["wgmma", "wgmma_ws"], 32: ["wgmma", "wgmma_ws", "wgmma", "wgmma"], 64: past32, 128: past32}
    assert [c["MMA"] for c in SPEC.seed_configs(decode_key("nvfp4_288", "fp8_528", "sm_90", 64), "sm_90")] == past32
    assert SPEC.seed_configs(decode_key("fp8_584", "fp8_584", "gfx950", 64), "gfx950") == []

    if not _SM90:
        for pair, cfg in ((("fp8_584", "fp8_584"), hm), (("nvfp4_288", "fp8_528"), v41)):
            inp = make_decode_inputs(*pair, 2, 64, 40, 20, device, seed=3)
            with pytest.raises(ValueError, match="wgmma"):
                run_decode(*pair, cfg, inp)


@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")], ids=lambda p: "+".join(p))
def test_wgmma_heads_on_m_build_fits_sm90_and_does_not_spill(pair: tuple[str, str]) -> None:
    # The heads-on-M build (decode_wgmma_hm_kernel: 64 heads a program, two warpgroups),
    # compiled on the CPU for sm_90 as test_wgmma_kernel_fits_sm90... does: within the registers
    # and the opt-in shared memory, as `wgmma_hm_shared_bytes` predicts it, records by cp.async.
    # The V4 record pair (241 registers, 221696 bytes) and the V4.1 pair, its two lists in one
    # stage region (241 registers, 215552 bytes; static, 2026-12-04). fp8_584 beside fp8_528 is
    # no pair of the wgmma path (its 16-head buffers exceed the limit), so of no build of it.
    from catalog.families.decode_wgmma import wgmma_hm_reads, wgmma_hm_shared_bytes

    assert wgmma_hm_reads(*pair) and wgmma_hm_reads("fp8_528", "fp8_528") and not wgmma_hm_reads("fp8_584", "fp8_528")
    _sm90_static_profile(pair, "MMA=wgmma_hm", wgmma_hm_shared_bytes(*pair))


@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")], ids=lambda p: "+".join(p))
def test_wgmma_hmws_build_fits_sm90(pair: tuple[str, str]) -> None:
    # The heads-on-M warp-specialised build (decode_wgmma_hmws_kernel: the heads-on-M consumer at
    # 192 registers, a producer warpgroup at 128 loading records into registers), compiled on the
    # CPU for sm_90: two K tiles, the 64-head query and P, as `wgmma_hmws_shared_bytes` predicts
    # (no stage buffers, so no cp.async), no spills in the V4.1 pair, and no L2 prefetch without
    # PREFETCH. The V4 pair's consumer spills 32 bytes again since the 16-instruction e4m3
    # conversion (none in its producer; static, 2026-12-05), with which it timed 54.4 us at 128 heads
    # T=64 against 55.6-56.3 before (decode_hm_producer8_ab_h200.md's base, decode_hm_prefetch2_h200.md).
    from catalog.families.decode_wgmma import wgmma_hmws_shared_bytes

    got = _sm90_static_profile(pair, "MMA=wgmma_hmws", wgmma_hmws_shared_bytes(),
                               max_spills=32 if pair == ("fp8_584", "fp8_584") else 0, cp_async=False)
    assert int(got["prefetch"]) == 0, got
    # static_profile --loops: each partition's tile loop; the producer's (one a list) loads the
    # records and stores K, with no MMA, the consumer's runs the MMAs; no spill in either.
    roles = [lp["role"] for lp in got["loops"]]
    producers = [lp for lp in got["loops"] if lp["role"] == "producer"]
    assert "mma" in roles and len(producers) == 2, got["loops"]
    assert all(int(lp["ld.global"]) >= 8 and int(lp["st.shared"]) >= 8 and int(lp["wgmma"]) == 0
               and int(lp.get("local (spill)", 0)) == 0 for lp in producers), producers


@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")], ids=lambda p: "+".join(p))
def test_wgmma_hmpv_build_fits_sm90(pair: tuple[str, str]) -> None:
    # The QK / PV split (decode_wgmma_hmpv_kernel: a QK warpgroup at 216 registers, a PV one at
    # 160, the producer at 128), compiled on the CPU for sm_90: P double-buffered beside the two K
    # tiles and the query, as `wgmma_hmpv_shared_bytes` predicts. Spills: the V4 pair 38 bytes,
    # the V4.1 pair none (static, 2026-12-05; O stored through the K tiles' shared memory: through
    # convert_layout 340 and 256, 3-9% slower on the H200: results/decode_hmpv_store_smem_ab_h200.md).
    # Seeded past 32 heads with PREFETCH=1 since its GPU tests
    # (test_wgmma_heads_on_m_matches_reference_on_sm90) passed (2026-12-05).
    from catalog.families.decode import SPEC, decode_key
    from catalog.families.decode_wgmma import wgmma_hmpv_shared_bytes

    _sm90_static_profile(pair, "MMA=wgmma_hmpv", wgmma_hmpv_shared_bytes(),
                         max_spills=38 if pair == ("fp8_584", "fp8_584") else 0, cp_async=False)
    assert [(c["MMA"], c["PREFETCH"]) for c in SPEC.seed_configs(decode_key(*pair, "sm_90", 128), "sm_90")
            if c["MMA"] == "wgmma_hmpv"] == [("wgmma_hmpv", 1)]
    hmpv = wgmma_config(default_config(*pair).replace(MMA="wgmma_hmpv"))
    assert hmpv["num_warps"] == 4 and space(*pair, 128).infeasible(hmpv) is None


@pytest.mark.parametrize("build, base, heads_ok, heads_not, max_spills", [
    ("wgmma_hmpvs,PREFETCH=1", "wgmma_hmpv,PREFETCH=1", (65, 96, 128), (16, 64), 24),
    ("wgmma_wss", "wgmma_ws", (17, 32, 64, 128), (8, 16), 0)], ids=["hmpvs", "wss"])
def test_shared_tile_builds_take_two_head_groups_or_more_and_build_for_sm90(build: str, base: str,
                                                                            heads_ok: tuple[int, ...],
                                                                            heads_not: tuple[int, ...],
                                                                            max_spills: int) -> None:
    # The builds converting each tile once for all head groups (WGMMA_SHARE_MMAS: the QK / PV
    # split's, 65-128 heads, and the warp-specialised one's, past 16): only where a launch has two
    # groups or more, not seeded (no GPU run yet); compiled on the CPU for sm_90 each keeps its
    # base build's registers and shared memory, its producer loops storing the converted tiles
    # (st.global) and copying the others' (cp.async); spills: the split's up to 24 bytes (its base
    # none since fp8_584's record bytes are loaded unmasked, 50 before), the warp-specialised one's none.
    from catalog.families.decode import SPEC, decode_key
    from catalog.families.decode_wgmma import wgmma_hmpv_shared_bytes, wgmma_ws_shared_bytes

    pair = ("fp8_584", "fp8_584")
    mma, _, prefetch = build.partition(",PREFETCH=")
    cfg = wgmma_config(default_config(*pair).replace(MMA=mma, PREFETCH=int(prefetch or 0)))
    assert cfg["num_warps"] == 4
    for heads in heads_ok:
        assert space(*pair, heads).infeasible(cfg) is None, heads
    for heads in heads_not:
        assert "tiles are shared between" in (space(*pair, heads).infeasible(cfg) or ""), heads
    assert all(c["MMA"] != mma for c in SPEC.seed_configs(decode_key(*pair, "sm_90", 128), "sm_90"))
    shared = wgmma_hmpv_shared_bytes() if mma == "wgmma_hmpvs" else wgmma_ws_shared_bytes(*pair)
    got = _sm90_static_profile(pair, f"MMA={build}", shared, max_spills=max_spills)
    was = _sm90_static_profile(pair, f"MMA={base}", shared, max_spills=max_spills, cp_async=mma != "wgmma_hmpvs")
    assert got["registers"] == was["registers"]
    producers = [lp for lp in got["loops"] if lp["role"] == "producer"]  # type: ignore[union-attr]
    assert len(producers) == 2 and all(int(lp["cp.async"]) > 0 and int(lp["st.global"]) > 0 for lp in producers)


def test_shared_tiles_grow_and_keep_the_buffers_graphs_captured() -> None:
    # The shared-tile builds' buffers: reused while they hold the launch's tiles; a larger launch
    # gets new ones (zeroed words: every tile's counter and ready word start together), the old
    # stay; launches of another head-group count never share a launch's words.
    from tuner.kernels.decode.buffers import _SHARED_TILES, shared_tiles

    dev = torch.device("cpu")
    for g in (2, 8):
        _SHARED_TILES.pop((dev, g), None)
    ws, cnt, rdy = shared_tiles(10, 2, dev)
    assert ws.shape == (10, 4 * 64 * 128) and ws.dtype == torch.bfloat16 and cnt.shape == rdy.shape == (10,)
    cnt += 3
    assert shared_tiles(4, 2, dev)[1] is cnt
    assert int(shared_tiles(4, 8, dev)[1].abs().sum()) == 0 and shared_tiles(4, 8, dev)[1] is not cnt
    ws2, cnt2, rdy2 = shared_tiles(11, 2, dev)
    assert cnt2.shape == (20,) and int(cnt2.abs().sum()) == 0 and int(rdy2.abs().sum()) == 0
    assert len(_SHARED_TILES[(dev, 2)]) == 2 and _SHARED_TILES[(dev, 2)][0][1] is cnt
    for g in (2, 8):
        _SHARED_TILES.pop((dev, g))


@pytest.mark.parametrize("pair, mma, max_spills", [(("fp8_584", "fp8_584"), "wgmma_hmws", 8),
                                                    (("nvfp4_288", "fp8_528"), "wgmma_hmpv", 0),
                                                    (("nvfp4_288", "fp8_528"), "wgmma_ws", 0)],
                         ids=["fp8_584+fp8_584-hmws", "nvfp4_288+fp8_528-hmpv", "nvfp4_288+fp8_528-ws"])
def test_wgmma_producer_prefetches_records_into_l2_with_prefetch(pair: tuple[str, str], mma: str,
                                                                 max_spills: int) -> None:
    # PREFETCH=1 on the warp-specialised builds (WGMMA_PREFETCH_MMAS): compiled on the CPU for
    # sm_90, the same buffers, the L2 prefetches in the binary (CCTL.E.PF2: a tile further ahead
    # than the producer's loads or copies, each loop trip, and at the start the tiles no trip
    # reaches), within the bytes of spills counted since the fp8_584 tail's bf16 dims are fetched
    # in the e4m3 tail's layout (2026-12-06: the V4 pair's heads-on-M build 40, 12 before: its
    # producer loops 40 SASS a tile shorter, and the build is no tuned pick; 44 since its K chunks
    # are allocations of their own, decode_hm_chunk_allocs, 2026-12-07; 8 since fp8_584's record
    # bytes are loaded unmasked, the same day; the V4.1 pair's QK / PV split none: see
    # test_wgmma_hmpv_build_fits_sm90). PREFETCH is an axis of these builds alone (the
    # wgmma path fixes it at 0 elsewhere); seeded past 32 heads on the QK / PV split alone.
    from catalog.families.decode import SPEC, decode_key
    from catalog.families.decode_wgmma import (WGMMA_MMAS, WGMMA_PREFETCH_MMAS, wgmma_hmpv_shared_bytes,
                                               wgmma_hmws_shared_bytes, wgmma_ws_shared_bytes)

    predicted = {"wgmma_hmws": wgmma_hmws_shared_bytes(), "wgmma_hmpv": wgmma_hmpv_shared_bytes(),
                 "wgmma_ws": wgmma_ws_shared_bytes(*pair)}[mma]
    got = _sm90_static_profile(pair, f"MMA={mma},PREFETCH=1", predicted, max_spills=max_spills,
                               cp_async=mma == "wgmma_ws")
    assert int(got["prefetch"]) >= 8, got
    sp = space(*pair, 128)
    for m in WGMMA_MMAS:
        cfg = wgmma_config(default_config(*pair).replace(MMA=m, PREFETCH=1))
        assert cfg["PREFETCH"] == (1 if m in WGMMA_PREFETCH_MMAS else 0) and sp.infeasible(cfg) is None, m
        assert sp.infeasible(cfg.replace(PREFETCH=1 - cfg["PREFETCH"])) == (
            None if m in WGMMA_PREFETCH_MMAS else "the wgmma path runs PREFETCH=0"), m
    assert [(c["MMA"], c["PREFETCH"]) for c in SPEC.seed_configs(decode_key(*pair, "sm_90", 128), "sm_90")
            if c["PREFETCH"]] == [("wgmma_hmpv", 1)]


def test_wgmma_ws_is_a_build_of_the_space_where_it_reads_the_pair(device: str) -> None:
    # MMA=wgmma_ws: one consumer warpgroup (its warps fixed at 4), the path's fixed parameters;
    # every issue pair (a mixed one shares one region of stage rows), seeded last; refused where
    # its buffers exceed sm_90's shared memory, and off sm_90.
    from catalog.families.decode import SPEC
    from catalog.families.decode_wgmma import (SM90_SHARED_MAX, WGMMA_SHARED_SLACK, WGMMA_WS_WARPS,
                                               wgmma_shared_bytes, wgmma_ws_reads, wgmma_ws_shared_bytes)

    ws = wgmma_config(default_config("fp8_584", "fp8_584").replace(MMA="wgmma_ws"))
    assert ws["MMA"] == "wgmma_ws" and ws["num_warps"] == WGMMA_WS_WARPS and ws["BLOCK_N"] == 64
    assert wgmma_config(ws.replace(num_warps=8)) == ws
    for pair in (("fp8_584", "fp8_584"), ("fp8_528", "fp8_528"), ("nvfp4_288", "nvfp4_288"),
                 ("nvfp4_288", "fp8_528"), ("fp8_528", "nvfp4_288")):
        assert wgmma_ws_reads(*pair) and space(*pair).infeasible(wgmma_config(default_config(*pair).replace(
            MMA="wgmma_ws"))) is None, pair
        assert wgmma_ws_shared_bytes(*pair) + WGMMA_SHARED_SLACK <= SM90_SHARED_MAX
        assert "wgmma_ws" in [c["MMA"] for c in SPEC.seed_configs(decode_key(*pair, "sm_90"), "sm_90")], pair
        if pair[0] == pair[1]:
            # One format: a second tile's four bf16 K chunks beside the one-warpgroup build's buffers.
            assert wgmma_ws_shared_bytes(*pair) == wgmma_shared_bytes(*pair, 16) + 4 * 64 * 128 * 2 + 64
    # Two formats: one region of two tiles' 128-byte rows for both lists' data, each list's side
    # rows (nvfp4_288's at a doubled stage index), instead of the one-warpgroup build's two lists.
    assert wgmma_ws_shared_bytes("nvfp4_288", "fp8_528") == \
        2 * 4 * 64 * 128 * 2 + 16 * 64 * 2 + 4 * 16 * 128 * 2 + 8 * 64 * 128 + 2 * 64 * (2 * 32 + 16) + 64
    assert not wgmma_ws_reads("nvfp4_288", "fp8_584")  # 64 KiB of data rows and fp8_584's 128-byte side rows: too big
    assert "shared memory" in space("nvfp4_288", "fp8_584").infeasible(
        wgmma_config(default_config("nvfp4_288", "fp8_584").replace(MMA="wgmma_ws")))
    assert "num_warps=4" in space("fp8_584", "fp8_584").infeasible(ws.replace(num_warps=8))
    for pair in (("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")):
        assert SPEC.variant_of(ws) == "wgmma" and "decode_wgmma_ws_kernel" in SPEC.render(
            decode_key(*pair, "sm_90"), wgmma_config(default_config(*pair).replace(MMA="wgmma_ws"))).source
    if not _SM90:
        inp = make_decode_inputs("fp8_584", "fp8_584", 2, 16, 40, 20, device, seed=3)
        with pytest.raises(ValueError, match="wgmma"):
            run_decode("fp8_584", "fp8_584", ws, inp)


@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")], ids=lambda p: "+".join(p))
def test_wgmma_ws_build_fits_sm90_and_does_not_spill(pair: tuple[str, str]) -> None:
    # The warp-specialised build, compiled on the CPU for sm_90: no spills in either partition
    # (12 warps of 168 registers at launch; setmaxnreg gives the 8 producer warps 152 and the
    # consumer warpgroup 200), shared memory as `wgmma_ws_shared_bytes` predicts it (2026-12-04:
    # the V4 pair 231976 bytes of 232448, the V4.1 pair 225832), records by cp.async, MMAs by wgmma.
    from catalog.families.decode_wgmma import wgmma_ws_shared_bytes

    got = _sm90_static_profile(pair, "MMA=wgmma_ws", wgmma_ws_shared_bytes(*pair))
    assert int(got["prefetch"]) == 0, got  # none without PREFETCH


def test_wgmma_heads_on_m_unsplit_build_compiles_for_sm90() -> None:
    # NUM_SPLITS=1 on the heads-on-M build writes o and lse from its own epilogue branch (heads on
    # the rows of O), which no split launch compiles: cross-compiled here (2026-12-07: an edit meant
    # for the heads-on-N epilogue reached it and only a GPU run would have failed).
    # (In a process without TRITON_INTERPRET, as _sm90_static_profile compiles.)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from tuner.compile import _request, compile_with_stats; "
            "from tuner.kernels.decode.xcompile import wgmma_case; from catalog.formats import get_format; "
            "f = get_format('fp8_584'); case = wgmma_case(f, f, split=False, heads=64, warps=8, heads_on_m=True); "
            "assert case.constexprs['SPLIT'] is False; "
            "print(json.dumps(compile_with_stats(_request(case, 'sm_90'))[1]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["spills"] == 0 and stats["registers"] <= 255, stats


_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("prefetch", [0, 1], ids=["", "prefetch"])
@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("fp8_528", "fp8_528"), ("nvfp4_288", "nvfp4_288"),
                                  ("nvfp4_288", "fp8_528"), ("fp8_528", "nvfp4_288")], ids=lambda p: "+".join(p))
def test_wgmma_ws_matches_reference_on_sm90(pair: tuple[str, str], prefetch: int) -> None:
    """The warp-specialised build (MMA=wgmma_ws; with PREFETCH=1 its L2 prefetch, not yet run on a
    GPU on 2026-12-05) at 16, 24 and 64 heads, T = 1, 8, 64, one program a token and several
    (programs of one tile to all of a token's), with and without sink, a token whose lists are all
    -1, ragged -1 slots; then an odd shape with pages of 16 and 8, and of 48 and 24. Outputs
    poisoned before each run, checked against the float64 reference."""
    comp, win = pair
    ws = wgmma_config(default_config(comp, win).replace(MMA="wgmma_ws", PREFETCH=prefetch))
    for heads in (16, 24, 64):
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            inp["window_idx"][t // 2] = -1
            inp["topk_idx"][0, 100:140] = -1
            for splits, sink in ((0, True), (1, False), (4, True), (16, False)):
                i = inp if sink else {**inp, "attn_sink": None}
                poison(i)
                out = run_decode(comp, win, ws.replace(NUM_SPLITS=splits), i)
                why = verify_decode(comp, win, i, out)
                assert why is None, (heads, t, splits, sink, why)
                assert bool((out[0][t // 2] == 0).all()) and bool(torch.isneginf(out[1][t // 2]).all())
    for page, win_page in ((16, 8), (48, 24)):
        inp = make_decode_inputs(comp, win, 3, 12, 40, 20, "cuda", 7, page_size=page, win_page_size=win_page)
        inp["topk_idx"][1] = -1
        inp["window_idx"][1] = -1
        for splits in (0, 1, 2):
            poison(inp)
            assert verify_decode(comp, win, inp, run_decode(comp, win, ws.replace(NUM_SPLITS=splits), inp)) is None, page


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584"), ("fp8_528", "nvfp4_288"),
                                  ("nvfp4_288", "nvfp4_288")], ids=lambda p: "+".join(p))
def test_wgmma_wsr_matches_reference_on_sm90(pair: tuple[str, str]) -> None:
    """The register-producer build (MMA=wgmma_wsr: two producer warpgroups and two consumer
    warpgroups taking the tiles in turn, three K buffers, a partial a consumer) at 16, 24 and 64
    heads, T = 1, 8, 64, split counts auto, 1, 4 (programs of 3 tiles and of 1: a program's last
    tile on either warpgroup) and 16, sink on and off, a token whose lists are all -1 and ragged -1
    slots, outputs poisoned first; checked against the float64 reference and against the ws build
    (to fp32 rounding: the partials merge in another order); replayed from a CUDA graph; then pages
    of 16 and 8 and of 48 and 24."""
    comp, win = pair
    ws = wgmma_config(default_config(comp, win).replace(MMA="wgmma_ws"))
    wsr = ws.replace(MMA="wgmma_wsr")
    for heads in (16, 24, 64):
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            inp["window_idx"][t // 2] = -1
            inp["topk_idx"][0, 100:140] = -1
            for splits, sink in ((0, True), (1, False), (4, True), (16, False)):
                i = inp if sink else {**inp, "attn_sink": None}
                want = run_decode(comp, win, ws.replace(NUM_SPLITS=splits), i)
                want = (want[0].clone(), want[1].clone())
                poison(i)
                got = run_decode(comp, win, wsr.replace(NUM_SPLITS=splits), i)
                assert verify_decode(comp, win, i, got) is None, (heads, t, splits, sink)
                torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
                assert bool((got[0][t // 2] == 0).all()) and bool(torch.isneginf(got[1][t // 2]).all())
    _replays_bit_for_bit(comp, win, inp, wsr.replace(NUM_SPLITS=4))
    for page, win_page in ((16, 8), (48, 24)):
        inp = make_decode_inputs(comp, win, 3, 12, 40, 20, "cuda", 7, page_size=page, win_page_size=win_page)
        inp["topk_idx"][1] = -1
        inp["window_idx"][1] = -1
        for splits in (0, 1, 2):
            poison(inp)
            assert verify_decode(comp, win, inp, run_decode(comp, win, wsr.replace(NUM_SPLITS=splits), inp)) is None, page


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_528", "nvfp4_288"), ("fp8_528", "fp8_528"),
                                  ("fp8_584", "fp8_584")], ids=lambda p: "+".join(p))
def test_wgmma_matches_reference_on_sm90(pair: tuple[str, str]) -> None:
    """The seed shape (16 heads, top-k 512, window 128, page 64) at T = 1..64, every split count,
    with and without sink, ragged -1 slots and a token whose lists are all -1; then a small odd
    shape (12 heads, lists of 40 and 20) with pages of 16 and 8, then 48 and 24 records. Outputs
    poisoned before each run."""
    comp, win = pair
    for t in (1, 2, 4, 8, 16, 32, 64):
        inp = make_decode_inputs(comp, win, t, 16, 512, 128, "cuda", seed=t)
        inp["topk_idx"][t // 2] = -1
        inp["window_idx"][t // 2] = -1
        for splits in (0, 1, 2, 4, 8, 16):
            for sink in (True, False):
                i = inp if sink else {**inp, "attn_sink": None}
                poison(i)
                out = run_decode(comp, win, _wgmma(comp, win, splits), i)
                assert verify_decode(comp, win, i, out) is None, (t, splits, sink, verify_decode(comp, win, i, out))
                assert bool((out[0][t // 2] == 0).all()) and bool(torch.isneginf(out[1][t // 2]).all())
    # Pages of 16 and 8 records (shifts), then of 48 and 24 (divisions).
    for page, win_page in ((16, 8), (48, 24)):
        inp = make_decode_inputs(comp, win, 3, 12, 40, 20, "cuda", 7, page_size=page, win_page_size=win_page)
        inp["topk_idx"][1] = -1
        inp["window_idx"][1] = -1
        for splits in (0, 1, 2):
            poison(inp)
            assert verify_decode(comp, win, inp, run_decode(comp, win, _wgmma(comp, win, splits), inp)) is None, page


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("mma", ["wgmma_hm", "wgmma_hmws", "wgmma_hmpv", "wgmma_hmws+prefetch",
                                 "wgmma_hmpv+prefetch"])
@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("fp8_528", "fp8_528"), ("nvfp4_288", "fp8_528"),
                                  ("fp8_528", "nvfp4_288")], ids=lambda p: "+".join(p))
def test_wgmma_heads_on_m_matches_reference_on_sm90(pair: tuple[str, str], mma: str) -> None:
    """The heads-on-M builds (MMA=wgmma_hm, wgmma_hmws: its warp-specialised one, and wgmma_hmpv:
    that with the QK / PV split, the last not yet run on a GPU on 2026-12-05; "+prefetch": with
    PREFETCH=1, the producer's L2 prefetch) at 16, 24, 64 and 128 heads (one group of 64 padded,
    and two), T = 1, 8, 64, one program a token and several, with and without sink, a token whose
    lists are all -1; then an odd shape with pages of 16 and 8. Outputs checked against the
    float64 reference."""
    comp, win = pair
    build, _, prefetch = mma.partition("+")
    hm = wgmma_config(default_config(comp, win).replace(MMA=build, PREFETCH=int(bool(prefetch))))
    for heads in (16, 24, 64, 128):
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            inp["window_idx"][t // 2] = -1
            for splits, sink in ((0, True), (4, False), (1, t == 8)):
                i = inp if sink else {**inp, "attn_sink": None}
                poison(i)
                out = run_decode(comp, win, hm.replace(NUM_SPLITS=splits), i)
                why = verify_decode(comp, win, i, out)
                assert why is None, (heads, t, splits, sink, why)
                assert bool((out[0][t // 2] == 0).all()) and bool(torch.isneginf(out[1][t // 2]).all())
    inp = make_decode_inputs(comp, win, 3, 12, 40, 20, "cuda", 7, page_size=16, win_page_size=8)
    for splits in (0, 1, 2):
        poison(inp)
        assert verify_decode(comp, win, inp, run_decode(comp, win, hm.replace(NUM_SPLITS=splits), inp)) is None, splits


def _replays_bit_for_bit(comp: str, win: str, inp: dict, cfg: Config) -> None:
    """`cfg` captured in a CUDA graph, replayed three times into zeroed outputs: each replay gives
    the eager launch's outputs bit for bit."""
    o, lse = torch.empty_like(inp["out"][0]), torch.empty_like(inp["out"][1])
    args = (inp["q"], inp["comp_cache"], comp, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"])
    kw = dict(page_size=inp["page_size"], sm_scale=inp["sm_scale"], attn_sink=inp["attn_sink"], config=cfg,
              win_page_size=inp["win_page_size"], out=(o, lse))
    want = decode(*args, **kw)
    want = (want[0].clone(), want[1].clone())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decode(*args, **kw)
    for _ in range(3):
        o.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(o, want[0]) and torch.equal(lse, want[1])


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("build, base, head_counts", [("wgmma_hmpvs", "wgmma_hmpv", (96, 128)),
                                                      ("wgmma_wss", "wgmma_ws", (32, 72, 128))], ids=["hmpvs", "wss"])
@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")], ids=lambda p: "+".join(p))
def test_shared_tile_builds_match_their_base_bit_for_bit_on_sm90(pair: tuple[str, str], build: str, base: str,
                                                                   head_counts: tuple[int, ...]) -> None:
    """The builds converting each tile once for all head groups (MMA=wgmma_hmpvs, wgmma_wss: one
    group converts it, the others copy it) give their base build's outputs bit for bit: the copy is
    the conversion's bytes. At two head groups and more (one part-filled), T = 1, 8, 64, splits auto,
    4 and 1, sink on and off, launched three times (the counters and ready words go on growing), then
    replayed from a CUDA graph; and checked against the float64 reference."""
    comp, win = pair
    split = wgmma_config(default_config(comp, win).replace(MMA=base, PREFETCH=1))
    shared = split.replace(MMA=build)
    for heads in head_counts:
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            for splits, sink in ((0, True), (4, False), (1, True)):
                i = inp if sink else {**inp, "attn_sink": None}
                want = run_decode(comp, win, split.replace(NUM_SPLITS=splits), i)
                for _ in range(3):
                    poison(i)
                    got = run_decode(comp, win, shared.replace(NUM_SPLITS=splits), i)
                    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (heads, t, splits, sink)
                assert verify_decode(comp, win, i, got) is None, (heads, t, splits, sink)
    _replays_bit_for_bit(comp, win, inp, shared.replace(NUM_SPLITS=4))


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")], ids=lambda p: "+".join(p))
def test_wgmma_takes_list_lengths_on_sm90(pair: tuple[str, str]) -> None:
    # FlashMLA's topk_length on the wgmma path: the same outputs as the lists with the slots past
    # each sequence's lengths set to -1 (lengths of 0, inside and past the lists), one program a
    # token and several, one warpgroup and two.
    comp, win = pair
    inp = make_decode_inputs(comp, win, 4, 32, 512, 128, "cuda", 13)
    comp_lens = torch.tensor([200, 0], dtype=torch.int32, device="cuda")  # sequences of 2 tokens each
    win_lens = torch.tensor([7, 999], dtype=torch.int32, device="cuda")
    args = (inp["q"], inp["comp_cache"], comp)
    for splits, warps in ((0, 4), (1, 8), (4, 8)):
        kw = dict(page_size=inp["page_size"], sm_scale=inp["sm_scale"], attn_sink=inp["attn_sink"],
                  config=_wgmma(comp, win, splits).replace(num_warps=warps), win_page_size=inp["win_page_size"])
        want = decode(*args, masked_past(inp["topk_idx"], comp_lens, 2), inp["win_cache"], win,
                      masked_past(inp["window_idx"], win_lens, 2), **kw)
        got = decode(*args, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"], **kw,
                     topk_lens=comp_lens, window_lens=win_lens, seq_tokens=2)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (splits, warps)
        assert bool(torch.isfinite(want[1][0]).all()) and not torch.equal(want[0], decode(
            *args, inp["topk_idx"], inp["win_cache"], win, inp["window_idx"], **kw)[0])  # the lengths did something


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("warps", [4, 8])
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_528", "fp8_528"), ("fp8_584", "fp8_584")],
                         ids=lambda p: "+".join(p))
def test_wgmma_matches_reference_at_every_head_count_on_sm90(pair: tuple[str, str], warps: int) -> None:
    """Head counts an engine runs besides the seed's 16 (8, 32, 64, 128, and an odd 24), with one
    warpgroup (groups of 16 heads) and two (groups of 32): T = 1, 8, 64, one program a token and several, with and
    without sink, a token whose lists are all -1. Outputs poisoned before each run."""
    comp, win = pair
    for heads in (8, 24, 32, 64, 128):
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            inp["window_idx"][t // 2] = -1
            for splits, sink in ((0, True), (4, False), (1, t == 8)):  # each split build with and without sink
                i = inp if sink else {**inp, "attn_sink": None}
                poison(i)
                out = run_decode(comp, win, _wgmma(comp, win, splits).replace(num_warps=warps), i)
                why = verify_decode(comp, win, i, out)
                assert why is None, (heads, t, splits, sink, why)
                assert bool((out[0][t // 2] == 0).all()) and bool(torch.isneginf(out[1][t // 2]).all())


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("build", [("wgmma", 4), ("wgmma", 8), ("wgmma_ws", 4)], ids=lambda b: f"{b[0]}-{b[1]}w")
@pytest.mark.parametrize("pair", [("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")], ids=lambda p: "+".join(p))
def test_wgmma_merge_in_kernel_matches_the_merge_kernel_on_sm90(pair: tuple[str, str], build: tuple[str, int]) -> None:
    """COMBINE=fused on the heads-on-N builds: a token's programs merge their partials themselves
    (arrive, wait for the others, each a slice of D). At 16, 24 and 128 heads, T = 1, 8, 64, splits
    auto / 4 / 16 (where the grid outgrows the SMs or a token has more than 16 partials the launch
    falls back to decode_combine: checked too), sink on and off, a token whose lists are all -1:
    outputs poisoned, then within a bf16 step of the merge kernel's and checked against the float64
    reference; the arrival counts left zero after every launch; the same launch replayed three
    times from a CUDA graph."""
    from tuner.kernels.decode.launch import merge_fits, wgmma_program_heads

    comp, win = pair
    mma, warps = build
    kernel = wgmma_config(default_config(comp, win).replace(MMA=mma)).replace(num_warps=warps)
    fused = kernel.replace(COMBINE="fused")
    merged_in_kernel = 0
    for heads in (16, 24, 128):
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            inp["window_idx"][t // 2] = -1
            for splits, sink in ((0, True), (4, False), (16, t == 1)):
                i = inp if sink else {**inp, "attn_sink": None}
                want = run_decode(comp, win, kernel.replace(NUM_SPLITS=splits), i)
                want = (want[0].clone(), want[1].clone())
                poison(i)
                got = run_decode(comp, win, fused.replace(NUM_SPLITS=splits), i)
                where = (heads, t, splits, sink)
                assert verify_decode(comp, win, i, got) is None, (where, verify_decode(comp, win, i, got))
                assert torch.allclose(got[0].float(), want[0].float(), rtol=2 ** -7, atol=1e-6), where
                assert torch.allclose(got[1], want[1], rtol=1e-6, atol=1e-6), where  # -inf where both have no key
                assert bool((got[0][t // 2] == 0).all()) and bool(torch.isneginf(got[1][t // 2]).all()), where
                hb = wgmma_program_heads(fused, heads, comp, win)
                groups = -(-heads // hb)
                parts, _ = wgmma_plan(fused.replace(NUM_SPLITS=splits), t, 512, 128, torch.device("cuda"), groups)
                merged_in_kernel += merge_fits(parts, t * parts * groups, torch.device("cuda"))
    assert merged_in_kernel >= 6  # the in-kernel merge ran, not only the fallback
    from tuner.kernels.decode.buffers import _MERGE_COUNTERS

    # The arrival words are left zero by every launch (the flags, the other word of each pair, are never reset).
    assert all(int(c[0::2].abs().sum()) == 0 for c in _MERGE_COUNTERS[torch.device("cuda", torch.cuda.current_device())])
    # Replayed from a CUDA graph: the barrier words the capture saw serve each replay.
    inp = make_decode_inputs(comp, win, 4, 16, 512, 128, "cuda", seed=3)
    want = run_decode(comp, win, kernel, inp)
    want = (want[0].clone(), want[1].clone())
    run_decode(comp, win, fused, inp)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_decode(comp, win, fused, inp)
    for _ in range(3):
        poison(inp)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(inp["out"][0].float(), want[0].float(), rtol=2 ** -7, atol=1e-6)
        assert torch.allclose(inp["out"][1], want[1], rtol=1e-6, atol=1e-6)
    assert merge_fits(10, 4 * 10, torch.device("cuda"))  # T=4: 10 programs a token, merged in the kernel


@pytest.mark.skipif(not _SM90, reason="the wgmma path is sm_90's (Hopper) Gluon kernel")
@pytest.mark.parametrize("pair", [("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")], ids=lambda p: "+".join(p))
def test_cluster_build_matches_the_qk_pv_split_bit_for_bit_on_sm90(pair: tuple[str, str]) -> None:
    """The 2-CTA cluster build (MMA=wgmma_hmpvc: each CTA converts half of every tile and sends it
    into the peer's K buffer) gives the QK / PV split's outputs bit for bit: the same conversions and
    MMAs, half of them in the other CTA. 96 heads (a cluster whose second group is half padding)
    and 128, T = 1, 8, 64, splits auto, 4 and 1, sink on and off, a token whose
    lists are all -1, launched twice; pages of 16 and 8 on an odd shape; replayed from a CUDA graph;
    and checked against the float64 reference."""
    comp, win = pair
    split = wgmma_config(default_config(comp, win).replace(MMA="wgmma_hmpv", PREFETCH=1))
    cluster = split.replace(MMA="wgmma_hmpvc")
    for heads in (96, 128):
        for t in (1, 8, 64):
            inp = make_decode_inputs(comp, win, t, heads, 512, 128, "cuda", seed=heads + t)
            inp["topk_idx"][t // 2] = -1
            inp["window_idx"][t // 2] = -1
            for splits, sink in ((0, True), (4, False), (1, t != 8)):
                i = inp if sink else {**inp, "attn_sink": None}
                want = run_decode(comp, win, split.replace(NUM_SPLITS=splits), i)
                for _ in range(2):
                    poison(i)
                    got = run_decode(comp, win, cluster.replace(NUM_SPLITS=splits), i)
                    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (heads, t, splits, sink)
                assert verify_decode(comp, win, i, got) is None, (heads, t, splits, sink)
    odd = make_decode_inputs(comp, win, 3, 72, 40, 20, "cuda", 7, page_size=16, win_page_size=8)
    for splits in (0, 1, 2):
        poison(odd)
        assert verify_decode(comp, win, odd, run_decode(comp, win, cluster.replace(NUM_SPLITS=splits), odd)) is None
    _replays_bit_for_bit(comp, win, inp, cluster.replace(NUM_SPLITS=4))
