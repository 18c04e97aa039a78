"""The `kvtune` command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from tuner.targets import GPU_TARGETS, TARGETS


def _cmd_xcompile(args: argparse.Namespace) -> int:
    from tuner.compile import format_table, xcompile

    targets = args.target or list(GPU_TARGETS)
    results = xcompile(args.kernel, targets, jobs=args.jobs)
    if args.json:
        json.dump([r.to_json() for r in results], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_table(results))
        off = [r for r in results if not r.matches_table]
        if off:
            print(f"\n{len(off)} result(s) disagree with the legality table:")
            for r in off:
                print(f"  {r.variant} [{r.detail}] on {r.target}: {r.status}, table says {r.expected}")
    return 0


def _cmd_pack_demo(args: argparse.Namespace) -> int:
    from tuner.demo import pack_demo

    return pack_demo(tokens=args.tokens, page_size=args.page_size)


def _cmd_demo(args: argparse.Namespace) -> int:
    from tuner.demo import main_demo

    return main_demo()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvtune", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    x = sub.add_parser("xcompile", help="cross-compile every variant of a kernel for every target (no GPU needed)")
    x.add_argument("--kernel", required=True, choices=["pack", "decode", "logits"])
    x.add_argument("--target", action="append", choices=[t for t in TARGETS if t != "interp"])
    x.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    x.add_argument("--jobs", type=int, default=None, help="parallel compiler children")
    x.set_defaults(func=_cmd_xcompile)

    pd = sub.add_parser("pack-demo", help="pack random tokens on the local GPU (or the interpreter) and check them")
    pd.add_argument("--tokens", type=int, default=None)
    pd.add_argument("--page-size", type=int, default=64)
    pd.set_defaults(func=_cmd_pack_demo)

    d = sub.add_parser("demo", help="the main job: what the README's first command runs")
    d.set_defaults(func=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
