"""Which Gluon loop shapes keep an async wgmma in flight across a loop's back edge on sm_90, and
which make ptxas serialise every wgmma of the loop (a WARPGROUP.DEPBAR after each instruction of
a chain): compiled on the CPU for sm_90 and read from the SASS. No GPU.

  alternating   a fresh accumulator each tile; the previous tile's, still in flight, is carried
                to the next iteration and waited for there (the shape of "epilogue of tile i-1
                while tile i's MMA runs" with two accumulators): serialised.
  chained       the one loop-carried accumulator passed back in as the next MMA's input with
                use_acc=False (its registers are rewritten in place, nothing is copied at the
                back edge); each iteration first waits for it, reads it, issues the next tile's
                MMA, then does other work under it: not serialised.
  chained_mma2  as chained, with a second (bf16) MMA on the relu'd scores of the previous tile
                issued before the next MMA 1 and waited for with wait_group(1): not serialised.

The logits `wgmma` kernel (templates/logits_wgmma.py.j2) waits for each tile's MMAs inside its
iteration. The `chained_mma2` shape built into it (the lookups of tile i+1 under MMA 1 of tile i)
compiled unserialised but measured 7% slower on the H200, its 90 registers leaving 5 programs an
SM instead of 7 (results/logits_wgmma_variants.md).

    python benchmarks/wgmma_pipelining_probe.py    # a markdown table
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, warpgroup_mma, warpgroup_mma_wait,
)

SHAPES = ("alternating", "chained", "chained_mma2")


@gluon.jit
def _probe(x_ptr, out_ptr, T, SHAPE: gl.constexpr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 32])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 8, 16])
    p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_l, k_width=2)
    sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv)
    blk: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, blk))
    c = gl.arange(0, 128, layout=gl.SliceLayout(0, blk))
    a_s = gl.allocate_shared_memory(gl.float8e4nv, [2, 64, 128], sl)
    a_s.index(0).store(gl.load(x_ptr + r[:, None] * 128 + c[None, :]))
    b_s = gl.allocate_shared_memory(gl.float8e4nv, [64, 128], sl, gl.load(x_ptr + r[:, None] * 128 + c[None, :]))
    w_s = gl.allocate_shared_memory(gl.bfloat16, [8, 64], gl.NVMMASharedLayout.get_default_for([8, 64], gl.bfloat16),
                                    gl.zeros([8, 64], gl.bfloat16, blk))
    fence_async_shared()
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_l))
    orow = gl.arange(0, 64, layout=gl.SliceLayout(1, o_l))
    acc = warpgroup_mma(a_s.index(0), b_s.permute((1, 0)), gl.zeros([64, 64], gl.float32, acc_l), use_acc=False,
                        is_async=True)
    for i in range(1, T):
        if SHAPE == "alternating":
            nxt = warpgroup_mma(a_s.index(i % 2), b_s.permute((1, 0)), gl.zeros([64, 64], gl.float32, acc_l),
                                use_acc=False, is_async=True)
            done = warpgroup_mma_wait(1, deps=(acc,))
            gl.store(out_ptr + i * 64 + rows, gl.sum(gl.maximum(done, 0.0), axis=1))
            acc = nxt
        elif SHAPE == "chained":
            acc = warpgroup_mma_wait(0, deps=(acc,))
            s = gl.sum(gl.maximum(acc, 0.0), axis=1)
            acc = warpgroup_mma(a_s.index(i % 2), b_s.permute((1, 0)), acc, use_acc=False, is_async=True)
            gl.store(out_ptr + i * 64 + rows, s)
        else:
            acc = warpgroup_mma_wait(0, deps=(acc,))
            p = gl.convert_layout(gl.maximum(acc, 0.0).to(gl.bfloat16), p_l)
            o = warpgroup_mma(p, w_s.permute((1, 0)), gl.zeros([64, 8], gl.float32, o_l), use_acc=False, is_async=True)
            acc = warpgroup_mma(a_s.index(i % 2), b_s.permute((1, 0)), acc, use_acc=False, is_async=True)
            o = warpgroup_mma_wait(1, deps=(o,))
            gl.store(out_ptr + i * 64 + orow, gl.sum(o, axis=1))
        # work under the MMA in flight: the next tile's operand into the other buffer
        a_s.index((i + 1) % 2).store(gl.load(x_ptr + i * 8192 + r[:, None] * 128 + c[None, :]))
        fence_async_shared()
    acc = warpgroup_mma_wait(0, deps=(acc,))
    gl.store(out_ptr + rows, gl.sum(acc, axis=1))


def mma_sequence(shape: str) -> list[str]:
    """The kernel's wgmma-related SASS, in order (QGMMA/HGMMA, WARPGROUP.ARRIVE/DEPBAR)."""
    import triton
    from triton.backends.compiler import GPUTarget

    from benchmarks.common import sass_ops
    from tuner.compile import ast_source

    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}")
    src = ast_source(_probe, {"x_ptr": "*fp8e4nv", "out_ptr": "*fp32", "T": "i32", "SHAPE": "constexpr"},
                     {"SHAPE": shape}, {})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return [o.mnemonic for o in sass_ops(k.asm["cubin"]) if "GMMA" in o.mnemonic or "WARPGROUP" in o.mnemonic]


def serialised(seq: list[str]) -> bool:
    """Whether ptxas split every MMA chain (the 4 K-steps of one tile's MMA) into single
    instructions, each waited for: no two MMA instructions follow each other anywhere."""
    return not any("GMMA" in a and "GMMA" in b for a, b in zip(seq, seq[1:]))


def main() -> int:
    import triton

    print(f"# wgmma in flight across a loop's back edge (sm_90, static)\n\ntriton {triton.__version__}, "
          "`benchmarks/wgmma_pipelining_probe.py` on the CPU.\n\n| shape | serialised | wgmma SASS in order |\n|---|---|---|")
    for shape in SHAPES:
        seq = mma_sequence(shape)
        print(f"| {shape} | {'yes' if serialised(seq) else 'no'} | {' '.join(seq)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
