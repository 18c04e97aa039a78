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

from tuner.core import Bucket
from tuner.formats import get_format, page_bytes
from tuner.kernels.pack import PACK_PAGE_SIZE, default_config, pack, pack_key, render_variant
from tuner.warmup import (
    CompiledWhileServing, WarmupKey, backend_class, classify, count_compiles, keys_for, no_compiles, record_launches,
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
    out = []
    for name, v in la.bound().items():
        if isinstance(v, (torch.Tensor, int)) and not isinstance(v, bool) and name not in ("BLOCK_T", "TILES_PER_PROG"):
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
