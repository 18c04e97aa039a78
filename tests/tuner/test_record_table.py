"""The device scripts' CPU-side parts: how record_table shares out and schedules compiling, and how
logits_breakdown edits the generated module."""

from __future__ import annotations

import pytest

from benchmarks.record_table import precompile_shares
from catalog.core import Bucket
from catalog.families.pack import space as pack_space


def test_precompile_keeps_every_bucket_of_a_config_in_one_process() -> None:
    # The buckets of a config mostly launch one binary: split across processes, each of them
    # compiles it at the same time. Each entry is compiled exactly once, and the shares stay even.
    configs = list(pack_space("nvfp4_288").restrict({"BLOCK_T": (2, 4), "num_warps": (1, 2, 4)}).grid())
    buckets = [Bucket("N", 1, 64), Bucket("N", 65, 1024), Bucket("N", 1025, 16384)]
    items = [(b, c) for c in configs for b in buckets] + [(Bucket("N", 16385, 1 << 20), configs[0])]
    shares = precompile_shares(items, 5)
    assert len(shares) == 5
    flat = [it for share in shares for it in share]
    assert sorted(map(repr, flat)) == sorted(map(repr, items))
    owners: dict[str, set[int]] = {}
    for i, share in enumerate(shares):
        for _, c in share:
            owners.setdefault(c.to_json(), set()).add(i)
    assert len(owners) == len(configs) and all(len(o) == 1 for o in owners.values())
    sizes = sorted(len(s) for s in shares)
    assert sizes[-1] - sizes[0] <= len(buckets) + 1


def test_precompile_runs_ahead_kernel_by_kernel_and_always_releases_the_timing(monkeypatch) -> None:  # noqa: ANN001
    # Kernel k's timing waits on its event; the compile thread works through the plans in order
    # and sets every event, also when the time limit has passed (nothing compiled then), so no
    # timing waits for a compile that will never come.
    import time
    from pathlib import Path

    import benchmarks.record_table as rt

    calls: list[str] = []
    monkeypatch.setattr(rt, "precompile", lambda kernel, key, items, jobs: calls.append(kernel))
    plans = [rt.Plan(k, None, Path(f"/nonexistent/{k}.json"), {}, []) for k in ("pack", "logits", "decode")]
    events = rt._precompile_ahead(plans, "sm_90", 4, end=time.monotonic() + 60)
    assert all(events[k].wait(10) for k in ("pack", "logits", "decode"))
    assert calls == ["pack", "logits", "decode"]
    calls.clear()
    events = rt._precompile_ahead(plans, "sm_90", 4, end=time.monotonic() - 1)
    assert all(events[k].wait(10) for k in ("pack", "logits", "decode")) and calls == []
    events = rt._precompile_ahead(plans, "interp", 4, end=time.monotonic() + 60)
    assert all(events[k].wait(10) for k in ("pack", "logits", "decode")) and calls == []


def test_logits_breakdown_variants_leave_out_exactly_their_stage() -> None:
    # The breakdown edits the generated module by its text: a template change that moves the tile
    # loop's calls must fail here, not produce a silently wrong measurement on the device.
    import ast

    from benchmarks.logits_breakdown import DECODE_CALL, HEADS_CALL, breakdown_source, variant
    from catalog.families.logits import LOGITS_FORMATS, TEMPLATE, default_config, render_variant, space

    for fmt in LOGITS_FORMATS:
        for dot in next(p.choices for p in space(fmt, "fp8").params if p.name == "dot"):
            rendered = render_variant(fmt, dot, "soft")
            if rendered.template != TEMPLATE:
                continue  # the wgmma path's Gluon kernel: the breakdown refuses it (below)
            src = rendered.source
            assert variant(src, "full") == src
            no_dot, loads = variant(src, "no_dot"), variant(src, "loads_only")
            for s in (no_dot, loads):
                ast.parse(s)
                assert not HEADS_CALL.search(s) and "acc = tl.zeros([R, BLOCK_N], dtype=tl.float32) + (" in s
            assert len(DECODE_CALL.findall(no_dot)) == len(DECODE_CALL.findall(src)) == 2  # plain and PREFETCH paths
            assert not DECODE_CALL.search(loads)
            # Every K operand (no_dot) or raw tile (loads_only) feeds the sum, so none is dropped.
            kv, raw = DECODE_CALL.findall(src)[0][1:]
            assert all(n.strip() in _summed(no_dot) for n in kv.split(","))
            assert all(n.strip() in _summed(loads) for n in raw.split(","))
            # no_decode: on the key-scaled paths, both calls of the conversion (plain and PREFETCH)
            # become the bitcast stand-in and the dot stays; elsewhere the variant is not made.
            no_dec = variant(src, "no_decode")
            if dot in ("fp8key", "fp8keylut"):
                ast.parse(no_dec)
                assert not DECODE_CALL.search(no_dec) and len(HEADS_CALL.findall(no_dec)) == 1
                assert no_dec.count("k0 = tl.reshape(tl.join(kb, kb), [BLOCK_N, DIMS])") == 2
            else:
                assert no_dec is None
    with pytest.raises(ValueError, match="Triton template"):
        breakdown_source("mxfp4_68", default_config("mxfp4_68", "fp8").replace(dot="wgmma"), "no_dot")


def _summed(src: str) -> str:
    """The per-key sum that stands in for the left-out stage."""
    import re

    m = re.search(r"acc = tl\.zeros\(\[R, BLOCK_N\], dtype=tl\.float32\) \+ \((.*)\)\[None, :\]", src)
    assert m, "no stand-in sum"
    return m.group(1)


@pytest.mark.parametrize("backend", ["soft", "lut"])
def test_decode_breakdown_variants_leave_out_exactly_their_stage(backend: str) -> None:
    # As for logits: the decode breakdown edits the generated module by its text. Each variant
    # must remove every call of its stage, on the plain and the PREFETCH paths, and nothing else,
    # whatever e2m1 backend the module was rendered with.
    import ast

    from benchmarks.decode_breakdown import ATTEND, GATHER, variant

    full = variant("full", backend).source
    # One pass function per list, each with its plain and its PREFETCH path.
    assert all(full.count(g) == 1 for g in GATHER) and full.count(ATTEND) == 4
    for name, gone in (("no_gather", GATHER), ("no_attend", (ATTEND,)), ("empty", GATHER + (ATTEND,))):
        src = variant(name, backend).source
        ast.parse(src)
        assert not any(g in src for g in gone), name
        kept = set(GATHER + (ATTEND,)) - set(gone)
        assert all(src.count(k) == full.count(k) for k in kept), name
