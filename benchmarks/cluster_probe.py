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

CPU (`python benchmarks/cluster_probe.py`): compiles for sm_90 and prints what the PTX holds.
GPU (`--run`): launches 3 clusters; CTA 0 reads back what CTA 1 wrote into its shared memory
(`offs * 10 + 1`), which only a working DSMEM store gives.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

N = 128
CLUSTER = 2


@gluon.jit
def _cta_rank(like):
    # This CTA's rank in its cluster (`like` only gives the result its shape and layout).
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r,r", [like], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _peer_address(byte_offset, rank):
    # The shared address `byte_offset` bytes into Triton's dynamic shared memory, in the other CTA.
    return gl.inline_asm_elementwise(
        """{ .reg .u32 a, p; mov.u32 a, global_smem; add.u32 a, a, $1; xor.b32 p, $2, 1;
        mapa.shared::cluster.u32 $0, a, p; }""",
        "=r,r,r", [byte_offset, rank], dtype=gl.int32, is_pure=False, pack=1)


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


def compile_for(arch: int = 90) -> Any:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    src = GluonASTSource(fn=cluster_probe_kernel, signature={"out_ptr": "*i32", "N": "constexpr"},
                         constexprs={"N": N}, attrs={})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4, "num_ctas": CLUSTER})


def ptx_facts(ptx: str) -> dict[str, bool]:
    """What the probe's PTX must hold for the cluster path to be real."""
    return {
        "cluster of 2": ".reqnctapercluster 2" in ptx,
        "DSMEM address": "mapa.shared::cluster.u32" in ptx,
        "DSMEM store": "st.shared::cluster.b32" in ptx,
        "cluster barrier": "barrier.cluster.arrive.release.aligned" in ptx,
        "program id is the cluster's": "%clusterid.x" in ptx,
    }


def run_on_gpu(clusters: int = 3) -> list[int]:
    """Launch `clusters` clusters; return the rows where CTA 0 did not read CTA 1's values."""
    import torch

    out = torch.full((clusters, N), -1, dtype=torch.int32, device="cuda")
    cluster_probe_kernel[(clusters,)](out, N=N, num_warps=4, num_ctas=CLUSTER)
    torch.cuda.synchronize()
    want = torch.arange(N, dtype=torch.int32, device="cuda") * 10 + 1
    return [i for i in range(clusters) if not torch.equal(out[i], want)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="launch it on the local GPU (sm_90)")
    args = ap.parse_args()
    facts = ptx_facts(compile_for().asm["ptx"])
    for name, ok in facts.items():
        print(f"  {name}: {'yes' if ok else 'NO'}")
    if not all(facts.values()):
        return 1
    if args.run:
        bad = run_on_gpu()
        print("DSMEM round trip:", "ok" if not bad else f"wrong in clusters {bad}")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
