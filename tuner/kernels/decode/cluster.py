"""The 2-CTA cluster build of the QK / PV split (MMA=wgmma_hmpvc): where its buffers lie, its module,
and the launcher's check of a compile (its compile case: `xcompile.cluster_case`).

Its two CTAs take one token's two 64-head groups and each converts half of every tile into both
CTAs' K buffers (a `cp.async.bulk` into the peer's shared memory, remote mbarrier arrivals), so a
tile is dequantized once for 128 heads, as FlashMLA's sm90 decode does (benchmarks/README.md).
Gluon names no shared address, so the template's inline PTX reaches the peer's buffers at byte
offsets into Triton's dynamic shared memory. The offsets come from Triton's own allocator pass over
the kernel's TTGIR (`shared_offsets`); the catalog holds them (`WGMMA_CLUSTER_OFFSETS`) because the
catalog renders without a compiler, and `check_offsets` (a test over the launcher's specialisations,
and the launcher once a specialisation before its first launch) holds them to what the compiler
placed.
"""

from __future__ import annotations

import re
import tempfile
from functools import lru_cache
from typing import Any, Mapping

from catalog.families.decode import render_wgmma
from templates import render as R
from tuner.kernels.base import XCompileCase

# The allocations the peer reaches, as Triton's TTGIR types them, in the kernel's program order:
# the K buffers (two tiles of four [64 keys, 128 dims] bf16 chunks), then five pairs of mbarriers
# (ready, empty, p_full, p_free, and last the cluster's pfree) and `fin` between them.
KV_TYPE = "8x64x128xbf16"
BARRIER_PAIR_TYPE = "2x1xi64"


def shared_offsets(compiled: Any, arch: int = 90) -> list[tuple[str, int]]:
    """Each shared allocation's type and byte offset in Triton's dynamic shared memory, in program
    order: the kernel's TTGIR through the passes of `make_llir` up to Triton's shared-memory
    allocator (Gluon exposes no buffer's address; `mapa` needs one)."""
    from triton._C.libtriton import ir, nvidia, passes

    ctx = ir.context()
    ir.load_dialects(ctx)
    nvidia.load_dialects(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".ttgir") as f:
        f.write(compiled.asm["ttgir"])
        f.flush()
        mod = ir.parse_mlir_module(f.name, ctx)
    mod.context = ctx
    pm = ir.pass_manager(ctx)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    # The PTX version the compile chose (".version 8.7" -> 87), as make_llir passes it.
    major, minor = re.search(r"^\.version (\d+)\.(\d+)", compiled.asm["ptx"], re.M).groups()
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, arch, int(major) * 10 + int(minor))
    pm.run(mod, "shared_offsets")
    alloc = r"ttg\.local_alloc \{allocation\.offset = (\d+) : i32\} : \(\) -> !ttg\.memdesc<([^,>]+)"
    return [(ty, int(off)) for off, ty in re.findall(alloc, str(mod))]


def buffer_offsets(allocs: list[tuple[str, int]]) -> dict[str, int]:
    """The offsets the cluster build's inline PTX takes, from `shared_offsets`' list: its K
    buffers ("kv"), its ready barriers (the first barrier pair) and the peer's free words ("pfree",
    the last pair)."""
    pairs = [off for ty, off in allocs if ty == BARRIER_PAIR_TYPE]
    kv = [off for ty, off in allocs if ty == KV_TYPE]
    if len(kv) != 1 or len(pairs) != 5:
        raise ValueError(f"not the cluster build's allocations: {allocs}")
    return {"kv": kv[0], "ready": pairs[0], "pfree": pairs[-1]}


ZERO_OFFSETS = {k: {"kv": 0, "ready": 0, "pfree": 0} for k in ("whole", "split")}


def placed_offsets(case: XCompileCase) -> dict[str, int]:
    """Where Triton places the buffers of a cluster build's case (xcompile.cluster_case, rendered
    with ZERO_OFFSETS: offsets do not change what is allocated), compiled for sm_90 here on the CPU."""
    from tuner.compile import _request, compile_request

    return buffer_offsets(shared_offsets(compile_request(_request(case, "sm_90"))))


def check_offsets(compiled: Any, split: bool, offsets: Mapping[str, Mapping[str, int]]) -> None:
    """Raise unless the compiled cluster build's buffers lie where its inline PTX reaches them (the
    `offsets` its module was rendered with: its PEER_OFFSETS)."""
    placed = buffer_offsets(shared_offsets(compiled))
    want = dict(offsets["split" if split else "whole"])
    if placed != want:
        raise RuntimeError(f"the cluster build (SPLIT={split}) places its buffers at {placed}, not at the {want} its "
                           "module reaches (WGMMA_CLUSTER_OFFSETS: a Triton other than the pinned one?)")


@lru_cache(maxsize=16)
def cluster_module(comp: str, win: str) -> Any:
    """The cluster render of a pair's wgmma module, loaded (the launcher's)."""
    return R.load(render_wgmma(comp, win, cluster=True))


# The specialisations whose buffers were found where the inline PTX reaches them (`check_once`).
_CHECKED: set[tuple[Any, ...]] = set()


def check_once(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], kw: dict[str, Any],
               offsets: Mapping[str, Mapping[str, int]]) -> None:
    """`check_offsets` on the launch's specialisation before its first launch: compiled by
    `warmup` (nothing runs), then checked against `offsets` (its module's PEER_OFFSETS); once per
    kernel and constexprs."""
    spec = (kernel, *sorted(kw.items()))
    if spec in _CHECKED:
        return
    compiled = kernel.warmup(*args, grid=grid, **kw)
    if compiled is not None:  # None: launches recorded, not run (tuner.warmup.record_launches)
        check_offsets(compiled, bool(kw["SPLIT"]), offsets)
        _CHECKED.add(spec)
