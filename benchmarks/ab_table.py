"""An A/B of `benchmarks/ab.sh` as one table: each row's time in the base tree and in the head tree
of one device call, and their ratio (head / base). Reads the two sides' result files (`--out` of the
benchmark: `$OUT/base/<stem>.json` and `$OUT/head/<stem>.json`, rows keyed by every field but the
time) and writes `results/<name>.md` and `.json` with the head side's provenance. With ab.sh's
AB_ORDER=abba (base, head, head2, base2) each side's time is the mean of its two runs, and the four
runs are listed in the order they ran.

    python benchmarks/ab_table.py /path/to/out decode_hmpv_store_ab_h200 \\
        --title "A/B: ..." --intro "One device call, ... (kept)"     # after unpacking the call's files
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TIME = "us"


def _rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc.get("rows") or []


def _key(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in row.items() if k not in (TIME, "error"))


def _mean(times: list[float | None]) -> float | None:
    # to the ns: a mean's float noise is not a difference
    return round(sum(times) / len(times), 3) if times and all(times) else None  # type: ignore[arg-type]


def ab_rows(base: dict[str, Any], head: dict[str, Any], head2: dict[str, Any] | None = None,
            base2: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rows both sides timed, in the base side's order: the base row's fields, then `base us`,
    `head us` and `ratio` (head / base). With the second runs (ab.sh's abba order) a side's time is
    the mean of its two, and `runs` lists base, head, head2, base2 as they ran. A row either side
    failed (no time) keeps its error."""
    others = [{_key(r): r for r in _rows(doc)} for doc in (head, head2, base2) if doc is not None]
    out = []
    for b in _rows(base):
        match = [o.get(_key(b)) for o in others]
        if any(m is None for m in match):
            continue
        runs = [b, *match]  # base, head[, head2, base2]
        row = {k: v for k, v in b.items() if k not in (TIME, "error")}
        times = [r.get(TIME) for r in runs]
        bt = _mean([times[0]] + times[3:])
        ht = _mean(times[1:3])
        row.update({"base us": bt, "head us": ht, "ratio": round(ht / bt, 3) if bt and ht else None,
                    "error": next((r["error"] for r in runs if r.get("error")), None)})
        if len(runs) == 4:
            row["runs"] = " / ".join(f"{t:.2f}" if t else "-" for t in times)
        out.append(row)
    return out


def markdown(rows: list[dict[str, Any]], prov: dict[str, Any], title: str, intro: str) -> str:
    times = ("base us", "head us", "ratio", "runs", "error")
    fields = [k for k in rows[0] if k not in times] if rows else []
    abba = bool(rows) and "runs" in rows[0]
    extra = ["runs (base / head / head2 / base2)"] if abba else []
    lines = [f"# {title}", "",
             f"{prov.get('gpu')}, torch {prov.get('torch')}, triton {prov.get('triton')}, CUDA {prov.get('cuda')}, "
             f"{prov.get('date')} (device clock). {intro}".rstrip(), "",
             "| " + " | ".join(fields + ["base us", "head us", "ratio"] + extra) + " |",
             "|---" * (len(fields) + 3 + len(extra)) + "|"]
    for r in rows:
        t = [f"{r[k]:.2f}" if isinstance(r[k], float) else (r["error"] or "-") for k in ("base us", "head us")]
        lines.append("| " + " | ".join([str(r[k]) for k in fields] + t + [str(r["ratio"] or "-")]
                                       + ([r["runs"]] if abba else [])) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the call's $OUT, unpacked: base/ and head/ inside")
    ap.add_argument("name", help="the result files' stem under benchmarks/results/")
    ap.add_argument("--stem", help="the benchmark's result file stem (default: bench_decode_hm's, decode_hm_<card>, "
                                    "as h200_session.sh names it for the card the call ran on)")
    ap.add_argument("--title", required=True)
    ap.add_argument("--intro", default="")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args(argv)
    if args.stem is None:
        found = sorted((Path(args.out) / "base").glob("decode_hm_*.json"))
        args.stem = found[0].stem if len(found) == 1 else "decode_hm_h200"
    sides = {}
    for side in ("base", "head", "head2", "base2"):
        f = Path(args.out) / side / f"{args.stem}.json"
        sides[side] = json.loads(f.read_text()) if f.exists() else None
    if sides["base"] is None or sides["head"] is None:
        print(f"no base/ or head/ {args.stem}.json under {args.out}", file=sys.stderr)
        return 1
    if (sides["head2"] is None) != (sides["base2"] is None):
        print("one of head2/ and base2/ without the other: an abba call cut short", file=sys.stderr)
        return 1
    base, head = sides["base"], sides["head"]
    rows = ab_rows(base, head, sides["head2"], sides["base2"])
    if not rows:
        print("no row was timed on both sides", file=sys.stderr)
        return 1
    prov = head.get("provenance", {})
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    (res / f"{args.name}.md").write_text(markdown(rows, prov, args.title, args.intro))
    (res / f"{args.name}.json").write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))
    print(f"wrote {res / args.name}.md and .json ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
