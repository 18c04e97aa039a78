"""Warmup keys against the specialisations Triton itself computes (CPU: recorded launches and
Triton's backend classes; the GPU half -- warm, then serve under no_compiles -- is
benchmarks/warmup_serving.py)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest
import torch

from catalog.core import Bucket
from tuner.formats import get_format, page_bytes
from catalog.families.pack import PACK_PAGE_SIZE, default_config, pack_key, render_variant
from tuner.kernels.pack import pack
from tuner.warmup import (
    CompiledWhileServing, WarmupKey, _constexpr_names, backend_class, classify, count_compiles, keys_for, no_compiles,
    record_launches,
)

FMT = "nvfp4_288"
BUCKETS = [Bucket("N", 1, 64), Bucket("N", 65, 1024)]


def _real_launch_spec(n: int, cache: torch.Tensor, target: str) -> tuple:
    """Record the real pack launch for n tokens into `cache` and classify every argument the way
    Triton's backend for `target` does."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 512, generator=g).to(torch.bfloat16)
    slots = torch.randperm(cache.shape[0] * PACK_PAGE_SIZE, generator=g)[:n]
    with record_launches() as launches:
        pack(x, slots, cache, FMT, PACK_PAGE_SIZE, default_config(FMT))
    (la,) = launches
    backend = backend_class(target)
    constexprs = _constexpr_names(la)
    out = []
    for name, v in la.bound().items():
        if isinstance(v, (torch.Tensor, int)) and not isinstance(v, bool) and name not in constexprs:
            out.append((name,) + classify(v, backend))
        else:
            out.append((name, "constexpr", v))
    return tuple(out)


def _key_specs(keys: list[WarmupKey]) -> set[tuple]:
    return {tuple((a.name, a.type, a.spec) for a in k.args) for k in keys}


@pytest.fixture(scope="module")
def big_storage() -> torch.Tensor:
    # Over 2 GiB of storage that is never touched: torch.empty only reserves address space.
    pb = page_bytes(FMT, PACK_PAGE_SIZE)
    pages = (2**31 // pb) + 64
    return torch.empty((pages, pb), dtype=torch.uint8)


@pytest.mark.parametrize("target", ["gfx950", "sm_90"])
def test_pack_keys_cover_every_real_launch(target: str, big_storage: torch.Tensor) -> None:
    key = pack_key(FMT, target)
    pb = page_bytes(FMT, PACK_PAGE_SIZE)
    small = torch.zeros((64, pb), dtype=torch.uint8)
    view_of_big = big_storage[:64]  # a small view of a large storage counts as large
    assert view_of_big.numel() < 2**31 < view_of_big.untyped_storage().size()
    rng = random.Random(0)
    for bucket in BUCKETS:
        keys = keys_for("pack", key, default_config(FMT), bucket, target)
        specs = _key_specs(keys)
        seen = set()
        for n in [bucket.lo, bucket.hi] + [rng.randint(bucket.lo, bucket.hi) for _ in range(12)]:
            for cache in (small, big_storage, view_of_big):
                real = _real_launch_spec(n, cache, target)
                assert real in specs, f"{target} {bucket.name()} n={n}: Triton specialises {real}, no warmup key has it"
                seen.add(real)
        # No dead keys either: every enumerated key was hit by some real argument set.
        assert seen == specs, f"keys never hit: {specs - seen}"
        cache_specs = {dict((a.name, a.spec) for a in k.args)["cache_ptr"] for k in keys}
        # AMD with buffer ops tells a pool over 2 GiB from one under it; NVIDIA does not.
        assert cache_specs == ({"D", "DS"} if target == "gfx950" else {"D"})


def test_small_and_large_pool_keys_differ_by_pointer_range_in_ttir() -> None:
    key = pack_key(FMT, "gfx950")
    keys = keys_for("pack", key, default_config(FMT), BUCKETS[1], "gfx950")
    by_cache = {}
    for k in keys:
        d = {a.name: a.spec for a in k.args}
        if d["n_tokens"] == "":
            by_cache[d["cache_ptr"]] = k
    assert set(by_cache) == {"D", "DS"}
    source = render_variant(FMT, "soft").source
    script = (
        "import json, sys\n"
        "from tuner.warmup import WarmupKey, compile_key\n"
        "req = json.loads(sys.stdin.read())\n"
        "out = {}\n"
        "for name, k in req['keys'].items():\n"
        "    ck = compile_key(WarmupKey.from_json(k), req['source'], 'gfx950')\n"
        "    out[name] = ck.asm['ttir']\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    req = {"keys": {s: k.to_json() for s, k in by_cache.items()}, "source": source}
    res = subprocess.run([sys.executable, "-c", script], input=json.dumps(req), capture_output=True, text=True,
                         env=env, timeout=600, check=True)
    ttir = json.loads(res.stdout.strip().splitlines()[-1])
    def cache_arg(t: str) -> str:
        m = re.search(r"%cache_ptr: !tt.ptr<i8> \{([^}]*)\}", t)
        assert m, "cache_ptr not found in the TTIR signature"
        return m.group(1)

    assert "tt.pointer_range = 32" in cache_arg(ttir["DS"])
    assert "tt.pointer_range = 32" not in cache_arg(ttir["D"])
    # Apart from that attribute, the two binaries come from the same program.
    strip = lambda t: t.replace(", tt.pointer_range = 32 : i32", "")  # noqa: E731
    assert strip(ttir["DS"]) == strip(ttir["D"])


def test_keys_record_triton_version_and_round_trip() -> None:
    import triton

    keys = keys_for("pack", pack_key(FMT, "sm_90"), default_config(FMT), BUCKETS[0], "sm_90")
    assert keys and all(k.triton == triton.__version__ for k in keys)
    assert [WarmupKey.from_json(json.loads(json.dumps(k.to_json()))) for k in keys] == keys


def test_no_compiles_guard_sees_the_hook_triton_calls_before_compiling() -> None:
    from triton import knobs

    # Outside a GPU the JIT never reaches its compile step, so call the hook as Triton's
    # JITFunction._do_compile does; the real end-to-end check runs on the H200.
    with pytest.raises(CompiledWhileServing, match="pack_kernel"):
        with no_compiles():
            assert knobs.runtime.jit_cache_hook(key="k", repr="pack_kernel[num_warps=4](...)", fn=None,
                                                compile={}, is_manual_warmup=False, already_compiled=False) is False
    assert knobs.runtime.jit_cache_hook is None  # restored
    with no_compiles() as seen:
        pass
    assert seen == []
    with count_compiles() as seen:
        knobs.runtime.jit_cache_hook(key="a", repr="x")
        knobs.runtime.jit_cache_hook(key="b", repr="y")
    assert seen == ["x", "y"]


def _big_view(like: torch.Tensor) -> torch.Tensor:
    """A cache with the same page layout as `like` whose storage is over 2 GiB (never touched)."""
    pages = 2**31 // like.shape[1] + 8
    return torch.empty((pages, like.shape[1]), dtype=torch.uint8)[: like.shape[0]]


def _record_specs(family: str, key, config, inputs: dict, target: str) -> set[tuple]:  # noqa: ANN001
    from tuner.kernels import get_family

    backend = backend_class(target)
    with record_launches() as launches:
        get_family(family).run(key, config, inputs)
    out = set()
    for la in launches:
        consts = {p for p in la.arg_names if p.isupper()}  # the templates' constexprs are UPPER_CASE
        # Parameters the kernel marks do_not_specialize (by index or name) keep no value class
        # (a JITFunction's attribute; an InterpretedFunction keeps its decorator's kwargs).
        names = list(la.fn.arg_names)
        raw = getattr(la.fn, "do_not_specialize", None) or getattr(la.fn, "kwargs", {}).get("do_not_specialize") or ()
        nospec = {names[x] if isinstance(x, int) else x for x in raw}
        row = []
        for name, v in la.bound().items():
            if name in consts or isinstance(v, bool) or v is None:
                row.append((name, "constexpr", v))
            elif isinstance(v, float):
                row.append((name, "fp32", ""))
            else:
                row.append((name,) + classify(v, backend, specialize=name not in nospec))
        out.add((la.fn.fn.__name__, tuple(row)))
    return out


_READERS = [
    ("decode", Bucket("T", 1, 4), ("comp_cache", "win_cache"), ("nvfp4_288", "fp8_528"), {}),
    ("logits", Bucket("B", 1, 3, 200), ("cache",), ("mxfp4_68", "fp8"), {}),
]
# Tiles by tensor-descriptor loads (NVIDIA only): the descriptor is an argument of its own kind;
# the key-scaled mxfp4_68 paths take the scale rows by a second one.
_DESCRIPTOR = ("logits", Bucket("B", 1, 3, 200), ("cache",), ("fp8_132", "fp8"), {"LOADS": "descriptor", "num_stages": 3})
_SCALE_DESCRIPTOR = ("logits", Bucket("B", 1, 3, 200), ("cache",), ("mxfp4_68", "fp8"),
                     {"LOADS": "descriptor", "num_stages": 3, "dot": "fp8key"})


@pytest.mark.parametrize("target,family,bucket,pools,formats,over",
                         [(t, *r) for t in ("gfx950", "sm_90") for r in _READERS]
                         + [("sm_90", *_DESCRIPTOR), ("sm_90", *_SCALE_DESCRIPTOR)])
def test_reader_keys_cover_every_real_launch(family: str, bucket: Bucket, pools: tuple[str, ...],
                                             formats: tuple[str, str], over: dict, target: str) -> None:
    """Decode and logits on real argument sets: every size of the bucket, each pool small, or a
    small view of a storage over 2 GiB, with and without the optional arguments; what Triton
    specialises must be among the keys, and every key must be one of those."""
    from tuner.kernels import get_family
    from catalog.keys import make_key

    key = make_key(family, target, 64 if family == "logits" else 16, 512, 128 if family == "decode" else 0, formats)
    fam = get_family(family)
    cfg = fam.default_config(key).replace(**over)
    keys = keys_for(family, key, cfg, bucket, target)
    specs = {(k.fn, tuple((a.name, a.type, a.spec) for a in k.args)) for k in keys}
    seen: set[tuple] = set()
    # logits: any longest context up to the bucket's (the probes, and others between them).
    contexts = sorted({*fam.probe_contexts(bucket), 37, 100, 128, 150, 199}) if family == "logits" else [bucket.ctx]
    for ctx, n in ((c, n) for c in contexts for n in range(bucket.lo, bucket.hi + 1)):
        base = fam.make_inputs(key, Bucket(bucket.dim, n, n, ctx), "cpu", seed=100 + n)
        for big in [(), *[(p,) for p in pools], pools]:
            inputs = dict(base, **{p: _big_view(base[p]) for p in big})
            # Each choice of the optional arguments an engine may pass (decode: with and without sinks).
            real = set().union(*(_record_specs(family, key, cfg, v, target) for v in fam.probe_variants(inputs)))
            missing = real - specs
            assert not missing, f"{family} {target} n={n} ctx={ctx} pools over 2 GiB {big}: no key for {sorted(missing)[0]}"
            seen |= real
    assert seen == specs, f"keys never hit: {specs - seen}"
    if over.get("LOADS") == "descriptor":
        row = 128 if formats[0] == "fp8_132" else 64  # data bytes a record
        assert {a.type for k in keys for a in k.args if a.name == "k_desc"} == {f"tensordesc<u8[1, 64, {row}]>"}
        scale_rows = {a.type for k in keys for a in k.args if a.name == "s_desc"}
        assert scale_rows == ({"tensordesc<i32[1, 64]>"} if over.get("dot") == "fp8key" else {"*u8"}), scale_rows
    if target == "gfx950":
        # Each pool's pointer comes in both pointer-range classes; NVIDIA has no such class.
        for k in keys:
            assert all(a.spec in ("D", "DS") for a in k.args if a.type.startswith("*"))
        pool_specs = {a.spec for k in keys for a in k.args if a.name == _ptr(family)}
        assert pool_specs == {"D", "DS"}


def test_warm_reports_keys_it_cannot_compile_and_goes_on() -> None:
    # A bundle's key without its source, or naming a function its module lacks (a corrupt or
    # foreign bundle): reported as failed, never raised, so that an engine still starts.
    from tuner.warmup import ArgSpec, WarmupKey, warm

    r = render_variant("nvfp4_288", "soft")
    lost = WarmupKey(kernel="pack", source_hash="0" * 16, fn="pack_kernel", args=(), options=(), target="sm_90",
                     triton="3.6.0")
    wrong = WarmupKey(kernel="pack", source_hash=r.source_hash, fn="no_such_kernel",
                      args=(ArgSpec("n", "i32", ""),), options=(), target="sm_90", triton="3.6.0")
    report = warm([lost, wrong], {r.source_hash: r.source})
    assert report.keys == 2 and report.compiled == 0
    assert len(report.failed) == 2
    assert "no source" in report.failed[0] and "AttributeError" in report.failed[1]


def _ptr(family: str) -> str:
    return "comp_ptr" if family == "decode" else "cache_ptr"


def _warm_then_serve_without_compiles(key, cfg, device: str = "cpu") -> list:  # noqa: ANN001
    """warm() the logits keys of `cfg` over B=1..3 x 200 (recorded on `device`), then launch every
    size of the bucket for real, on a small pool and one over 2 GiB: nothing may compile."""
    from tuner.kernels import get_family
    from tuner.warmup import warm

    fam = get_family("logits")
    keys = keys_for("logits", key, cfg, Bucket("B", 1, 3, 200), "sm_90", device=device)
    rendered = fam.render(key, cfg)
    report = warm(keys, {rendered.source_hash: rendered.source})
    assert report.compiled >= 1 and not report.failed, report.failed
    for n in range(1, 4):
        inp = fam.make_inputs(key, Bucket("B", n, n, 200), "cuda", seed=n)
        pb = inp["cache"].shape[1]
        big = torch.empty(2**31 // pb + 8, pb, dtype=torch.uint8, device="cuda")
        big[: inp["cache"].shape[0]] = inp["cache"]
        with no_compiles():
            for cache in (inp["cache"], big):
                fam.run(key, cfg, dict(inp, cache=cache))
        torch.cuda.synchronize()
        del big
    return keys


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to compile for and launch on")
def test_gpu_descriptor_keys_warm_every_launch_over_2gib() -> None:
    # fp8_132 logits with descriptor loads: warm() compiles the keys (a stand-in descriptor over a
    # meta tensor), then real launches at every size of the bucket, on a pool over 2 GiB and a
    # small one, compile nothing.
    from tuner.kernels import get_family
    from catalog.keys import make_key

    key = make_key("logits", "sm_90", 64, 512, 0, ("fp8_132", "fp8"))
    cfg = get_family("logits").default_config(key).replace(LOADS="descriptor", num_stages=3)
    _warm_then_serve_without_compiles(key, cfg)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an sm_90 GPU to record, compile for and launch on")
def test_gpu_wgmma_keys_warm_every_launch_over_2gib() -> None:
    # The Gluon wgmma path (its descriptor carries a shared-memory layout): keys recorded on the
    # GPU (the interpreter does not run Gluon), warmed from stand-ins, then served as above.
    from tuner.kernels import get_family
    from catalog.families.logits import WGMMA_DESC_TYPE, dot_config
    from catalog.keys import make_key
    from tuner.targets import detect

    if detect().name != "sm_90":
        pytest.skip("the wgmma path is sm_90's")
    key = make_key("logits", "sm_90", 64, 512, 0, ("mxfp4_68", "fp8"))
    cfg = dot_config(get_family("logits").default_config(key), "wgmma").replace(TILES=4)
    keys = _warm_then_serve_without_compiles(key, cfg, device="cuda")
    assert {a.type for k in keys for a in k.args if a.name == "k_desc"} == {WGMMA_DESC_TYPE}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an sm_90 GPU to record, compile for and launch on")
@pytest.mark.parametrize("combine", ["kernel", "fused"])
def test_gpu_wgmma_decode_keys_warm_every_launch_over_2gib(combine: str) -> None:
    # The decode tile's wgmma path: a Gluon kernel plus the Triton module's decode_combine, launched
    # as its programmatic dependent (launch_pdl, a launch option its key must carry); with
    # COMBINE=fused the kernel's programs merge their partials themselves at these T (its MERGE
    # constexprs in the keys, no decode_combine launch). Keys recorded on the GPU for T = 1..4 (split
    # counts follow the SM count), warmed from the sources a bundle stores (`modules`), then every T
    # served for real on small pools and on a compressed pool over 2 GiB: nothing may compile.
    from tuner.kernels import get_family
    from catalog.families.decode import decode_key, default_config
    from catalog.families.decode_wgmma import wgmma_config
    from tuner.targets import detect
    from tuner.warmup import warm

    if detect().name != "sm_90":
        pytest.skip("the wgmma path is sm_90's")
    fam = get_family("decode")
    key = decode_key("nvfp4_288", "fp8_528", "sm_90")
    cfg = wgmma_config(default_config("nvfp4_288", "fp8_528").replace(COMBINE=combine))
    keys = keys_for("decode", key, cfg, Bucket("T", 1, 4), "sm_90", device="cuda")
    sources = {r.source_hash: r.source for r in fam.modules(key, cfg)}
    merges = [k for k in keys if k.fn == "decode_combine"]
    mains = [k for k in keys if k.fn == "decode_wgmma_kernel"]
    merge_specs = [a.spec for k in mains for a in k.args if a.name == "MERGE"]
    assert mains and len(merge_specs) == len(mains)  # the MERGE constexpr is part of every key
    if combine == "kernel":
        assert {k.source_hash for k in keys} == set(sources)  # both modules, nothing a bundle would lack
        assert merges and all(dict(k.options).get("launch_pdl") is True for k in merges)
        assert not any(merge_specs)
    else:  # merged in the kernel at T <= 4 (at most 40 programs); the merge module stays for larger T
        assert {k.source_hash for k in keys} < set(sources) and not merges
        assert all(spec is True for spec in merge_specs)
    # Earlier tests of this process may have compiled these binaries already: forget them, so that
    # warm() has to compile every key and serving without compiles proves warm() did it.
    from triton.runtime.jit import JITFunction

    from templates import render as R

    for r in fam.modules(key, cfg):
        for fn in vars(R.load(r)).values():
            if isinstance(fn, JITFunction):
                fn.device_caches.clear()
    report = warm(keys, sources)
    assert report.compiled >= (2 if combine == "kernel" else 1) and not report.failed, report.failed  # the kernel, its merge
    for n in range(1, 5):
        inp = fam.make_inputs(key, Bucket("T", n, n), "cuda", seed=n)
        small = inp["comp_cache"]
        big = torch.zeros(2**31 // small.shape[1] + 8, small.shape[1], dtype=torch.uint8, device="cuda")
        big[: small.shape[0]] = small
        with no_compiles():
            for cache in (small, big):
                out = fam.run(key, cfg, dict(inp, comp_cache=cache))
        torch.cuda.synchronize()
        assert fam.verify(key, inp, out) is None
        del big
