"""What the split merge costs the wgmma decode path: each pick timed whole, without its merge
(the partials left unmerged: a timing, not an output) and the merge alone, in one run.

The wgmma builds split a token's key tiles over programs at small T (AUTO: about one program an SM)
and merge the partials in `decode_combine`, a second kernel launched as a programmatic dependent.
Issue 26's T=1 line (6 us at the seed shape) and issue 28's T=1 column turn on that fixed cost, so
this measures it, and the picks with COMBINE=fused (their programs merge the partials themselves,
`_merge_slices`) beside them: CUDA-graph replay medians over input sets rotated past the L2 (as
bench_decode.py), each pick first checked against the float64 reference.

    python benchmarks/decode_merge_share.py --out benchmarks/results     # GPU, sm_90
    python benchmarks/decode_merge_share.py --ws --row nvfp4_288+fp8_528:16:1:MMA=wgmma,num_warps=8
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import tuner.kernels.decode.launch as L  # noqa: E402
from benchmarks.bench_decode import PAGE, Shape, _pool, _sets, _time  # noqa: E402
from benchmarks.common import parse_cfg, provenance, write_results  # noqa: E402
from catalog.families.decode import decode_bytes, default_config  # noqa: E402
from catalog.families.decode_wgmma import WGMMA_MERGE_MMAS, wgmma_config  # noqa: E402
from tuner.kernels.decode import decode, verify_decode  # noqa: E402

V41, V4 = ("nvfp4_288", "fp8_528"), ("fp8_584", "fp8_584")
# (pair, H, T, pick): the wgmma picks at small T of results/tune_decode_h{16,128}_*.json (both
# 128-head tunes' T=1 picks), and the plain `wgmma` build at 32 and 64 heads.
ROWS = [(V41, 16, 1, "MMA=wgmma"), (V41, 16, 8, "MMA=wgmma"), (V41, 16, 64, "MMA=wgmma_ws"),
        (V4, 16, 1, "MMA=wgmma"), (V4, 32, 1, "MMA=wgmma"), (V4, 64, 1, "MMA=wgmma"), (V4, 64, 8, "MMA=wgmma"),
        (V4, 128, 1, "MMA=wgmma,NUM_SPLITS=8"), (V4, 128, 1, "MMA=wgmma"), (V4, 128, 8, "MMA=wgmma_ws"),
        (V41, 128, 1, "MMA=wgmma")]
# `--ws`: the warp-specialised build (the tunes' pick from T=2 to 64 at 16-64 heads, T=2-16 above), issue
# 26's T=64 line and issue 28's 128-head T=8 pick first.
WS_ROWS = [(V41, 16, 64, "MMA=wgmma_ws"), (V4, 128, 8, "MMA=wgmma_ws"), (V41, 16, 8, "MMA=wgmma_ws"),
           (V4, 16, 64, "MMA=wgmma_ws"), (V4, 64, 8, "MMA=wgmma_ws"), (V41, 128, 8, "MMA=wgmma_ws")]


_POOLS: dict[tuple[str, str], dict[str, torch.Tensor]] = {}


def _pools(pair: tuple[str, str], shape: Shape) -> dict[str, torch.Tensor]:
    """The pair's record pools (as bench_decode's), made once a run."""
    if pair not in _POOLS:
        _POOLS[pair] = {pair[0] + ":comp": _pool(pair[0], shape.comp_pool, "cuda", seed=1),
                        pair[1] + ":win": _pool(pair[1], shape.win_pool, "cuda", seed=11)}
    return _POOLS[pair]


def _row(pair: tuple[str, str], heads: int, t: int, pick: str, l2: int) -> dict[str, Any]:
    cfg = wgmma_config(parse_cfg(pick, default_config(*pair)))
    shape = Shape(False, heads)
    pools = _pools(pair, shape)
    n_sets = max(2, min(512, math.ceil(2 * l2 / decode_bytes(*pair, t, heads, shape.topk, shape.window))))
    sets = _sets(pools, pair, shape, t, n_sets, "cuda", seed=100 + t)

    def run(s: dict[str, Any]) -> Any:
        return decode(s["q"], s["comp_cache"], pair[0], s["topk_idx"], s["win_cache"], pair[1], s["window_idx"],
                      PAGE, s["sm_scale"], s["attn_sink"], cfg, out=s["out"], workspace=s["workspace"])

    bad = verify_decode(pair[0], pair[1], sets[0], run(sets[0]))
    row: dict[str, Any] = {"pair": "+".join(pair), "H": heads, "T": t, "pick": pick, "error": bad}
    if bad:
        return row
    hb = L.wgmma_program_heads(cfg, heads, *pair)
    groups = -(-heads // hb)
    parts, per = L.wgmma_plan(cfg, t, shape.topk, shape.window, torch.device("cuda"), groups)
    row.update(parts=parts, groups=groups, tiles_per_program=per)
    row["whole_us"] = _time(lambda: [run(s) for s in sets], len(sets), True)
    merge, calls = L.launch_combine, []
    try:
        L.launch_combine = lambda *a, **k: calls.append((a, k))  # the partials stay unmerged
        row["kernel_us"] = _time(lambda: [run(s) for s in sets], len(sets), True)
    finally:
        L.launch_combine = merge
    if parts > 1 and calls:
        (mod, part_o, part_ml, sink, o, lse, n_parts, has_sink), kw = calls[-1]
        # The merge alone, as the launch issues it but without a kernel before it to depend on.
        row["merge_alone_us"] = _time(lambda: merge(mod, part_o, part_ml, sink, o, lse, n_parts, has_sink),
                                      1, True)
    if cfg["MMA"] in WGMMA_MERGE_MMAS and parts > 1:
        # COMBINE=fused: the token's programs merge their partials themselves (where the grid fits the SMs).
        fused = cfg.replace(COMBINE="fused")
        row["fused_in_kernel"] = L.merge_fits(parts, t * parts * groups, torch.device("cuda"))

        def run_fused(s: dict[str, Any]) -> Any:
            return decode(s["q"], s["comp_cache"], pair[0], s["topk_idx"], s["win_cache"], pair[1], s["window_idx"],
                          PAGE, s["sm_scale"], s["attn_sink"], fused, out=s["out"], workspace=s["workspace"])

        s0 = sets[0]
        s0["out"][0].fill_(float("nan"))
        row["fused_error"] = verify_decode(pair[0], pair[1], s0, run_fused(s0))
        if not row["fused_error"]:
            row["fused_us"] = _time(lambda: [run_fused(s) for s in sets], len(sets), True)
            row["whole2_us"] = _time(lambda: [run(s) for s in sets], len(sets), True)  # the drift between
    return row


def _markdown(prov: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    gpu = prov.get("gpu", "?")
    out = [f"# decode: what the split merge costs the wgmma path ({gpu})", "",
           f"{gpu}, torch {prov.get('torch')}, triton {prov.get('triton')}, {prov.get('date')}. top-k 512, "
           "window 128, page 64, records from DRAM (input sets rotated past the L2), CUDA-graph replay medians; "
           "each pick checked against the float64 reference first. 'without merge': the same launches with "
           "decode_combine left out (partials unmerged); 'merge alone': decode_combine by itself on the last "
           "set's partials (no kernel before it); 'merged in the kernel': the pick with COMBINE=fused (checked "
           "first), and 'whole again' the pick timed once more after it (the drift within the row).", "",
           "| pair | H | T | pick | programs a token x groups | whole us | without merge us | merge's share us | "
           "merge alone us | merged in the kernel (COMBINE=fused) us | whole again us |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| {r['pair']} | {r['H']} | {r['T']} | `{r['pick']}` | FAIL: {r['error'][:120]} | | | | | | |")
            continue
        share = r["whole_us"] - r["kernel_us"]
        alone = r.get("merge_alone_us")
        out.append(f"| {r['pair']} | {r['H']} | {r['T']} | `{r['pick']}` | {r['parts']} x {r['groups']} | "
                   f"{r['whole_us']:.2f} | {r['kernel_us']:.2f} | {share:.2f} ({100 * share / r['whole_us']:.0f}%) | "
                   + (f"{alone:.2f} |" if alone else "- |") + f" {_fused(r)} | "
                   + (f"{r['whole2_us']:.2f} |" if r.get("whole2_us") else "- |"))
    return "\n".join(out) + "\n"


def _fused(r: dict[str, Any]) -> str:
    if r.get("fused_error"):
        return f"FAIL: {r['fused_error'][:80]}"
    if not r.get("fused_us"):
        return "-"
    return f"{r['fused_us']:.2f}" + ("" if r.get("fused_in_kernel") else " (fell back to decode_combine)")


def _row_arg(text: str) -> tuple[tuple[str, str], int, int, str]:
    """--row's COMP+WIN:H:T:PICK as a ROWS entry."""
    try:
        pair, heads, t, pick = text.split(":", 3)
        comp, win = pair.split("+")
        return (comp, win), int(heads), int(t), pick
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not COMP+WIN:H:T:PICK") from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="decode_merge_share")
    ap.add_argument("--ws", action="store_true", help="the warp-specialised build's rows (WS_ROWS) instead")
    ap.add_argument("--row", action="append", default=[], type=_row_arg, metavar="COMP+WIN:H:T:PICK",
                    help="a row of its own, after the others (repeatable), e.g. nvfp4_288+fp8_528:16:1:MMA=wgmma,num_warps=8")
    args = ap.parse_args()
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("decode_merge_share runs on an sm_90 GPU only", file=sys.stderr)
        return 2
    prov = provenance()
    l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
    rows = []
    for pair, heads, t, pick in (WS_ROWS if args.ws else ROWS) + args.row:
        rows.append(_row(pair, heads, t, pick, l2))
        print(rows[-1], flush=True)
        write_results(args.out, args.name, {"provenance": prov, "rows": rows}, _markdown(prov, rows))
    return 0 if not any(r.get("error") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
