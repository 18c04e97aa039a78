"""Static instruction cost of a pack config on sm_90, without a GPU: compile with the
specialisations a real launch has (16-byte aligned pointers and strides), disassemble the cubin with
the cuobjdump that ships with Triton, and count SASS instructions x lanes per packed element.

Straight-line code (pack has no loop), so the count of the kernel's body -- up to its last EXIT,
leaving out the out-of-line slow paths after it (a 64-bit division's, an fp32 division's special
operands), which the fast path never enters -- is the dynamic count of the fast path; on the H200
pack's time tracked this number across codec versions (benchmarks/results/pack_h200.md).

    python benchmarks/sass_count.py nvfp4_288 4 32 2        # format BLOCK_T TILES_PER_PROG num_warps
    python benchmarks/sass_count.py fp8_528 8 8 1 cvt       # ... and the element backend (default soft)
    python benchmarks/sass_count.py fp8_584 4 8 1 cvt 8 2   # ... BLOCKS_PER_PROG and num_stages

With BLOCKS_PER_PROG > 1 the kernel loops over its blocks, and the count is static (the pipelined
loop's prologue, body and epilogue once each), not the dynamic count per element.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.pop("TRITON_INTERPRET", None)  # the module's kernels must be JITFunctions

import triton  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from benchmarks.common import alu_share, kernel_body, sass_ops  # noqa: E402
from templates import render as R  # noqa: E402
from tuner.formats import get_format  # noqa: E402
from catalog.families.pack import default_config, render_variant  # noqa: E402
from tuner.kernels.pack import ARG_TYPES, launch_constexprs  # noqa: E402
from tuner.kernels.signature import kernel_signature  # noqa: E402
from tuner.targets import get_target, gpu_target  # noqa: E402

# Divisible by 16 (pointers: 16-byte aligned) in the launches measured.
ALIGNED = ("xw_ptr", "slot_ptr", "cache_ptr", "cache16_ptr", "stride_w", "page_size", "page_bytes")


def count(fmt: str, block_t: int, tiles: int, warps: int, backend: str = "soft",
          blocks: int = 1, stages: int = 1) -> tuple[int, float, collections.Counter]:
    rendered = render_variant(fmt, backend)
    fn = R.load(rendered).pack_kernel
    names = list(fn.arg_names)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in ALIGNED}
    cfg = default_config(fmt).replace(backend=backend, BLOCK_T=block_t, TILES_PER_PROG=tiles, num_warps=warps,
                                      BLOCKS_PER_PROG=blocks, num_stages=stages)
    src = ASTSource(fn=fn, signature=kernel_signature(rendered, "pack_kernel", ARG_TYPES), attrs=attrs,
                    constexprs=launch_constexprs(cfg, "pack_kernel"))
    k = triton.compile(src, target=gpu_target(get_target("sm_90")), options={"num_warps": warps, "num_stages": stages})
    ops = collections.Counter(o.opcode for o in kernel_body(sass_ops(k.asm["cubin"])))
    n = sum(ops.values())
    elems = blocks * block_t * tiles * get_format(fmt).tile
    return n, n * 32 * warps / elems, ops


def main() -> int:
    fmt, bt, tpp, nw = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    backend = sys.argv[5] if len(sys.argv) > 5 else "soft"
    blocks = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    stages = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    n, per_elem, ops = count(fmt, bt, tpp, nw, backend, blocks, stages)
    print(f"{fmt} {backend} BLOCK_T={bt} TILES_PER_PROG={tpp} num_warps={nw} BLOCKS_PER_PROG={blocks} "
          f"num_stages={stages}: {n} SASS instructions, "
          f"{per_elem:.1f} lane-instructions per element")
    alu = alu_share(ops)
    print(f"integer (ALU) pipe: {alu} of them, {alu * per_elem / n:.1f} lane-instructions per element")
    print("most frequent:", ", ".join(f"{op} {c}" for op, c in ops.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
