"""The pack kernel against the reference on random data, every legal variant, several layouts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from catalog.core import Config
from tuner.formats import FORMATS, alloc_cache, quantize, read_slots, write_slots
from catalog.families.pack import backend_legality, backends_of, nt_pad, default_config, space
from tuner.kernels.pack import pack

from tests.golden_files import check_golden
from catalog.families.pack import render_variant


def _inputs(fmt: str, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    f = FORMATS[fmt]
    # Magnitudes over 12 decades so scales land everywhere, plus a few non-finite tiles.
    x = torch.randn(n, f.dims, generator=g) * torch.logspace(-5, 7, n)[torch.randperm(n, generator=g)][:, None]
    x[1, 7] = float("nan")
    x[2, f.dims - 1] = float("-inf")
    return x.to(dtype)


def _legal_backends(fmt: str, target: str) -> list[str]:
    return [b for b in space(fmt).params[0].choices if backend_legality(fmt, b, target) is None]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("page_size", [16, 48, 64, 128])  # 48: the division path
def test_pack_matches_reference(fmt: str, dtype: torch.dtype, page_size: int, target_name: str, device: str) -> None:
    n = 41
    x = _inputs(fmt, n, dtype, seed=page_size).to(device)
    pages = 2 * (-(-n // page_size)) + 1
    g = torch.Generator().manual_seed(7)
    slots = torch.randperm(pages * page_size, generator=g)[:n].to(torch.int64)
    slots[[0, 5, 20]] = -1  # skipped tokens
    slots = slots.to(device)
    expected = alloc_cache(fmt, pages, page_size, fill=0xA5)
    write_slots(expected, quantize(x.cpu(), fmt), slots.cpu(), fmt, page_size)
    for backend in _legal_backends(fmt, target_name):
        # The default, and a layout with a partial token block and a row split across 2 programs
        # (stored as configs were before BLOCKS_PER_PROG: upgraded to one block a program).
        split = Config.of(backend="soft", BLOCK_T=16, TILES_PER_PROG=max(1, nt_pad(FORMATS[fmt]) // 2), num_warps=2, num_stages=1)
        cfgs = [default_config(fmt), split]
        if page_size == 64:  # programs of 8 pipelined blocks, the last program's partly past the end
            cfgs.append(default_config(fmt).replace(BLOCK_T=4, BLOCKS_PER_PROG=8, num_stages=2, num_warps=1))
            # ... each holding whole rows (fp8_584's bf16 dims then load beside the rest)
            cfgs.append(cfgs[-1].replace(TILES_PER_PROG=nt_pad(FORMATS[fmt])))
        for cfg in cfgs:
            cfg = cfg.replace(backend=backend)
            cache = alloc_cache(fmt, pages, page_size, device=device, fill=0xA5)
            pack(x, slots, cache, fmt, page_size, cfg)
            # Whole-cache equality: written slots match, and every other byte is still 0xA5.
            diff = (cache.cpu() != expected).nonzero()
            assert diff.numel() == 0, f"{fmt} {cfg.to_json()}: {diff.shape[0]} bytes differ, first at {diff[:4].tolist()}"


def _e4m3_codes_and_ties() -> torch.Tensor:
    """Every finite e4m3fn magnitude, the midpoints between neighbours (ties: to even), one fp32
    ulp either side of each midpoint, and values under the smallest subnormal; both signs."""
    codes = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0 .. 448
    mids = (codes[:-1] + codes[1:]) / 2
    ulp = lambda v, d: (v.view(torch.int32) + d).view(torch.float32)  # noqa: E731
    tiny = torch.tensor([2.0**-10, 2.0**-11, 1e-30, 2.0**-10 * 1.0000001])
    mag = torch.cat([codes, mids, ulp(mids, 1), ulp(mids, -1), tiny])
    return torch.cat([mag, -mag])


@pytest.mark.parametrize("fmt", ["fp8_132", "fp8_528"])
def test_e4m3_writers_are_exact_on_every_code_and_tie(fmt: str, target_name: str, device: str) -> None:
    # Rows whose first element is 448, so that the scale is exactly 1 and the writer rounds the
    # values as they are: every e4m3 code, every tie between two codes, a ulp off each tie,
    # subnormals; the soft integer rounding and the hardware cvt (on NVIDIA) against torch's codec.
    f = FORMATS[fmt]
    vals = _e4m3_codes_and_ties()
    per_row = f.tile - 1
    n = -(-vals.numel() // per_row)
    x = torch.zeros(n, f.dims)
    body = torch.cat([vals, torch.zeros(n * per_row - vals.numel())]).view(n, per_row)
    for t in range(f.n_tiles):  # every scale tile of the row holds the same 448-led values
        x[:, t * f.tile] = 448.0
        x[:, t * f.tile + 1:(t + 1) * f.tile] = body
    page = 16
    slots = torch.arange(n, dtype=torch.int64)
    expected = alloc_cache(fmt, -(-n // page), page, fill=0)
    write_slots(expected, quantize(x, fmt), slots, fmt, page)
    backends = _legal_backends(fmt, target_name)
    assert "soft" in backends and ("cvt" in backends) == target_name.startswith("sm_")
    for backend in backends:
        cache = alloc_cache(fmt, -(-n // page), page, device=device, fill=0)
        pack(x.to(device), slots.to(device), cache, fmt, page, default_config(fmt).replace(backend=backend))
        diff = (cache.cpu() != expected).nonzero()
        assert diff.numel() == 0, f"{fmt} {backend}: {diff.shape[0]} bytes differ, first at {diff[:4].tolist()}"


def _e2m1_tiles_at_every_bf16(fmt: str, scale_leads: list[float]) -> torch.Tensor:
    """bf16 rows whose tiles each lead with 6 * s (so the tile's scale is exactly s) and hold, in
    the rest of the tile, every bf16 value of magnitude <= 6 * s in turn, both signs: every e2m1
    code, every tie between two codes and every bf16 value between them, at each scale s."""
    f = FORMATS[fmt]
    per_tile = f.tile - 1
    mags = torch.arange(0, 0x7F80, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()  # 0 .. max finite
    rows = []
    for s in scale_leads:
        v = mags[mags <= 6 * s]
        v = torch.cat([v, -v])
        n_tiles = -(-v.numel() // per_tile)
        body = torch.cat([v, torch.zeros(n_tiles * per_tile - v.numel())]).view(n_tiles, per_tile)
        tiles = torch.cat([torch.full((n_tiles, 1), 6 * s), body], dim=1)
        pad = -n_tiles % f.n_tiles
        tiles = torch.cat([tiles, tiles[:pad]]) if pad else tiles
        rows.append(tiles.reshape(-1, f.n_tiles * f.tile))
    x = torch.cat(rows)
    return torch.cat([x, torch.zeros(x.shape[0], f.dims - f.n_tiles * f.tile)], dim=1).to(torch.bfloat16)


@pytest.mark.parametrize("fmt,scales", [("nvfp4_288", [1.0, 0.001953125, 448.0, 1.125, 13.0]),
                                        ("mxfp4_68", [1.0, 2.0**-126, 2.0**100, 0.25])])
def test_e2m1_writers_are_exact_at_every_bf16_value(fmt: str, scales: list[float], target_name: str, device: str) -> None:
    # Every bf16 magnitude up to 6 s (2**-133 .. ) at scales of the format's whole range (nvfp4:
    # e4m3 scales at both clamps and with odd mantissas; mxfp4: powers of two down to 2**-126):
    # each legal backend's bytes against the torch reference.
    x = _e2m1_tiles_at_every_bf16(fmt, scales)
    n, page = x.shape[0], 64
    slots = torch.arange(n, dtype=torch.int64)
    expected = alloc_cache(fmt, -(-n // page), page, fill=0)
    write_slots(expected, quantize(x, fmt), slots, fmt, page)
    backends = _legal_backends(fmt, target_name)
    assert {"soft", "swar"} <= set(backends) and ("bf16x2" in backends) == target_name.startswith("sm_")
    for backend in backends:
        cache = alloc_cache(fmt, -(-n // page), page, device=device, fill=0)
        pack(x.to(device), slots.to(device), cache, fmt, page, default_config(fmt).replace(backend=backend))
        diff = (cache.cpu() != expected).nonzero()
        assert diff.numel() == 0, f"{fmt} {backend}: {diff.shape[0]} bytes differ, first at {diff[:4].tolist()}"


def _compiled_in_child(code: str) -> dict:
    """Run `code` (which prints one JSON line last) in a child process without the interpreter:
    sm_90 compiles need real JITFunctions, and this session may be interpreted."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_swar_backend_rounds_with_fewer_instructions() -> None:
    # Static, on the CPU: the e2m1 formats' SWAR rounding (two elements a 32-bit instruction)
    # issues fewer SASS instructions an element on sm_90 than the soft rounding at the same tiles
    # (benchmarks/sass_count.py). Its exactness is test_e2m1_writers_are_exact_at_every_bf16_value.
    got = _compiled_in_child("""if True:
        import json
        from benchmarks.sass_count import count
        out = {}
        for fmt, tiles in (("nvfp4_288", (4, 32, 1)), ("mxfp4_68", (8, 4, 1))):
            for b in ("soft", "swar"):
                out[fmt + "." + b] = count(fmt, *tiles, backend=b)[1]
        print(json.dumps(out))
    """)
    for fmt in ("nvfp4_288", "mxfp4_68"):
        assert got[fmt + ".swar"] < 0.9 * got[fmt + ".soft"], (fmt, got)


def test_bf16x2_backend_is_packed_bf16_compares_with_fewer_instructions() -> None:
    # Static, on the CPU: on sm_90 the bf16x2 render lowers to HSET2.BF16_V2 (the packed bf16
    # compares) and HFMA2 (the steps, on the FMA pipes), and at the measured tiles (nvfp4_288's tuned
    # 8/32/2, mxfp4_68's 16/4/1) issues under 0.85x the swar rounding's SASS and under 0.75x its
    # integer-pipe SASS, the pipe that binds swar (benchmarks/results/pack_bf16x2/README.md). Its
    # exactness is test_e2m1_writers_are_exact_at_every_bf16_value, on the GPU.
    got = _compiled_in_child("""if True:
        import json
        from benchmarks.common import alu_share
        from benchmarks.sass_count import count
        out = {}
        for fmt, tiles in (("nvfp4_288", (8, 32, 2)), ("mxfp4_68", (16, 4, 1))):
            for b in ("swar", "bf16x2"):
                n, per_elem, ops = count(fmt, *tiles, backend=b)
                out[fmt + "." + b] = [n, alu_share(ops), ops.get("HSET2", 0), ops.get("HFMA2", 0)]
        print(json.dumps(out))
    """)
    for fmt in ("nvfp4_288", "mxfp4_68"):
        (swar, swar_alu, swar_hset, _), (packed, alu, hset, hfma) = got[fmt + ".swar"], got[fmt + ".bf16x2"]
        assert swar_hset == 0 and hset > 0 and hfma > 0, (fmt, got)
        assert packed < 0.85 * swar and alu < 0.75 * swar_alu, (fmt, got)


def test_cvt_backend_is_the_hardware_conversion_with_fewer_instructions() -> None:
    # Static, on the CPU: on sm_90 the cvt render lowers to F2FP (the e4m3x2 conversion) and issues
    # fewer SASS instructions per element than the integer rounding (pack is issue-bound there:
    # benchmarks/results/pack_issue_limit_sm90.md). Its exactness is the test above, on a GPU.
    got = _compiled_in_child("""if True:
        import json
        from benchmarks.sass_count import count
        from catalog.families.pack import default_config
        out = {}
        for fmt in ("fp8_528", "fp8_584", "fp8_132"):
            c = default_config(fmt)
            for b in ("soft", "cvt"):
                _, per_elem, ops = count(fmt, c["BLOCK_T"], c["TILES_PER_PROG"], c["num_warps"], backend=b)
                out[fmt + "." + b] = [per_elem, ops.get("F2FP", 0)]
        print(json.dumps(out))
    """)
    for fmt in ("fp8_528", "fp8_584", "fp8_132"):
        (soft, soft_f2fp), (cvt, cvt_f2fp) = got[fmt + ".soft"], got[fmt + ".cvt"]
        assert cvt_f2fp > 0 and soft_f2fp == 0, fmt
        assert cvt < 0.8 * soft, (fmt, soft, cvt)


def test_pipelined_blocks_load_ahead_through_shared_memory() -> None:
    # Static, on the CPU: with num_stages > 1 the blocks loop is software-pipelined on sm_90, its
    # loads turned into cp.async (LDGSTS) into shared memory; one stage loads into registers.
    got = _compiled_in_child("""if True:
        import json
        from benchmarks.sass_count import count
        out = {}
        for fmt, bt, tiles, warps, b in (("fp8_584", 4, 8, 1, "cvt"), ("nvfp4_288", 4, 32, 2, "swar")):
            for stages in (1, 2):
                _, _, ops = count(fmt, bt, tiles, warps, backend=b, blocks=8, stages=stages)
                out[f"{fmt}.{stages}"] = [ops.get("LDGSTS", 0), ops.get("LDG", 0)]
        print(json.dumps(out))
    """)
    for fmt in ("fp8_584", "nvfp4_288"):
        (one_async, one_ldg), (two_async, two_ldg) = got[fmt + ".1"], got[fmt + ".2"]
        assert one_async == 0 and one_ldg > 0, (fmt, got)
        # Every load of the pipelined loop goes ahead, fp8_584's bf16 dims too (a program of
        # TILES_PER_PROG=8 holds whole rows): no synchronous LDG left.
        assert two_async > 0 and two_ldg == 0, (fmt, got)


def test_a_config_stored_before_blocks_per_prog_runs_as_tuned(device: str) -> None:
    # A config of an older table (no BLOCKS_PER_PROG) is one block a program, as it was tuned;
    # the upgrade fills only what it lacks.
    from catalog.families.pack import upgrade_config

    old = {k: v for k, v in default_config("nvfp4_288").as_dict().items() if k != "BLOCKS_PER_PROG"}
    assert upgrade_config(Config.from_dict(old)) == default_config("nvfp4_288")
    piped = default_config("nvfp4_288").replace(BLOCKS_PER_PROG=8, num_stages=2)
    assert upgrade_config(piped) is piped
    fmt, page, n = "nvfp4_288", 16, 9
    x = _inputs(fmt, n, torch.bfloat16, seed=4).to(device)
    slots = torch.arange(n, dtype=torch.int64, device=device)
    cache = alloc_cache(fmt, 1, page, device=device, fill=0)
    pack(x, slots, cache, fmt, page, Config.from_dict(old))
    assert torch.equal(read_slots(cache, slots, fmt, page).cpu(), quantize(x.cpu(), fmt))


def test_skipped_slots_leave_cache_untouched(device: str) -> None:
    fmt, page = "nvfp4_288", 16
    x = torch.randn(8, 512).to(device)
    cache = alloc_cache(fmt, 1, page, device=device, fill=0x5A)
    pack(x, torch.full((8,), -1, dtype=torch.int64, device=device), cache, fmt, page)
    assert bool((cache == 0x5A).all())


def test_pack_rejects_bad_arguments(device: str) -> None:
    fmt, page = "mxfp4_68", 16
    cache = alloc_cache(fmt, 1, page, device=device)
    with pytest.raises(ValueError, match="x\\[N, 128\\]"):
        pack(torch.zeros(2, 64, device=device), torch.zeros(2, dtype=torch.int64, device=device), cache, fmt, page)
    with pytest.raises(ValueError, match="int64"):
        pack(torch.zeros(2, 128, device=device), torch.zeros(2, dtype=torch.int32, device=device), cache, fmt, page)
    with pytest.raises(ValueError, match="uint8"):
        pack(torch.zeros(2, 128, device=device), torch.zeros(2, dtype=torch.int64, device=device), cache[:, :10], fmt, page)
    with pytest.raises(ValueError, match="infeasible"):
        pack(torch.zeros(2, 128, device=device), torch.zeros(2, dtype=torch.int64, device=device), cache, fmt, page,
             default_config(fmt).replace(BLOCK_T=3))


def test_space_is_data() -> None:
    sp = space("nvfp4_288")
    doc = json.loads(json.dumps(sp.to_json()))
    assert [p["name"] for p in doc] == ["backend", "BLOCK_T", "TILES_PER_PROG", "num_warps", "BLOCKS_PER_PROG", "num_stages"]
    grid = list(sp.grid())
    assert default_config("nvfp4_288") in grid
    assert all(sp.infeasible(c) is None for c in grid)
    # One block a program, or 8 blocks pipelined over 2 stages: the axis doubles the grid.
    dflt = default_config("nvfp4_288")
    assert dflt["BLOCKS_PER_PROG"] == 1 and dflt["num_stages"] == 1
    assert "pipelined" in sp.infeasible(dflt.replace(num_stages=2))
    assert "pipelined" in sp.infeasible(dflt.replace(BLOCKS_PER_PROG=8))
    assert sp.infeasible(dflt.replace(num_stages=2, BLOCKS_PER_PROG=8)) is None
    assert len(grid) == 2 * sum(1 for c in grid if c["BLOCKS_PER_PROG"] == 1)
    # The fp8 formats' axis is the e4m3 conversion: integer rounding or the hardware's cvt.
    assert space("fp8_528").params[0].choices == ("soft", "cvt") == backends_of("fp8_528")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_rendered_sources_match_golden(fmt: str) -> None:
    for b in backends_of(fmt):
        check_golden(f"pack/{fmt}.{b}.py", render_variant(fmt, b).source)


@pytest.mark.parametrize("target", ("sm_90", "sm_100", "gfx942", "gfx950"))
def test_xcompile_table_matches_the_issue(target: str) -> None:
    """soft and swar (plain integer Triton) compile on all four GPU targets; bf16x2 (PTX packed
    bf16 compares) on NVIDIA; ptx only on sm_100;
    gfx950 only on gfx950; the fp8 formats' cvt on NVIDIA (sm_90, sm_100) -- and the process aborts
    of the illegal ones are rows of the table, not crashes of the tool. A test a target."""
    out = subprocess.run([sys.executable, "-m", "kvtune.cli", "xcompile", "--kernel", "pack", "--target", target, "--json"],
                         capture_output=True, text=True, timeout=900, check=True)
    rows = json.loads(out.stdout)
    expect = {
        "soft": {"sm_90", "sm_100", "gfx942", "gfx950"},
        "swar": {"sm_90", "sm_100", "gfx942", "gfx950"},
        "bf16x2": {"sm_90", "sm_100"},
        "ptx": {"sm_100"},
        "gfx950": {"gfx950"},
        "cvt": {"sm_90", "sm_100"},
    }
    seen: dict[tuple[str, str, str], str] = {}
    for r in rows:
        assert set(r) >= {"kernel", "variant", "target", "status", "registers", "spills", "shared_bytes", "error"}
        assert r["kernel"] == "pack" and r["target"] == target
        seen[(r["variant"], r["detail"], r["target"])] = r["status"]
        want = "compiled" if r["target"] in expect[r["variant"]] else "illegal"
        assert r["status"] == want, r
        if r["status"] == "compiled":
            assert r["registers"] and r["registers"] > 0 and r["spills"] is not None
        else:
            assert r["error"]
    # Every backend was built for this target on the formats it converts.
    for b in expect:
        if b == "cvt":
            assert all((b, fmt, target) in seen for fmt in ("fp8_528", "fp8_584", "fp8_132"))
            continue
        assert (b, "nvfp4_288", target) in seen and (b, "mxfp4_68", target) in seen
        assert (b, "mxfp4_68+query", target) in seen  # the query quantiser: the same table
    aborted = [r for r in rows if r["variant"] == "ptx" and r["target"].startswith("gfx")]
    assert bool(aborted) == target.startswith("gfx")
    assert all("unknown asm constraint 'f'" in r["error"] for r in aborted)


def test_bench_verification_samples_large_packs_and_still_catches_wrong_records() -> None:
    # The bench child checks at most VERIFY_ROWS records per candidate: every tile-edge and tail
    # record (first and last 4096) and a fixed sample of the middle, so a corrupt last record or
    # a corrupt sampled record fails the candidate, and a correct pack passes.
    from catalog.core import Bucket
    from catalog.families.pack import pack_key
    from tuner.kernels.pack import FAMILY, VERIFY_ROWS, verify_rows

    n = VERIFY_ROWS + 9000
    rows = verify_rows(n, "cpu")
    assert len(rows) == VERIFY_ROWS and bool((rows[1:] > rows[:-1]).all())
    assert set(range(4096)) <= set(rows.tolist()) and set(range(n - 4096, n)) <= set(rows.tolist())
    assert torch.equal(verify_rows(100, "cpu"), torch.arange(100))

    key = pack_key("fp8_528", "interp")
    inp = FAMILY.make_inputs(key, Bucket("N", n, n), "cpu", seed=5)
    fmt = FORMATS["fp8_528"]
    cache = inp["cache"]
    write_slots(cache, quantize(inp["x"], fmt), inp["slots"], fmt, 64)  # what a correct kernel writes
    assert FAMILY.verify(key, inp, cache) is None
    for row in (n - 1, int(rows[VERIFY_ROWS // 2])):
        bad = cache.clone()
        slot = inp["slots"][row : row + 1]
        rec = read_slots(bad, slot, fmt, 64)
        rec[0, 0] ^= 0x40  # one byte of that record's first value
        write_slots(bad, rec, slot, fmt, 64)
        assert "1 of 65536 records checked differ" in (FAMILY.verify(key, inp, bad) or "")


def test_pack_inputs_take_a_paged_allocators_slots() -> None:
    # The tuner's and bench_pack's slots: whole pages in a shuffled order (every page once), the
    # tokens contiguous inside each page, a partial last page's tokens at the start of theirs.
    from catalog.core import Bucket
    from catalog.families.pack import PACK_PAGE_SIZE, pack_key
    from tuner.kernels.pack import FAMILY, allocator_slots

    n, page = 5 * 64 + 9, 64
    slots = allocator_slots(n, page, torch.Generator().manual_seed(3), "cpu")
    assert slots.dtype == torch.int64 and slots.shape == (n,) and len(set(slots.tolist())) == n
    pages, offs = slots // page, slots % page
    assert torch.equal(offs, torch.arange(n) % page)
    assert sorted(pages[::page].tolist()) == list(range(6)) and bool((pages == pages[(torch.arange(n) // page) * page]).all())
    assert pages[::page].tolist() != list(range(6))  # shuffled (seed 3)
    inp = FAMILY.make_inputs(pack_key("fp8_528", "interp"), Bucket("N", n, n), "cpu", seed=5)
    assert torch.equal(inp["slots"] % PACK_PAGE_SIZE, torch.arange(n) % PACK_PAGE_SIZE)
    assert inp["cache"].shape[0] * PACK_PAGE_SIZE >= int(inp["slots"].max()) + 1


# ---------------------------------------------------------------------------------------------
# The MXFP4 query quantiser (formats ("mxfp4_68", "query")): dense records, no cache
# ---------------------------------------------------------------------------------------------


def _query_inputs(t: int, hi: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows = t * hi
    # Magnitudes over 12 decades (rows and 32-dim chunks apart), plus non-finite and all-zero tiles.
    x = torch.randn(rows, 128, generator=g) * torch.logspace(-5, 7, rows)[torch.randperm(rows, generator=g)][:, None]
    x = x * torch.logspace(-3, 3, 4)[torch.randint(0, 4, (rows, 4), generator=g)].repeat_interleave(32, dim=1)
    x[1, 7] = float("nan")
    x[2, 127] = float("-inf")
    x[3, 32:64] = 0.0
    x[4, 0] = -0.0
    return x.reshape(t, hi, 128).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_query_quantiser_matches_reference(dtype: torch.dtype, target_name: str, device: str) -> None:
    from tuner.formats import quantize_query
    from tuner.kernels.pack import quant_query

    x = _query_inputs(5, 16, dtype, seed=3)
    want_v, want_s = quantize_query(x)
    assert want_v.shape == (5, 16, 64) and want_s.shape == (5, 16, 4)
    # A query sliced out of a wider projection (rows strided over T): read in place.
    wide = torch.zeros(5, 16 * 128 + 64, dtype=dtype)
    wide[:, : 16 * 128] = x.reshape(5, -1)
    strided = wide[:, : 16 * 128].view(5, 16, 128)
    split = Config.of(backend="soft", BLOCK_T=16, TILES_PER_PROG=2, num_warps=2, num_stages=1)
    for backend in _legal_backends("mxfp4_68", target_name):
        for cfg in (default_config("mxfp4_68"), split):
            cfg = cfg.replace(backend=backend)
            for src in (x, strided):
                v = torch.full((5, 16, 64), 0xA5, dtype=torch.uint8, device=device)  # poisoned
                s = torch.full((5, 16, 4), 0xA5, dtype=torch.uint8, device=device)
                got_v, got_s = quant_query(src.to(device), cfg, v, s)
                assert got_v is v and got_s is s
                assert torch.equal(v.cpu(), want_v), f"{cfg.to_json()}: {int((v.cpu() != want_v).sum())} value bytes differ"
                assert torch.equal(s.cpu(), want_s), f"{cfg.to_json()}: {int((s.cpu() != want_s).sum())} scale bytes differ"
    # Allocated outputs, any leading shape; no rows, nothing launched.
    v, s = quant_query(x[0].to(device))
    assert torch.equal(v.cpu(), want_v[0]) and torch.equal(s.cpu(), want_s[0])
    v, s = quant_query(torch.zeros(0, 64, 128, dtype=dtype, device=device))
    assert v.shape == (0, 64, 64) and s.shape == (0, 64, 4)


def test_query_quantiser_rejects_bad_arguments(device: str) -> None:
    from tuner.kernels.pack import quant_query

    x = torch.zeros(2, 16, 128, device=device)
    with pytest.raises(ValueError, match=r"x\[\.\.\., 128\]"):
        quant_query(torch.zeros(2, 16, 64, device=device))
    with pytest.raises(ValueError, match="bf16 or fp32"):
        quant_query(x.double())
    with pytest.raises(ValueError, match="values must be"):
        quant_query(x, values=torch.empty(2, 16, 65, dtype=torch.uint8, device=device))
    with pytest.raises(ValueError, match="scales must be"):
        quant_query(x, scales=torch.empty(2, 16, 4, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="infeasible"):
        quant_query(x, default_config("mxfp4_68").replace(BLOCK_T=3))
    with pytest.raises(ValueError, match="BLOCKS_PER_PROG=4 is not among"):  # its kernel has no blocks loop
        quant_query(x, default_config("mxfp4_68").replace(BLOCKS_PER_PROG=4, num_stages=2))


def test_query_key_space_buckets_and_family_protocol(device: str) -> None:
    from catalog.core import Bucket
    from catalog.families.pack import QUERY_BUCKETS, pack_key, query_bytes
    from catalog.keys import make_key
    from tuner.kernels.pack import FAMILY

    key = pack_key("mxfp4_68", "interp", "query")
    assert key.to_json()["formats"] == ["mxfp4_68", "query"] and (key.heads, key.topk, key.window) == (0, 0, 0)
    assert key != pack_key("mxfp4_68", "interp") and key.slug() != pack_key("mxfp4_68", "interp").slug()
    with pytest.raises(ValueError, match="queries are quantised"):
        pack_key("nvfp4_288", "interp", "query")
    with pytest.raises(ValueError, match="destination"):
        pack_key("mxfp4_68", "interp", "cache")
    # The same tiles and variants as the paged mxfp4_68 pack, one block a program (no blocks loop);
    # its own buckets of (token, head) rows.
    paged, query = FAMILY.space(pack_key("mxfp4_68", "interp")), FAMILY.space(key)
    assert [p for p in query.params if p.name not in ("BLOCKS_PER_PROG", "num_stages")] == \
        [p for p in paged.params if p.name not in ("BLOCKS_PER_PROG", "num_stages")]
    choices = {p.name: p.choices for p in query.params}
    assert choices["BLOCKS_PER_PROG"] == choices["num_stages"] == (1,)
    assert FAMILY.buckets(key) == list(QUERY_BUCKETS) and all(b.dim == "N" for b in QUERY_BUCKETS)
    assert FAMILY.bytes_moved(key, QUERY_BUCKETS[0]) == query_bytes("mxfp4_68", 512) == 512 * (256 + 68)
    cfg = FAMILY.default_config(key)
    assert FAMILY.render(key, cfg).source.startswith("# Generated by kvtune from templates/quant_query.py.j2")
    assert FAMILY.render(key, cfg).source_hash != FAMILY.render(pack_key("mxfp4_68", "interp"), cfg).source_hash
    case = FAMILY.compile_case(key, cfg)
    assert case is not None and case.kernel_name == "quant_query_kernel" and case.detail == "mxfp4_68+query"
    # A paged config's case is exact too: its kernel, and the stages its launch passes as NUM_STAGES.
    piped = FAMILY.compile_case(pack_key("mxfp4_68", "interp"), cfg.replace(BLOCKS_PER_PROG=8, num_stages=2))
    assert piped is not None and piped.kernel_name == "pack_kernel" and piped.detail == "mxfp4_68"
    assert piped.num_stages == 2 and piped.constexprs["NUM_STAGES"] == 2 and piped.constexprs["BLOCKS_PER_PROG"] == 8
    assert make_key("pack", "interp", formats=["mxfp4_68", "query"]) == key  # what the CLI and the API build
    with pytest.raises(ValueError, match="queries are quantised to"):
        make_key("pack", "interp", formats=["fp8_528", "query"])
    with pytest.raises(ValueError, match="pack takes one record format"):
        make_key("pack", "interp", formats=["mxfp4_68", "cache"])
    inputs = FAMILY.make_inputs(key, Bucket("N", 1, 300), device, seed=2)
    out = FAMILY.run(key, cfg, inputs)
    assert FAMILY.verify(key, inputs, out) is None
    out[0][17, 3] ^= 0x40  # one value byte of one row
    assert "1 of 300 records checked differ" in (FAMILY.verify(key, inputs, out) or "")


def test_query_quantiser_sources_match_golden() -> None:
    from catalog.families.pack import render_query_variant

    for b in ("soft", "swar", "bf16x2", "ptx", "gfx950"):
        check_golden(f"pack/mxfp4_68.query.{b}.py", render_query_variant("mxfp4_68", b).source)


def test_seeds_are_the_default_tiles_with_each_other_legal_backend() -> None:
    # A pack search measures the default, then its tiles with every other element backend the
    # target can run (a few TPE trials over the tile grid may never draw the best backend there),
    # then the format's measured pipelined config where its backend runs.
    from catalog.families.pack import SPEC, pack_key

    def seeds(fmt: str, target: str) -> list[str]:
        key = pack_key(fmt, target)
        out = [c for c in SPEC.seed_configs(key, target) if c["BLOCKS_PER_PROG"] == 1]
        assert all(c.replace(backend="soft") == SPEC.default_config(key) for c in out)
        return [c["backend"] for c in out]

    piped = SPEC.seed_configs(pack_key("fp8_584", "sm_90"), "sm_90")[-1]
    assert piped.as_dict() == {**SPEC.default_config(pack_key("fp8_584", "sm_90")).as_dict(), "backend": "cvt",
                               "BLOCK_T": 4, "TILES_PER_PROG": 8, "num_warps": 1, "BLOCKS_PER_PROG": 8,
                               "num_stages": 2}
    assert SPEC.space(pack_key("fp8_584", "sm_90")).infeasible(piped) is None
    assert len(SPEC.seed_configs(pack_key("fp8_584", "sm_90"), "sm_90")) == 2
    assert all(c["BLOCKS_PER_PROG"] == 1 for f in ("fp8_528", "fp8_132", "nvfp4_288")
               for c in SPEC.seed_configs(pack_key(f, "sm_90"), "sm_90"))
    assert SPEC.seed_configs(pack_key("fp8_584", "gfx942"), "gfx942") == []  # no cvt there

    assert seeds("nvfp4_288", "sm_90") == ["swar", "bf16x2"]
    assert seeds("nvfp4_288", "sm_100") == ["swar", "bf16x2", "ptx"]
    assert seeds("mxfp4_68", "gfx950") == ["swar", "gfx950"]
    assert seeds("mxfp4_68", "interp") == ["swar"]
    assert seeds("fp8_584", "sm_90") == ["cvt"]
    assert seeds("fp8_584", "gfx942") == []
    assert SPEC.seed_configs(pack_key("mxfp4_68", "sm_90", "query"), "sm_90")[0]["backend"] == "swar"
