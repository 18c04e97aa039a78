"""decode_combine alone over a grid of (T, heads, partials), at the tile `combine_tile` picks and at
the other dims slices and warps beside it, to see where the split merge's kernel is slow and what
its tile should be (2026-12-06 on the H200: 64-dim slices at 5 partials took 2-2.4x as long as
16-dim ones, and `combine_tile` changed: benchmarks/results/merge_in_kernel/).

Synthetic partials (running max in log2 units, sum of exp2, unnormalised outputs; some splits
without keys), L2-resident as the decode kernel leaves them; CUDA-graph replay medians of the
merge by itself (no kernel before it to depend on). Every variant's output is checked against the
picked tile's.

    python benchmarks/combine_sweep.py --out benchmarks/results           # GPU, the whole grid (~4.5 min)
    python benchmarks/combine_sweep.py --ts 8,64 --heads 64 --parts 5     # GPU, a part of it
    TRITON_INTERPRET=1 python benchmarks/combine_sweep.py --smoke         # plumbing, CPU
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import triton  # noqa: E402

from benchmarks.common import provenance, time_us, write_results  # noqa: E402
from tuner.kernels.base import sm_count  # noqa: E402
from tuner.kernels.decode import _module  # noqa: E402
from tuner.kernels.decode.launch import COMBINE_HEADS, combine_tile, launch_combine  # noqa: E402

GRID = {"T": (1, 2, 8, 64), "H": (16, 64, 128), "P": (2, 5, 10, 16)}
SMOKE = {"T": (2,), "H": (24,), "P": (3,)}


def _partials(t: int, h: int, p: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(t * 1000 + h * 10 + p)
    m = torch.randn(t, p, h, device=device, generator=g) * 4
    m = torch.where(torch.rand(t, p, h, device=device, generator=g) < 0.1, float("-inf"), m)
    ell = torch.where(torch.isinf(m), 0.0, torch.rand(t, p, h, device=device, generator=g) * 5 + 0.5)
    po = torch.randn(t, p, h, 512, device=device, generator=g) * ell[..., None]
    return po.flatten(), torch.stack([m, ell], dim=-1).flatten(), torch.randn(h, device=device, generator=g)


def _row(mod: Any, t: int, h: int, p: int, device: str, gpu: bool) -> dict[str, Any]:
    part_o, part_ml, sink = _partials(t, h, p, device)
    block_s = max(2, triton.next_power_of_2(p))
    sms = sm_count(torch.device(device)) if gpu else 132
    picked = combine_tile(block_s, COMBINE_HEADS, t * triton.cdiv(h, COMBINE_HEADS), sms)
    tiles = sorted({picked, *itertools.product((8, 16, 32, 64), (4, 8))})
    outs: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    row: dict[str, Any] = {"T": t, "H": h, "P": p, "picked": list(picked), "bytes": 4 * (part_o.numel() + part_ml.numel()),
                           "tiles": []}
    for block_d, warps in tiles:
        o = torch.empty(t, h, 512, dtype=torch.bfloat16, device=device)
        lse = torch.empty(t, h, dtype=torch.float32, device=device)
        def run(tile: tuple[int, int] = (block_d, warps), o: torch.Tensor = o, lse: torch.Tensor = lse) -> None:
            launch_combine(mod, part_o, part_ml, sink, o, lse, p, True, tile=tile)

        run()
        outs[(block_d, warps)] = (o, lse)
        us = time_us(run, graph=True) if gpu else None
        row["tiles"].append({"block_d": block_d, "warps": warps, "us": us})
    want = outs[picked]
    for entry in row["tiles"]:
        o, lse = outs[(entry["block_d"], entry["warps"])]
        # Another tile may sum the partials in another order: within a bf16 step (o) and 1e-6 (lse).
        entry["same"] = bool(torch.allclose(o.float(), want[0].float(), rtol=2 ** -7, atol=1e-6)
                             and torch.allclose(lse, want[1], rtol=1e-6, atol=1e-6))
    return row


def _markdown(prov: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    out = [f"# decode_combine alone: (T, heads, partials) by tile ({prov['gpu']})", "",
           f"{prov['gpu']}, torch {prov['torch']}, triton {prov['triton']}, {prov['date']}. Synthetic partials, "
           "L2-resident; CUDA-graph replay medians of the merge by itself. 'picked': combine_tile's (BLOCK_D, "
           "warps); 'best': the fastest tile timed; every tile's output within a bf16 step of the picked one's unless marked.", "",
           "| T | H | P | partials MB | picked | picked us | best | best us | GB/s at the pick |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        timed = [e for e in r["tiles"] if e["us"]]
        pick = next((e for e in r["tiles"] if [e["block_d"], e["warps"]] == r["picked"]), None)
        best = min(timed, key=lambda e: e["us"]) if timed else None
        differ = [f"{e['block_d']}/{e['warps']}" for e in r["tiles"] if not e["same"]]
        mb = r["bytes"] / 1e6
        if pick and pick["us"] and best:
            out.append(f"| {r['T']} | {r['H']} | {r['P']} | {mb:.2f} | {pick['block_d']}/{pick['warps']} | "
                       f"{pick['us']:.2f} | {best['block_d']}/{best['warps']} | {best['us']:.2f} | "
                       f"{r['bytes'] / pick['us'] / 1e3:.0f} |" + (f" differ: {differ}" if differ else ""))
        else:
            out.append(f"| {r['T']} | {r['H']} | {r['P']} | {mb:.2f} | {r['picked'][0]}/{r['picked'][1]} | - | - | - | - |"
                       + (f" differ: {differ}" if differ else ""))
    return "\n".join(out) + "\n"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="combine_sweep_h200")
    ap.add_argument("--smoke", action="store_true", help="one tiny shape, no timing (the interpreter on a CPU)")
    for dim, flag in (("T", "--ts"), ("H", "--heads"), ("P", "--parts")):
        ap.add_argument(flag, dest=dim, type=_ints, default=GRID[dim], help=f"comma-separated {dim} values")
    args = ap.parse_args()
    gpu = torch.cuda.is_available() and not args.smoke
    device = "cuda" if gpu else "cpu"
    grid = SMOKE if args.smoke else {dim: getattr(args, dim) for dim in GRID}
    mod = _module("fp8_528", "fp8_528", "soft")
    prov = provenance()
    rows = []
    for t, h, p in itertools.product(grid["T"], grid["H"], grid["P"]):
        if t * p > 64 * 16 and p > 5:  # AUTO gives large T few splits: no launch merges these
            continue
        rows.append(_row(mod, t, h, p, device, gpu))
        print(rows[-1]["T"], rows[-1]["H"], rows[-1]["P"], rows[-1]["picked"],
              [(e["block_d"], e["warps"], e["us"] and round(e["us"], 2)) for e in rows[-1]["tiles"]], flush=True)
        write_results(args.out, args.name, {"provenance": prov, "rows": rows}, _markdown(prov, rows))
    return 0 if all(e["same"] for r in rows for e in r["tiles"]) else 1


if __name__ == "__main__":
    sys.exit(main())
