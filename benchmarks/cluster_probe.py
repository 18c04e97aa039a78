"""Can a Gluon kernel (triton 3.6) run as a 2-CTA cluster and write into the peer CTA's shared memory?

Issue 28 at 128 heads: each of the two 64-head programs of the QK / PV split dequantizes every tile,
and the producer binds (3.3 us a tile, decode_timeline_hmpv_128_resident_h200.md). FlashMLA's sm90
sparse decode launches the two 64-head blocks of 128 heads as one 2-CTA cluster: each CTA's producer
dequantizes half the tile's keys and stores the bf16 rows into its own shared memory and the peer's
(DSMEM), with a remote mbarrier arrive, so each tile is converted once. Gluon 3.6 has no DSMEM or
cluster primitives (only `fence_async_shared(cluster=True)`), so this probe does it in inline PTX:

- `num_ctas=2` at compile/launch makes the program a cluster (`.reqnctapercluster 2`); every layout
  then needs a `cga_layout` (here `[[0]]`: replicated on both CTAs), and `program_id` is the cluster's;
- `%cluster_ctarank` tells the CTAs apart; `mapa.shared::cluster` maps a shared address (Triton's
  `global_smem` base plus the buffer's offset: 0 for the only allocation here) to the peer's, and
  `st.shared::cluster` stores there; `barrier.cluster.arrive/wait` orders it;
- a store of a replicated layout is issued by CTA rank 0 only (Triton masks the copies), so a
  kernel whose CTAs hold different values needs CTA-split layouts (heads across CTAs) for its
  outputs, or stores of its own.

A second kernel is the mechanism itself (`half_tile_kernel`): each CTA writes half of a tile's rows
into its own NVMMA-swizzled tile, then thread 0 sends that half into the same place in the peer's
tile with one `cp.async.bulk.shared::cluster.shared::cta`, completing the bytes the peer's mbarrier
expects; each CTA waits on its own barrier and then holds the whole tile, then arrives on its own
`done` barrier and, remotely (`mbarrier.arrive.release.cluster` through `mapa`), on the peer's. The
buffers' offsets come from Triton's own allocator pass (`shared_offsets`), the kernel compiled once
to place them and once with them as constexprs (checked unmoved).

CPU (`python benchmarks/cluster_probe.py`): compiles both for sm_90 and prints what their PTX holds.
GPU (`--run`): launches 3 clusters of each; the first's CTA 0 must read what CTA 1 wrote into its
shared memory (`offs * 10 + 1`), and in the second both CTAs must read back the whole tile, which
only working DSMEM stores and bulk copies give.
`--decode PAIR CFG`: one of today's decode builds compiled as a 2-CTA cluster, from the wgmma module
rendered with `cluster=True` (every layout replicated on both CTAs), to see what Triton takes of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from tuner.kernels.decode.cluster import shared_offsets

N = 128
CLUSTER = 2
ROWS, COLS = 64, 64  # a tile: keys x bf16 dims, one 128-byte swizzle atom wide (rows contiguous)


@gluon.jit
def _cta_rank(like):
    # This CTA's rank in its cluster (`like` only gives the result its shape and layout).
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r,r", [like], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _local_address(byte_offset):
    # The shared address `byte_offset` bytes into Triton's dynamic shared memory, in this CTA.
    return gl.inline_asm_elementwise("{ .reg .u32 a; mov.u32 a, global_smem; add.u32 $0, a, $1; }", "=r,r",
                                     [byte_offset], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _peer_address(byte_offset, rank):
    # The same place in the other CTA's shared memory (`rank`: this CTA's).
    return gl.inline_asm_elementwise("{ .reg .u32 p; xor.b32 p, $2, 1; mapa.shared::cluster.u32 $0, $1, p; }",
                                     "=r,r,r", [_local_address(byte_offset), rank], dtype=gl.int32, is_pure=False,
                                     pack=1)


@gluon.jit
def _store_to_peer(address, value):
    return gl.inline_asm_elementwise("st.shared::cluster.b32 [$1], $2; mov.u32 $0, 0;", "=r,r,r", [address, value],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _cluster_sync(like):
    return gl.inline_asm_elementwise(
        "barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned; mov.u32 $0, $1;", "=r,r",
        [like], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def cluster_probe_kernel(out_ptr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[0]])
    S: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0], cga_layout=[[0]])
    smem = gl.allocate_shared_memory(gl.int32, [N], S)  # the only allocation: offset 0
    offs = gl.arange(0, N, layout=L)
    rank = _cta_rank(offs)
    _store_to_peer(_peer_address(offs * 4, rank), offs * 10 + rank)
    _cluster_sync(offs)
    gl.store(out_ptr + gl.program_id(0) * N + offs, smem.load(L))  # issued by rank 0 only


@gluon.jit
def _bulk_to_peer(src, dst, bar, nbytes):
    # Thread 0 of the CTA copies `nbytes` of its shared memory at address `src` to the peer CTA's at
    # `dst` (cp.async.bulk, shared::cta -> shared::cluster), completing that many bytes of the
    # transaction the peer's mbarrier at `bar` expects: how a producer hands its half of a tile
    # over. One element a thread, or thread 0 issues it once an element.
    return gl.inline_asm_elementwise(
        """{ .reg .pred t; mov.u32 $0, %tid.x; setp.eq.u32 t, $0, 0;
        @t cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$2], [$1], $4, [$3]; }""",
        "=r,r,r,r,r", [src, dst, bar, nbytes], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _arrive_on_peer(bar):
    # Thread 0 arrives once on the peer CTA's mbarrier at address `bar` (one element a thread).
    return gl.inline_asm_elementwise(
        """{ .reg .pred t; mov.u32 $0, %tid.x; setp.eq.u32 t, $0, 0;
        @t mbarrier.arrive.release.cluster.shared::cluster.b64 _, [$1]; }""",
        "=r,r", [bar], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _store_global(ptr, value):
    # A store every CTA issues (a store of a replicated layout is CTA rank 0's only).
    return gl.inline_asm_elementwise("st.global.b32 [$1], $2; mov.u32 $0, 0;", "=r,l,r", [ptr, value],
                                     dtype=gl.int32, is_pure=False, pack=1)


# Layouts replicated on both CTAs (a cga basis of zeros), built here: a list literal inside a
# jit function becomes a Triton tuple, and triton 3.6 then fails comparing two such layouts.
HALF_B = gl.constexpr(gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0], cga_layout=[[0, 0]]))
HALF_T = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=[[0, 0]]))
HALF_M = gl.constexpr(mbarrier.MBarrierLayout(cga_layout=[[0]]))
HALF_I = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[0]]))


@gluon.jit
def half_tile_kernel(out_ptr, TILE_OFF: gl.constexpr, BAR_OFF: gl.constexpr, DONE_OFF: gl.constexpr,
                     ROWS: gl.constexpr, COLS: gl.constexpr):
    # Each CTA of a 2-CTA cluster converts half of a tile's rows (keys) into its own shared tile, then
    # sends that half into the peer's tile; each waits on its own mbarrier for its own arrival and the
    # peer's bytes, then holds the whole tile. out[cluster, rank, r, c] is what the CTA read back.
    # Then each says it is done with the tile on its own `done` barrier and, remotely, on the peer's
    # (a decode build's empty barriers, which count both CTAs' consumers).
    B: gl.constexpr = HALF_B
    T: gl.constexpr = HALF_T
    tile = gl.allocate_shared_memory(gl.bfloat16, [ROWS, COLS], T)
    M: gl.constexpr = HALF_M
    bar = gl.allocate_shared_memory(gl.int64, [1], M)
    done = gl.allocate_shared_memory(gl.int64, [1], M)
    mbarrier.init(bar, count=1)
    mbarrier.init(done, count=2)  # this CTA's arrival and the peer's
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, B))[:, None]
    c = gl.arange(0, COLS, layout=gl.SliceLayout(0, B))[None, :]
    rank = _cta_rank(r + c)
    want = ((r * 3 + c) % 251).to(gl.bfloat16)
    mine = (r // (ROWS // 2)) == rank
    tile.store(gl.where(mine, want, -1.0))  # the other half: -1 until the peer's bytes land
    fence_async_shared()
    gl.thread_barrier()
    _cluster_sync(r + c)  # both barriers initialised and both local halves written
    mbarrier.expect(bar, ROWS // 2 * COLS * 2)
    # One element a thread, so that thread 0 issues the copy once.
    I: gl.constexpr = HALF_I
    i = gl.arange(0, 128, layout=I)
    rank1 = _cta_rank(i)
    half = ROWS // 2 * COLS * 2
    mine_at = TILE_OFF + rank1 * half
    _bulk_to_peer(_local_address(mine_at), _peer_address(mine_at, rank1), _peer_address(BAR_OFF + i * 0, rank1),
                  i * 0 + half)
    mbarrier.wait(bar, 0)
    got = tile.load(B).to(gl.float32).to(gl.int32, bitcast=True)
    base = (gl.program_id(0) * 2 + rank) * ROWS * COLS
    _store_global(out_ptr + base + r * COLS + c, got)
    gl.thread_barrier()
    mbarrier.arrive(done)
    _arrive_on_peer(_peer_address(DONE_OFF + i * 0, rank1))
    mbarrier.wait(done, 0)  # neither CTA leaves while the peer may still read or signal its memory


def _compile(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], arch: int = 90) -> Any:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    src = GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs={})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4, "num_ctas": CLUSTER})


def compile_for(arch: int = 90) -> Any:
    return _compile(cluster_probe_kernel, {"out_ptr": "*i32", "N": "constexpr"}, {"N": N}, arch)


HALF_SIG = {"out_ptr": "*i32", "TILE_OFF": "constexpr", "BAR_OFF": "constexpr", "DONE_OFF": "constexpr",
            "ROWS": "constexpr", "COLS": "constexpr"}


def compile_half_tile(arch: int = 90) -> tuple[Any, dict[str, int]]:
    """half_tile_kernel compiled with its buffers' real offsets: once to place them, once with them
    (the offsets are constexprs that do not change what is allocated; checked)."""
    consts = {"TILE_OFF": 0, "BAR_OFF": 0, "DONE_OFF": 0, "ROWS": ROWS, "COLS": COLS}
    first = shared_offsets(_compile(half_tile_kernel, HALF_SIG, consts, arch), arch)
    bars = [o for ty, o in first if ty.endswith("i64")]  # in program order: bar, done
    offs = {"tile": next(o for ty, o in first if ty.endswith("bf16")), "bar": bars[0], "done": bars[1]}
    k = _compile(half_tile_kernel, HALF_SIG, {**consts, "TILE_OFF": offs["tile"], "BAR_OFF": offs["bar"],
                                              "DONE_OFF": offs["done"]}, arch)
    assert shared_offsets(k, arch) == first, "the offsets moved between the two compiles"
    return k, offs


def ptx_facts(ptx: str) -> dict[str, bool]:
    """What cluster_probe_kernel's PTX must hold for the cluster path to be real."""
    return {
        "cluster of 2": ".reqnctapercluster 2" in ptx,
        "DSMEM address": "mapa.shared::cluster.u32" in ptx,
        "DSMEM store": "st.shared::cluster.b32" in ptx,
        "cluster barrier": "barrier.cluster.arrive.release.aligned" in ptx,
        "program id is the cluster's": "%clusterid.x" in ptx,
    }


def half_tile_facts(ptx: str) -> dict[str, bool]:
    """What half_tile_kernel's PTX must hold: the bulk copy into the peer with its mbarrier's
    transaction, each CTA's own barrier set up and awaited."""
    return {
        "bulk copy to the peer": "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes" in ptx,
        "barrier expects the peer's bytes": "mbarrier.arrive.expect_tx.shared.b64" in ptx,
        "barrier awaited": "mbarrier.try_wait.parity.shared.b64" in ptx,
        "remote arrive": "mbarrier.arrive.release.cluster.shared::cluster.b64" in ptx,
    }


def run_on_gpu(offs: dict[str, int], clusters: int = 3) -> dict[str, list[int]]:
    """Launch both probes on `clusters` clusters (`offs`: compile_half_tile's); for each, the
    clusters whose read-back was wrong."""
    import torch

    out = torch.full((clusters, N), -1, dtype=torch.int32, device="cuda")
    cluster_probe_kernel[(clusters,)](out, N=N, num_warps=4, num_ctas=CLUSTER)
    tile = torch.full((clusters, CLUSTER, ROWS, COLS), -1, dtype=torch.int32, device="cuda")
    half_tile_kernel[(clusters,)](tile, TILE_OFF=offs["tile"], BAR_OFF=offs["bar"], DONE_OFF=offs["done"], ROWS=ROWS,
                                  COLS=COLS, num_warps=4, num_ctas=CLUSTER)
    torch.cuda.synchronize()
    want = torch.arange(N, dtype=torch.int32, device="cuda") * 10 + 1
    r = torch.arange(ROWS, device="cuda")[:, None]
    c = torch.arange(COLS, device="cuda")[None, :]
    want_tile = ((r * 3 + c) % 251).float().view(torch.int32)
    return {"dsmem store": [i for i in range(clusters) if not torch.equal(out[i], want)],
            "half tiles": [i for i in range(clusters) if not all(torch.equal(tile[i, k], want_tile)
                                                                  for k in range(CLUSTER))]}


def decode_as_cluster(pair: str, cfg: str) -> dict[str, Any]:
    """A decode wgmma build (`static_profile.py`'s case for `cfg`) from the module rendered with
    `cluster=True` (every layout replicated on both CTAs), compiled for sm_90 with num_ctas=2: its
    static stats and whether the PTX is a cluster's, or the compiler's error (its details on
    stderr). The build's code is today's; this asks only whether Triton takes it as a cluster."""
    import dataclasses

    import triton

    from benchmarks.static_profile import cases_for
    from catalog.families.decode import render_wgmma
    from tuner.compile import _request, compile_with_stats

    real = triton.compile

    def as_cluster(src: Any, target: Any = None, options: dict | None = None) -> Any:
        return real(src, target=target, options={**(options or {}), "num_ctas": CLUSTER})

    ((_, case),) = cases_for("decode", pair.split(","), "bf16", cfg)
    case = dataclasses.replace(case, rendered=render_wgmma(*pair.split(","), cluster=True))
    triton.compile = as_cluster
    try:
        k, stats = compile_with_stats(_request(case, "sm_90"))
    except Exception as e:  # the compiler's verdict is the answer
        return {"error": str(e).strip().splitlines()[-1][:300]}
    finally:
        triton.compile = real
    ptx = k.asm["ptx"]
    return {**{key: stats[key] for key in ("registers", "spills", "shared_bytes")},
            "cluster of 2": ".reqnctapercluster 2" in ptx,
            "ctarank reads (masks of replicated stores)": ptx.count("%cluster_ctarank")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="launch them on the local GPU (sm_90)")
    ap.add_argument("--decode", nargs=2, metavar=("PAIR", "CFG"),
                    help="instead: compile a decode build as a 2-CTA cluster "
                         "(e.g. nvfp4_288,fp8_528 MMA=wgmma_hmpv; the compiler's error goes to stderr)")
    args = ap.parse_args()
    if args.decode:
        got = decode_as_cluster(*args.decode)
        print(json.dumps(got))
        return 1 if "error" in got else 0
    half_tile, offs = compile_half_tile()
    facts = {**ptx_facts(compile_for().asm["ptx"]), **half_tile_facts(half_tile.asm["ptx"])}
    for name, ok in facts.items():
        print(f"  {name}: {'yes' if ok else 'NO'}")
    if not all(facts.values()):
        return 1
    if args.run:
        bad = run_on_gpu(offs)
        for name, clusters in bad.items():
            print(f"{name} round trip:", "ok" if not clusters else f"wrong in clusters {clusters}")
        return 1 if any(bad.values()) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
