"""Where a kernel's warps wait, by kind of instruction: Nsight Compute's per-SASS-line stall
samples (`ncu -i rep --page source --csv --print-source sass`, as benchmarks/ncu_wgmma_profiles.sh
writes them) summed by opcode class, with each class's instruction count, its top stall reasons
and its shared-memory wavefronts beyond the ideal (bank conflicts).

    python benchmarks/ncu_stalls.py results/ncu/T64_H16_wgmma_w4.sass.csv [--md out.md]
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

# Opcode prefixes -> class (longest prefix first).
CLASSES = {
    "HGMMA": "wgmma", "WARPGROUP": "wgmma wait/arrive", "LDGSTS": "cp.async", "LDGDEPBAR": "cp.async wait",
    "DEPBAR": "cp.async wait", "BAR": "barrier", "LDS": "ld.shared", "STS": "st.shared", "LDSM": "ld.shared",
    "LDG": "ld.global", "STG": "st.global", "PRMT": "conversion", "LOP3": "conversion", "SHF": "conversion",
    "HFMA2": "conversion", "HMUL2": "conversion", "F2FP": "conversion", "VIMNMX": "conversion", "MUFU": "softmax math", "FMNMX": "softmax math",
    "FADD": "fp32 math", "FMUL": "fp32 math", "FFMA": "fp32 math", "FSEL": "fp32 math", "FSETP": "fp32 math",
    "SHFL": "shuffle", "IMAD": "integer", "IADD3": "integer", "LEA": "integer", "ISETP": "integer",
    "VIADD": "integer", "MOV": "move", "SEL": "integer", "BRA": "branch", "FENCE": "fence", "U": "uniform",
    "R2UR": "uniform", "LDC": "constant load", "S2R": "special", "CS2R": "special",
}
_ORDER = sorted(CLASSES, key=len, reverse=True)


def opclass(sass: str) -> str:
    words = sass.split()
    if words and words[0].startswith("@"):  # a predicate guard (@P0, @!PT, ...)
        words = words[1:]
    op = words[0] if words else ""
    for p in _ORDER:
        if op.startswith(p):
            return CLASSES[p]
    return "other"


def _num(v: str) -> float:
    try:
        return float(v.replace(",", "")) if v else 0.0
    except ValueError:
        return 0.0


def summarize(path: Path) -> tuple[list[str], dict[str, dict[str, float]]]:
    lines = path.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
    rows = list(csv.DictReader(lines[start:]))
    reasons = [c for c in rows[0] if c.startswith("stall_") and "(Not Issued)" not in c]
    by: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        c = opclass(r["Source"])
        d = by[c]
        d["instructions"] += 1
        d["executed"] += _num(r.get("Instructions Executed", ""))
        d["samples"] += _num(r.get("Warp Stall Sampling (All Samples)", ""))
        d["smem excess"] += _num(r.get("L1 Wavefronts Shared Excessive", ""))
        d["smem wavefronts"] += _num(r.get("L1 Wavefronts Shared", ""))
        for s in reasons:
            d[s] += _num(r[s])
    return reasons, by


def table(reasons: list[str], by: dict[str, dict[str, float]], title: str) -> str:
    total = sum(d["samples"] for d in by.values()) or 1.0
    out = [f"### {title}", "", f"{int(total)} stall samples.", "",
           "| class | SASS lines | executed (warp instr) | samples | share | top reasons | shared wavefronts (excess) |",
           "|---|---|---|---|---|---|---|"]
    for c, d in sorted(by.items(), key=lambda kv: -kv[1]["samples"]):
        top = sorted(((d[s], s.removeprefix("stall_")) for s in reasons), reverse=True)[:3]
        tops = ", ".join(f"{n} {int(v)}" for v, n in top if v)
        out.append(f"| {c} | {int(d['instructions'])} | {int(d['executed'])} | {int(d['samples'])} | "
                   f"{d['samples'] / total:.0%} | {tops} | {int(d['smem wavefronts'])} ({int(d['smem excess'])}) |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--md", default=None, help="write the tables here too")
    args = ap.parse_args(argv)
    text = "\n".join(table(*summarize(Path(p)), Path(p).stem) for p in args.csv)
    print(text)
    if args.md:
        Path(args.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
