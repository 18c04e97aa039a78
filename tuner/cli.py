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

    return main_demo(trials=args.trials, time_budget_s=args.time_budget)


def _cmd_serve(args: argparse.Namespace) -> int:
    from api.server import serve

    serve(host=args.host, port=args.port)
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from kvtune.worker import main as worker_main

    return worker_main(gpu=args.gpu, arch=args.arch, once=args.once, max_idle_s=args.max_idle, lease_s=args.lease,
                       heartbeat_s=args.heartbeat, poll_s=args.poll, concurrency=args.concurrency,
                       database_url=args.database_url, name=args.name, join_distributed=args.join)


def _cmd_db(args: argparse.Namespace) -> int:
    from catalog.settings import Settings
    from db import migrate
    from db.session import Database

    db = Database(args.database_url or Settings().database_url)
    if args.action == "upgrade":
        migrate.upgrade(db)
    print(f"{db.dialect}: revision {migrate.current_revision(db)} (head {migrate.head_revision()})")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    import optuna
    from tqdm import tqdm

    from tuner.bench import BenchRunner
    from tuner.kernels import get_family
    from catalog.keys import make_key, parse_buckets
    from catalog.results import format_tune_table
    from tuner.search import tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar says it, once
    with BenchRunner(args.arch, trial_timeout_s=args.trial_timeout, precompile=not args.no_precompile) as runner:
        arch = runner.target  # "auto" is resolved by the child that owns the device
        fmts = [f for f in (args.formats or "").split(",") if f]
        key = make_key(args.kernel, arch, args.heads, args.topk, args.window, fmts or None)
        fam = get_family(key.kernel)
        buckets = parse_buckets(args.buckets, fam.buckets(key)) if args.buckets else fam.buckets(key)
        print(f"tuning {key.slug()} on {runner.info()['device_name']}: {len(buckets)} bucket(s), "
              f"{args.trials} trials each, {args.search}", file=sys.stderr)
        # A live bar for a terminal; in a log (CI, a GPU job's captured output) one line per trial.
        live = sys.stderr.isatty()
        with tqdm(total=args.trials * len(buckets), unit="trial", file=sys.stderr, disable=not live) as bar:
            def on_trial(rec) -> None:  # noqa: ANN001
                line = f"{rec.bucket.name()} #{rec.number} {rec.status.value}" + (f" {rec.time_us:.1f}us" if rec.ok else "")
                bar.update(1)
                bar.set_postfix_str(line)
                if not live:
                    print(f"  trial {line}", file=sys.stderr, flush=True)

            result = tune(key, buckets=buckets, trials=args.trials, search=args.search, target=arch,
                          time_budget_s=args.time_budget, storage=args.storage, seed=args.seed,
                          on_trial=on_trial, runner=runner)
    print(f"{result.key.slug()} on {result.device_name} ({result.timing}), search {result.search}")
    print(format_tune_table(result))
    if args.out:
        from pathlib import Path

        from templates.render import write_atomic

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(args.out), json.dumps(result.to_json(), indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(b.best is not None for b in result.buckets) and result.buckets else 1


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
    d.add_argument("--trials", type=int, default=None, help="trials per bucket (default: 24 on a GPU, 2 on the interpreter)")
    d.add_argument("--time-budget", type=float, default=None, help="seconds for the whole tune job")
    d.set_defaults(func=_cmd_demo)

    sv = sub.add_parser("serve", help="the HTTP API (settings from KVTUNE_* environment variables)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.set_defaults(func=_cmd_serve)

    w = sub.add_parser("worker", help="claim and run tune jobs on the local GPU (one worker per GPU)")
    w.add_argument("--gpu", type=int, default=None, help="GPU index this worker owns (sets *_VISIBLE_DEVICES)")
    w.add_argument("--arch", choices=list(TARGETS), default=None, help="override target detection (e.g. interp)")
    w.add_argument("--once", action="store_true", help="exit after one job")
    w.add_argument("--max-idle", type=float, default=None, help="exit after this many seconds without a job")
    w.add_argument("--lease", type=float, default=None, help="lease seconds (default KVTUNE_LEASE_S or 60)")
    w.add_argument("--heartbeat", type=float, default=None, help="heartbeat seconds (default KVTUNE_HEARTBEAT_S or lease/3)")
    w.add_argument("--poll", type=float, default=None, help="idle seconds between claims (default KVTUNE_POLL_S or 1)")
    w.add_argument("--concurrency", type=int, default=None,
                   help="jobs run at once, one thread each (default KVTUNE_CONCURRENCY or 1; keep 1 on a GPU)")
    w.add_argument("--database-url", default=None, help="default: KVTUNE_DATABASE_URL")
    w.add_argument("--name", default=None, help="prefix of this worker's lease owner id (default KVTUNE_WORKER_NAME or host:pid:gpuN)")
    w.add_argument("--join", action=argparse.BooleanOptionalAction, default=None,
                   help="join running distributed jobs of this arch when idle (default KVTUNE_JOIN_DISTRIBUTED or yes)")
    w.set_defaults(func=_cmd_worker)

    tu = sub.add_parser("tune", help="search configs per bucket on the local GPU (or the interpreter); tuned vs default")
    tu.add_argument("--kernel", required=True, choices=["pack", "decode", "logits"])
    tu.add_argument("--arch", default="auto", choices=["auto", *TARGETS], help="must be the local device's (or interp)")
    tu.add_argument("--heads", type=int, default=16)
    tu.add_argument("--topk", type=int, default=512)
    tu.add_argument("--window", type=int, default=128)
    tu.add_argument("--formats", default=None, help="comma list; decode: comp,win; logits: cache,q_dtype; pack: one")
    tu.add_argument("--buckets", default=None, help="lo-hi[@ctx],... (default: the kernel's buckets)")
    tu.add_argument("--trials", type=int, default=32, help="measured candidates per bucket, the default included")
    tu.add_argument("--search", default="tpe", choices=["tpe", "random", "grid"])
    tu.add_argument("--time-budget", type=float, default=None, help="seconds for the whole run")
    tu.add_argument("--trial-timeout", type=float, default=120.0, help="seconds before a candidate counts as hung")
    tu.add_argument("--no-precompile", action="store_true", help="skip the static compile check on GPU targets")
    tu.add_argument("--storage", default=None, help="Optuna RDB URL to keep/share the studies (default: in memory)")
    tu.add_argument("--seed", type=int, default=0)
    tu.add_argument("--out", default=None, help="write the TuneResult as JSON here")
    tu.set_defaults(func=_cmd_tune)

    dbp = sub.add_parser("db", help="database schema migrations")
    dbp.add_argument("action", choices=["upgrade", "current"])
    dbp.add_argument("--database-url", default=None, help="default: KVTUNE_DATABASE_URL")
    dbp.set_defaults(func=_cmd_db)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
