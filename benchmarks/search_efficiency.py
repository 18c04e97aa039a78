"""How many trials each search needs to come within 3% of the grid's best, on recorded timing
tables (simulation mode: no GPU, deterministic). For every table, bucket, search and seed, a search
runs on the table until one measured trial is within `--within` of the best ok time in the table;
its count of measured trials (the default, trial 0, included; pruned samples excluded) is the
result. Reported: the median over buckets and seeds, per table and overall, also as a fraction of
the grid's size.

    python benchmarks/search_efficiency.py                       # benchmarks/tables/*.json
    python benchmarks/search_efficiency.py --synthetic           # no tables yet: SYNTHETIC ones

Writes a markdown table (and the raw numbers as JSON) to benchmarks/results/search_efficiency.*.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import optuna  # noqa: E402

from tuner.bench.simulation import SimulatedRunner, load_table, synthetic_table, table_space  # noqa: E402
from catalog.core import Bucket, ProblemKey, TrialStatus  # noqa: E402
from catalog.space import Space  # noqa: E402
from catalog.results import TrialRecord  # noqa: E402
from tuner.search import SEARCHES, tune  # noqa: E402

HERE = Path(__file__).resolve().parent


def trials_to_target(table: dict[str, Any], space: Space, bucket: Bucket, search: str, seed: int,
                     within: float) -> tuple[int | None, int]:
    """(trials needed or None if never, grid size) for one search on one bucket of a table."""
    entries = table["buckets"][bucket.name()]["entries"]
    best = min(e["time_us"] for e in entries.values() if e["status"] == "ok")
    goal = best * (1 + within)
    n_grid = len(entries)
    # The search runs on the table's own grid (`table_space`): what the recorder did not measure is
    # pruned there, as the infeasible is in the real space.
    runner = SimulatedRunner(table, missing=TrialStatus.CRASHED)
    state: dict[str, int | None] = {"n": 0, "hit": None}

    def on_trial(rec: TrialRecord) -> None:
        state["n"] = (state["n"] or 0) + 1
        if state["hit"] is None and rec.ok and rec.time_us is not None and rec.time_us <= goal:
            state["hit"] = state["n"]

    key = ProblemKey.from_json(table["meta"]["key"])
    tune(key, buckets=[bucket], trials=n_grid, search=search, seed=seed, runner=runner, space=space,
         family=table["meta"]["family"], on_trial=on_trial, should_stop=lambda: state["hit"] is not None)
    return state["hit"], n_grid


def _tables(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    if args.synthetic:
        from catalog.keys import make_key
        from tuner.kernels import get_family

        out = []
        for kernel, arch in (("pack", "sm_100"), ("decode", "sm_100")):
            try:
                key = make_key(kernel, arch)
                fam = get_family(kernel)
            except Exception as e:  # a family still being written
                print(f"synthetic {kernel}: skipped ({e})", file=sys.stderr)
                continue
            out.append((f"{kernel} (SYNTHETIC)", synthetic_table(kernel, key, fam.buckets(key), seed=1)))
        return out
    paths = [Path(p) for p in args.tables] if args.tables else sorted((HERE / "tables").glob("*.json"))
    paths = [p for p in paths if not p.name.endswith(".smoke.json")]
    if not paths:
        raise SystemExit("no recorded tables (benchmarks/tables/*.json); record them on a GPU with "
                         "benchmarks/record_table.py, or run with --synthetic")
    return [(p.stem + (" (SYNTHETIC)" if load_table(p)["meta"].get("synthetic") else ""), load_table(p)) for p in paths]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", nargs="*", default=None)
    ap.add_argument("--synthetic", action="store_true", help="use SYNTHETIC tables (labelled so in the output)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--within", type=float, default=0.03)
    ap.add_argument("--out", default=None,
                    help="path stem (default benchmarks/results/search_efficiency[.synthetic])")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(HERE / "results" / ("search_efficiency.synthetic" if args.synthetic else "search_efficiency"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    raw: list[dict[str, Any]] = []
    for name, table in _tables(args):
        grid = {k for b in table["buckets"].values() for k in b["entries"]}
        space = table_space(table)
        for bname, b in table["buckets"].items():
            if not any(e["status"] == "ok" for e in b["entries"].values()):
                continue
            if len(b["entries"]) < len(grid):  # cut by the recorder's time limit: its best is unknown
                print(f"{name} {bname}: skipped, {len(b['entries'])} of {len(grid)} configs recorded", file=sys.stderr)
                continue
            bucket = Bucket.from_json(b["bucket"])
            for search in SEARCHES:
                # The grid's order does not depend on the seed: one run says it all.
                for seed in range(1 if search == "grid" else args.seeds):
                    t = time.monotonic()
                    hit, n_grid = trials_to_target(table, space, bucket, search, seed, args.within)
                    raw.append({"table": name, "bucket": bname, "search": search, "seed": seed, "trials": hit,
                                "grid": n_grid, "seconds": round(time.monotonic() - t, 2)})
            print(f"{name} {bname}: " + ", ".join(
                f"{s} {statistics.median([r['trials'] or r['grid'] + 1 for r in raw if r['table'] == name and r['bucket'] == bname and r['search'] == s])}"
                for s in SEARCHES) + f" (grid {n_grid})", file=sys.stderr, flush=True)

    md = render(raw, args)
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.md").write_text(md)
    Path(f"{out}.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"wrote {out}.md and {out}.json", file=sys.stderr)
    return 0


def render(raw: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Markdown: per table and overall, per search, the median trials to within X% (a run that never
    got there counts as grid size + 1), that as a fraction of the grid, and how many runs got there."""
    lines = [f"# Trials to within {args.within:.0%} of the grid's best", "",
             "Simulation on recorded timing tables (median over buckets and seeds; the default config is "
             "trial 0 and counts; samples pruned as infeasible or illegal do not). "
             f"Seeds: {args.seeds} for tpe and random, 1 for grid (its order is fixed).", "",
             "| table | search | median trials | p90 trials | median / grid | reached | grid size (median) |",
             "|---|---|---|---|---|---|---|"]
    groups = sorted({r["table"] for r in raw}) + ["all"]
    for g in groups:
        rows = [r for r in raw if g == "all" or r["table"] == g]
        for s in SEARCHES:
            rs = [r for r in rows if r["search"] == s]
            if not rs:
                continue
            n = [r["trials"] if r["trials"] is not None else r["grid"] + 1 for r in rs]
            frac = [x / r["grid"] for x, r in zip(n, rs)]
            p90 = sorted(n)[max(0, int(round(0.9 * len(n))) - 1)]
            reached = sum(r["trials"] is not None for r in rs)
            lines.append(f"| {g} | {s} | {statistics.median(n):g} | {p90} | {statistics.median(frac):.1%} | "
                         f"{reached}/{len(rs)} | {statistics.median(r['grid'] for r in rs):g} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
