"""How many SM cycles one sm_90 wgmma takes at the decode tile's shapes, by operand source and N.

Why: the warp-specialised decode's consumer binds at 16 heads (a 1.77 us tile, 64 wgmmas of
m64n16k16 bf16: the previous tile's PV and this one's S), and two consumer warpgroups did not
shorten the tile period (MMA=wgmma_wsp, benchmarks/README.md). Whether that is the tensor core's
rate at N = 16, the shared-memory reads of the A operand (2 KB a wgmma whatever N is), or neither,
decides the next build: A from registers (RS) if SS is slow at small N, more heads on N (or on M)
if every small-N wgmma is slow, more overlap if neither is. This probe times each alone.

A program is one warpgroup issuing `reps` tiles; a tile is the decode's MMA 1 shape: four chunk
MMAs of K = 128 (8 wgmmas each, 32 a tile) into one fp32 accumulator of [64, N], waited for once a
tile (one chunk of each operand in shared memory, read by all four).
Operands:
  ss    A [64, 128] bf16 from shared memory, K-major (as MMA 1 reads the K tile),
  ss_t  A from shared memory through a transposed view (MN-major: as PV reads K^T),
  rs    A from registers (one chunk's fragment, loaded once), B from shared memory as in ss;
  ss_fp8  e4m3 operands from shared memory, m64nNk32 (the logits kernel's MMA 1 at N = 64 heads).
PROGS programs run on each SM at once (1: one consumer; 2: two, as ping-pong consumers would).
Each program stamps %clock64 around its loop; cycles a wgmma = its span / (reps x a tile's wgmmas),
and an SM's rate = PROGS wgmmas in that time. The tensor core's bf16 peak is 1024 FMA a cycle an SM (dense),
so m64nNk16 costs N cycles at peak (fp8's is twice that, so m64nNk32 does too): the table reports
that fraction.

    python benchmarks/wgmma_rate_probe.py --static          # CPU: the SASS each case issues
    python benchmarks/wgmma_rate_probe.py --out $OUT        # GPU: wgmma_rate_h200.md / .json
                                                            # (h200_session.sh renames for other cards)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, warpgroup_mma, warpgroup_mma_wait,
)

MODES = ("ss", "ss_t", "rs", "ss_fp8")
NS = (8, 16, 32, 64, 128, 256)
CHUNK_K = gl.constexpr(128)  # a chunk's K: 8 wgmmas of k16
CHUNKS = gl.constexpr(4)  # a tile: 512 dims


def wgmmas_a_tile(mode: str) -> int:
    """A tile's wgmmas: 512 dims in k16 steps (bf16), or k32 (ss_fp8: e4m3 operands, as the logits
    kernel's MMA 1; its peak is twice bf16's, so an m64nNk32 costs N cycles at it too)."""
    return 16 if mode == "ss_fp8" else 32


@gluon.jit
def _rate_kernel(x_ptr, span_ptr, sum_ptr, reps, N: gl.constexpr, MODE: gl.constexpr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                    instr_shape=[16, N, 32 if MODE == "ss_fp8" else 16])
    DT: gl.constexpr = gl.float8e4nv if MODE == "ss_fp8" else gl.bfloat16
    blk: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, blk))
    c = gl.arange(0, CHUNK_K, layout=gl.SliceLayout(0, blk))
    x = gl.load(x_ptr + r[:, None] * CHUNK_K + c[None, :])
    # One chunk of each operand, read by each of a tile's four chunk MMAs (the rate does not
    # depend on which chunk is read; two programs an SM fit at N = 256: 16 + 64 KiB each).
    if MODE == "ss_t":
        # A stored [K, M] (M contiguous) and read through its transposed view, as PV reads K^T.
        a_s = gl.allocate_shared_memory(gl.bfloat16, [CHUNK_K, 64],
                                        gl.NVMMASharedLayout.get_default_for([CHUNK_K, 64], gl.bfloat16),
                                        gl.permute(x, (1, 0)))
    else:
        a_s = gl.allocate_shared_memory(DT, [64, CHUNK_K], gl.NVMMASharedLayout.get_default_for([64, CHUNK_K], DT),
                                        x.to(DT))
    nr = gl.arange(0, N, layout=gl.SliceLayout(1, blk))
    b = gl.load(x_ptr + (nr[:, None] % 64) * CHUNK_K + c[None, :])
    b_s = gl.allocate_shared_memory(DT, [N, CHUNK_K], gl.NVMMASharedLayout.get_default_for([N, CHUNK_K], DT), b.to(DT))
    fence_async_shared()
    gl.thread_barrier()
    # rs: the chunk's A fragment in registers (loaded once); the shared modes do not read it.
    a_r = gl.convert_layout(x, gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2))
    acc = gl.zeros([64, N], gl.float32, acc_l)
    t0 = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
    for i in range(reps):
        for k in gl.static_range(CHUNKS):
            if MODE == "rs":
                acc = warpgroup_mma(a_r, b_s.permute((1, 0)), acc, is_async=True)
            elif MODE == "ss_t":
                acc = warpgroup_mma(a_s.permute((1, 0)), b_s.permute((1, 0)), acc, is_async=True)
            else:
                acc = warpgroup_mma(a_s, b_s.permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
    t1 = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
    # The span, and the accumulator's row sums (the MMAs are live, and `run` checks them).
    pid = gl.program_id(0)
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_l))
    gl.store(sum_ptr + pid * 64 + rows, gl.sum(acc, axis=1))
    gl.store(span_ptr + pid, t1 - t0)


SIGNATURE = {"x_ptr": "*bf16", "span_ptr": "*i64", "sum_ptr": "*fp32", "reps": "i32", "N": "constexpr",
             "MODE": "constexpr"}


def static_case(mode: str, n: int) -> list[str]:
    """The case's tensor-core SASS (mnemonic and whether A is a register), compiled for sm_90 on
    the CPU: what the GPU run times."""
    import triton
    from triton.backends.compiler import GPUTarget

    from tuner.compile import ast_source

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    src = ast_source(_rate_kernel, SIGNATURE, {"N": n, "MODE": mode}, {})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return gmma_lines(k.asm["cubin"])


def gmma_lines(cubin: bytes) -> list[str]:
    """Each wgmma of a cubin as 'HGMMA.64x16x16.F32.BF16 R' (A from registers), '... desc' (A from
    shared memory, K-major) or '... desc.tnspA' (MN-major), and each wgmma wait as 'wait'."""
    import re

    from benchmarks.common import sass_text

    out = []
    for line in sass_text(cubin).splitlines():
        m = re.search(r"([HQ]GMMA\.\S+)\s+R\d+,\s*(\S+?),", line)
        if m:
            a = m.group(2)
            form = ("desc.tnspA" if "tnspA" in a else "desc") if a.startswith("gdesc") else "R"
            out.append(f"{m.group(1)} {form}")
        elif "WARPGROUP.DEPBAR" in line:
            out.append("wait")
    return out


def run(mode: str, n: int, grid: int, reps: int) -> tuple[Any, Any, Any]:
    """One launch of `grid` programs: each program's span in cycles, its accumulator's row sums,
    and what those sums should be (every chunk of A and of B holds the same values)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(n)
    x = (torch.randn(64, int(CHUNK_K), generator=g) / 16).to(torch.bfloat16).cuda()
    spans = torch.zeros(grid, dtype=torch.int64, device="cuda")
    sums = torch.full((grid, 64), float("nan"), device="cuda")
    _rate_kernel[(grid,)](x, spans, sums, reps, N=n, MODE=mode, num_warps=4)
    b = x[torch.arange(n, device="cuda") % 64]
    if mode == "ss_fp8":  # the operands as the kernel rounds them
        x, b = x.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    want = (x.double() @ b.double().T).sum(dim=1) * (reps * int(CHUNKS))
    return spans, sums, want


def measure(mode: str, n: int, progs: int, reps: int, sms: int) -> dict[str, Any]:
    import torch

    grid = sms * progs
    run(mode, n, grid, reps)  # compile and warm
    spans, sums, want = run(mode, n, grid, reps)
    torch.cuda.synchronize()
    err = float(((sums.double() - want[None, :]).abs().max() / want.abs().max()))
    spans = spans.float()
    cyc = float(spans.median()) / (reps * wgmmas_a_tile(mode))
    # The SM's rate: PROGS warpgroups each issuing a wgmma every `cyc` cycles.
    sm_cyc = cyc / progs
    return {"mode": mode, "n": n, "progs": progs, "reps": reps, "cycles_a_wgmma": round(cyc, 2),
            "sm_cycles_a_wgmma": round(sm_cyc, 2), "peak_fraction": round(n / sm_cyc, 3), "max_rel_err": err}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| A operand | N | programs an SM | cycles a wgmma (a program) | SM cycles a wgmma | of peak | "
             "row sums' error |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['n']} | {r['progs']} | {r['cycles_a_wgmma']} | {r['sm_cycles_a_wgmma']} | "
                     f"{r['peak_fraction']:.0%} | {r['max_rel_err']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--static", action="store_true", help="compile each case for sm_90 on the CPU, list its wgmmas")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--progs", default="1,2")
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    ns = [int(v) for v in args.ns.split(",")]
    modes = args.modes.split(",")
    if args.static:
        print("| A operand | N | wgmmas in the kernel (a tile's 32 in its loop, 16 for fp8) |\n|---|---|---|")
        for mode in modes:
            for n in ns:
                seq = static_case(mode, n)
                mmas = [s for s in seq if s != "wait"]
                print(f"| {mode} | {n} | {len(mmas)} x {', '.join(sorted(set(mmas)))}; {len(seq) - len(mmas)} waits |")
        return 0
    import torch

    from benchmarks.common import provenance

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [measure(mode, n, int(p), args.reps, sms) for mode in modes for n in ns for p in args.progs.split(",")]
    text = (f"# wgmma rate at the decode tile's shapes\n\n{provenance()}\n\n`benchmarks/wgmma_rate_probe.py`: "
            f"{args.reps} tiles of 512 dims a program (32 wgmmas m64nNk16 bf16, or 16 m64nNk32 e4m3), one "
            f"accumulator, waited for once a tile; medians over {sms} SMs' programs.\n\n{table(rows)}\n")
    print(text)
    if args.out:
        # Named for the H200, as every result here; h200_session.sh renames them for another card.
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "wgmma_rate_h200.md").write_text(text)
        (args.out / "wgmma_rate_h200.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
