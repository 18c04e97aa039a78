"""An A/B of `benchmarks/ab.sh` as one table: each row's time in the base tree and in the head tree
of one device call, and their ratio (head / base). Reads the two sides' result files (`--out` of the
benchmark: `$OUT/base/<stem>.json` and `$OUT/head/<stem>.json`, rows keyed by every field but the
time) and writes `results/<name>.md` and `.json` with the head side's provenance.

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


def ab_rows(base: dict[str, Any], head: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows both sides timed, in the base side's order: the base row's fields, then `base us`,
    `head us` and `ratio` (head / base). A row either side failed (no time) keeps its error."""
    heads = {_key(r): r for r in _rows(head)}
    out = []
    for b in _rows(base):
        h = heads.get(_key(b))
        if h is None:
            continue
        row = {k: v for k, v in b.items() if k not in (TIME, "error")}
        bt, ht = b.get(TIME), h.get(TIME)
        row.update({"base us": bt, "head us": ht,
                    "ratio": round(ht / bt, 3) if bt and ht else None,
                    "error": b.get("error") or h.get("error")})
        out.append(row)
    return out


def markdown(rows: list[dict[str, Any]], prov: dict[str, Any], title: str, intro: str) -> str:
    fields = [k for k in rows[0] if k not in ("base us", "head us", "ratio", "error")] if rows else []
    lines = [f"# {title}", "",
             f"{prov.get('gpu')}, torch {prov.get('torch')}, triton {prov.get('triton')}, CUDA {prov.get('cuda')}, "
             f"{prov.get('date')} (device clock). {intro}".rstrip(), "",
             "| " + " | ".join(fields + ["base us", "head us", "ratio"]) + " |",
             "|---" * (len(fields) + 3) + "|"]
    for r in rows:
        t = [f"{r[k]:.2f}" if isinstance(r[k], float) else (r["error"] or "-") for k in ("base us", "head us")]
        lines.append("| " + " | ".join([str(r[k]) for k in fields] + t + [str(r["ratio"] or "-")]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the call's $OUT, unpacked: base/ and head/ inside")
    ap.add_argument("name", help="the result files' stem under benchmarks/results/")
    ap.add_argument("--stem", default="decode_hm_h200", help="the benchmark's result file stem (bench_decode_hm's)")
    ap.add_argument("--title", required=True)
    ap.add_argument("--intro", default="")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args(argv)
    base = json.loads((Path(args.out) / "base" / f"{args.stem}.json").read_text())
    head = json.loads((Path(args.out) / "head" / f"{args.stem}.json").read_text())
    rows = ab_rows(base, head)
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
