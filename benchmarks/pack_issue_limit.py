"""The issue-rate limit of pack on sm_90, without a GPU (issue 26's first step): for each record
format's default config (the best config in every H200 sweep), the SASS lane-instructions per
quantized element (`benchmarks/sass_count.py`: straight-line code, so the kernel body's count --
its out-of-line slow paths left out -- is the dynamic count of the fast path), turned into the time 1M tokens take if the SMs did nothing but issue them, beside the
byte floor at the measured copy bandwidth. A kernel cannot beat the larger of the two.

    python benchmarks/pack_issue_limit.py --out benchmarks/results
    python benchmarks/pack_issue_limit.py --picks --out benchmarks/results   # the picks' pipe limits

Issue 26's measured picks (`--picks`, into pack_limits_sm90.md: pack-onerun's, with swar and with
bf16x2 for the e2m1 formats) have two limits each, issue (every SASS at 128 lanes a cycle an SM)
and the integer pipe (its SASS at 64 lanes a cycle: it takes a warp instruction every other cycle),
beside the copy floor. The largest of the three is the limit issue 26's 85% line is taken against.

H200 figures used (not measured here): 132 SMs, 4 warp schedulers an SM issuing one warp
instruction a cycle each (128 lane-instructions a cycle an SM), the 1980 MHz maximum SM clock
(`nvidia-smi --query-gpu=clocks.max.sm` on the H200, 2026-12-01) and the 4.272 TB/s copy
bandwidth of `results/pack_h200.md` (2026-11-29), where the measured times come from too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import alu_share  # noqa: E402
from benchmarks.sass_count import count  # noqa: E402
from catalog.families.pack import default_config, pack_bytes  # noqa: E402
from catalog.formats import get_format  # noqa: E402

SMS, LANES_PER_CYCLE, CLOCK_HZ, COPY_BW = 132, 128, 1.98e9, 4.272e12
TOKENS = 1 << 20
FORMATS = ("nvfp4_288", "fp8_528", "fp8_584", "mxfp4_68", "fp8_132")
# 2026-12-01: the static counts of triton 3.6.0 on the CPU; SASS from the cuobjdump Triton ships.
# results/pack_h200.md, best config (the default) per format, us at 1M tokens.
MEASURED_US = {"nvfp4_288": 728.4, "fp8_528": 584.2, "fp8_584": 651.7, "mxfp4_68": 207.1, "fp8_132": 158.8}


def _pipe_us(fmt: str, lane_per_elem: float, lanes_per_cycle: int) -> float:
    """Microseconds for TOKENS tokens' lane-instructions on a pipe of `lanes_per_cycle` an SM."""
    return TOKENS * get_format(fmt).qdims * lane_per_elem / (SMS * lanes_per_cycle * CLOCK_HZ) * 1e6


def _copy_us(fmt: str) -> float:
    """The byte floor of TOKENS tokens at the copy bandwidth."""
    return pack_bytes(get_format(fmt), TOKENS) / COPY_BW * 1e6


def limits(fmt: str, backend: str = "soft") -> dict[str, float | str]:
    c = default_config(fmt).replace(backend=backend)
    n, per_elem, ops = count(fmt, c["BLOCK_T"], c["TILES_PER_PROG"], c["num_warps"], backend)
    issue_us = _pipe_us(fmt, per_elem, LANES_PER_CYCLE)
    copy_us = _copy_us(fmt)
    bound = max(issue_us, copy_us)  # issue 26's mark: 85% of it, i.e. a time of bound / 0.85
    return {"format": fmt, "config": c.to_json(), "sass": n, "lane_per_elem": per_elem, "issue_us": issue_us,
            "copy_us": copy_us, "binds": "issue" if issue_us > copy_us else "bytes", "target_us": bound / 0.85,
            "measured_us": MEASURED_US.get(fmt, float("nan")) if backend == "soft" else float("nan"), "top": ", ".join(f"{o} {k}" for o, k in ops.most_common(6))}


def markdown(rows: list[dict]) -> str:
    out = ["# pack on sm_90: issue-rate limit beside the byte floor (static, no GPU)", "",
           __doc__.split("\n\n")[0].replace("\n", " "), "",
           "| format | default config | SASS | lane-instr / elem | issue limit us | copy floor us | binds | 85% target us | "
           "H200 now us | now / limit | most frequent |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lim = max(r["issue_us"], r["copy_us"])
        assert abs(r["target_us"] - lim / 0.85) < 1e-9
        now = f"{r['measured_us']:.0f} | {lim / r['measured_us']:.0%}" if r["measured_us"] == r["measured_us"] else "not timed | -"
        out.append(f"| {r['format']} | `{r['config']}` | {r['sass']} | {r['lane_per_elem']:.1f} | {r['issue_us']:.0f} | "
                   f"{r['copy_us']:.0f} | {r['binds']} | {lim / 0.85:.0f} | {now} | {r['top']} |")
    out += ["", "`85% target us`: the time at which the kernel reaches 85% of the binding limit (limit / 0.85). "
            "`now / limit`: the fraction of it today's kernel reaches (H200, results/pack_h200.md). "
            "The `cvt` rows (the fp8 formats' e4m3 conversion by cvt.rn.satfinite.e4m3x2.f32) and the `swar` rows "
            "(the e2m1 formats' rounding two bf16 elements a 32-bit instruction) are each backend at the default "
            "tiles; their H200 times are in results/pack_h200_runs.md. Counts before 2026-12-03 included the "
            "out-of-line slow paths after the kernel's EXIT (never run on these inputs): nvfp4_288's soft default "
            "read 1048 instructions and a 526 us limit then."]
    return "\n".join(out) + "\n"


ALU_LANES_PER_CYCLE = 64  # the integer pipe of an SM: a warp instruction every other cycle a sub-partition
# Issue 26's picks, as h200_session.sh pack-onerun times them: (format, backend, BLOCK_T, TILES_PER_PROG,
# num_warps, BLOCKS_PER_PROG, num_stages).
PICKS = (("nvfp4_288", "swar", 4, 32, 2, 1, 1), ("nvfp4_288", "swar", 8, 32, 2, 1, 1),
         ("nvfp4_288", "bf16x2", 4, 32, 2, 1, 1), ("nvfp4_288", "bf16x2", 8, 32, 2, 1, 1),
         ("mxfp4_68", "swar", 16, 4, 1, 1, 1), ("mxfp4_68", "bf16x2", 16, 4, 1, 1, 1),
         ("fp8_528", "cvt", 8, 8, 1, 1, 1), ("fp8_132", "cvt", 16, 1, 2, 1, 1))


def pipe_limits(fmt: str, backend: str, block_t: int, tiles: int, warps: int, blocks: int = 1,
                stages: int = 1) -> dict[str, Any]:
    """One pick's issue and integer-pipe limits at 1M tokens beside its copy floor (straight-line
    kernels only: a pipelined program loops, and its static count is not a per-element cost)."""
    n, per_elem, ops = count(fmt, block_t, tiles, warps, backend, blocks, stages)
    alu = alu_share(ops)
    issue_us = _pipe_us(fmt, per_elem, LANES_PER_CYCLE)
    alu_us = _pipe_us(fmt, alu * per_elem / n, ALU_LANES_PER_CYCLE)
    copy_us = _copy_us(fmt)
    bound = max(issue_us, alu_us, copy_us)
    binds = "bytes" if bound == copy_us else "integer pipe" if bound == alu_us else "issue"
    return {"format": fmt, "pick": f"{backend} {block_t}/{tiles}/{warps}", "sass": n, "alu_sass": alu,
            "issue_us": issue_us, "alu_us": alu_us, "copy_us": copy_us, "binds": binds, "target_us": bound / 0.85}


def picks_markdown(rows: list[dict[str, Any]]) -> str:
    out = ["# pack on sm_90: the measured picks' issue and integer-pipe limits beside the copy floor (static, no GPU)",
           "", __doc__.split("\n\n")[2].replace("\n", " "), "",
           f"{TOKENS} tokens, {SMS} SMs at {CLOCK_HZ / 1e6:.0f} MHz, copy at {COPY_BW / 1e12:.3f} TB/s; triton's ptxas; "
           "`python benchmarks/pack_issue_limit.py --picks`.", "",
           "| format | pick (backend BLOCK_T/TILES/warps) | SASS | integer-pipe SASS | issue limit us | integer-pipe limit us | "
           "copy floor us | binds | 85% line us |", "|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['format']} | {r['pick']} | {r['sass']} | {r['alu_sass']} | {r['issue_us']:.0f} | {r['alu_us']:.0f} | "
            f"{r['copy_us']:.0f} | {r['binds']} | {r['target_us']:.0f} |" for r in rows]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="write pack_issue_limit_sm90.md (or, with --picks, pack_limits_sm90.md) here")
    ap.add_argument("--picks", action="store_true", help="the measured picks' issue and integer-pipe limits instead")
    args = ap.parse_args()
    if args.picks:
        md = picks_markdown([pipe_limits(*p) for p in PICKS])
        print(md)
        if args.out:
            (Path(args.out) / "pack_limits_sm90.md").write_text(md)
        return 0
    rows = [limits(fmt) for fmt in FORMATS]
    # The fp8 formats' hardware conversion (backend=cvt), the e2m1 formats' SWAR rounding (swar).
    rows += [limits(fmt, "cvt") for fmt in FORMATS if get_format(fmt).elem == "e4m3"]
    rows += [limits(fmt, "swar") for fmt in FORMATS if get_format(fmt).elem == "e2m1"]
    md = markdown(rows)
    print(md)
    if args.out:
        (Path(args.out) / "pack_issue_limit_sm90.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
