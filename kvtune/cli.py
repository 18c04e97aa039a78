"""The `kvtune` command line: offline tools (xcompile, tune, demo) and the service (serve, worker, db).

Every command imports what it needs when it runs, so `kvtune serve` loads no torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Sequence

from catalog.targets import GPU_TARGETS, TARGETS


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
    from kvtune.demo import pack_demo

    return pack_demo(tokens=args.tokens, page_size=args.page_size)


def _cmd_demo(args: argparse.Namespace) -> int:
    from kvtune.demo import main_demo

    return main_demo(trials=args.trials, time_budget_s=args.time_budget, keep_serving=args.keep_serving)


def _cmd_serve(args: argparse.Namespace) -> int:
    from api.server import serve
    from catalog.settings import Settings

    if args.workers > 1:
        # Each worker process builds its own app from the environment (api/server.py).
        if args.database_url:
            os.environ["KVTUNE_DATABASE_URL"] = args.database_url
        serve(host=args.host, port=args.port, workers=args.workers)
        return 0
    settings = Settings(database_url=args.database_url) if args.database_url else Settings()
    serve(host=args.host, port=args.port, settings=settings)
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from kvtune.worker import main as worker_main

    return worker_main(gpu=args.gpu, arch=args.arch, once=args.once, max_idle_s=args.max_idle, lease_s=args.lease,
                       heartbeat_s=args.heartbeat, poll_s=args.poll, concurrency=args.concurrency,
                       database_url=args.database_url, name=args.name, join_distributed=args.join)


def _cmd_export(args: argparse.Namespace) -> int:
    from kvtune.export import ExportError, export

    fmts = [f for f in (args.formats or "").split(",") if f] or None
    try:
        written = export(args.out, arch=args.arch, heads=args.heads, topk=args.topk, window=args.window, formats=fmts,
                         url=args.url, token=args.token, database_url=args.database_url, device_name=args.device_name)
    except (ExportError, ValueError) as e:
        print(f"kvtune export: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


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

    from tuner.bench.runner import BenchRunner
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

        # When it ended, for the tables that quote a tune beside runs of other dates (heads_table.py).
        doc = {**result.to_json(), "finished_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(args.out), json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(b.best is not None for b in result.buckets) and result.buckets else 1


EXAMPLES = """\
examples:
  kvtune demo                                          tune the seed shape here and show tuned vs default
  kvtune xcompile --kernel decode                      every variant cross-compiled for every target (no GPU)
  kvtune tune --kernel pack --arch interp --formats mxfp4_68 --buckets 1-16 --trials 3
  kvtune serve --port 8000                             the HTTP API (KVTUNE_DATABASE_URL, KVTUNE_API_TOKEN)
  kvtune worker --gpu 0                                claim tune jobs for this GPU
  kvtune completion bash > /etc/bash_completion.d/kvtune

settings: every flag that is not given falls back to its KVTUNE_* environment variable
(see catalog/settings.py), e.g. KVTUNE_DATABASE_URL=postgresql+psycopg://user@host/kvtune.
"""
KERNELS = ("pack", "decode", "logits")


class _Help(argparse.RawDescriptionHelpFormatter):
    """Every flag's default shown where it has one (a None default says its fallback in words), and
    the examples' layout kept."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if d is not None and d is not False and d is not argparse.SUPPRESS and "(default" not in text and action.option_strings:
            text += f" (default: {action.default})"
        return text


def _database_url(p: argparse.ArgumentParser) -> None:
    p.add_argument("--database-url", default=None, metavar="URL",
                   help="SQLAlchemy URL of the database (default: KVTUNE_DATABASE_URL, else sqlite:///kvtune.db)")


def _add_offline_commands(sub: argparse._SubParsersAction) -> None:
    x = sub.add_parser("xcompile", formatter_class=_Help,
                       help="cross-compile every variant of a kernel for every target (no GPU needed)")
    x.add_argument("--kernel", required=True, choices=KERNELS, help="the kernel family")
    x.add_argument("--target", action="append", choices=list(GPU_TARGETS),
                   help="a target to compile for (repeatable; default: all four GPU targets)")
    x.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    x.add_argument("--jobs", type=int, default=None, help="parallel compiler children (default: the CPU count)")
    x.set_defaults(func=_cmd_xcompile)

    pd = sub.add_parser("pack-demo", formatter_class=_Help,
                        help="pack random tokens on the local GPU (or the interpreter) and check them")
    pd.add_argument("--tokens", type=int, default=None, help="tokens per format (default: 4096 on a GPU, 64 off one)")
    pd.add_argument("--page-size", type=int, default=64, help="tokens per cache page")
    pd.set_defaults(func=_cmd_pack_demo)

    d = sub.add_parser("demo", formatter_class=_Help, help="the main job: what the README's first command runs")
    d.add_argument("--trials", type=int, default=None, help="trials per bucket (default: 24 on a GPU, 2 on the interpreter)")
    d.add_argument("--time-budget", type=float, default=None, help="seconds for the whole tune job (default: no limit)")
    d.add_argument("--keep-serving", action=argparse.BooleanOptionalAction, default=None,
                   help="keep the API (and its dashboard) up after the demo until Ctrl-C (default: yes on a terminal)")
    d.set_defaults(func=_cmd_demo)

    tu = sub.add_parser("tune", formatter_class=_Help,
                        help="search configs per bucket on the local GPU (or the interpreter); tuned vs default")
    tu.add_argument("--kernel", required=True, choices=KERNELS, help="the kernel family")
    tu.add_argument("--arch", default="auto", choices=["auto", *TARGETS], help="the local device's target, or interp")
    tu.add_argument("--heads", type=int, default=16, help="local attention heads (decode; logits always has 64 index heads)")
    tu.add_argument("--topk", type=int, default=512, help="compressed keys a token attends to (decode, logits)")
    tu.add_argument("--window", type=int, default=128, help="sliding-window keys (decode)")
    tu.add_argument("--formats", default=None,
                    help="comma list; decode: comp,win; logits: cache,q_dtype; pack: one (default: the family's)")
    tu.add_argument("--buckets", default=None, help="lo-hi[@ctx],... (default: the kernel's buckets)")
    tu.add_argument("--trials", type=int, default=32, help="measured candidates per bucket, the default included")
    tu.add_argument("--search", default="tpe", choices=["tpe", "random", "grid"], help="the sampler")
    tu.add_argument("--time-budget", type=float, default=None, help="seconds for the whole run (default: no limit)")
    tu.add_argument("--trial-timeout", type=float, default=120.0, help="seconds before a candidate counts as hung")
    tu.add_argument("--no-precompile", action="store_true", help="skip the static compile check on GPU targets")
    tu.add_argument("--storage", default=None, help="Optuna RDB URL to keep/share the studies (default: in memory)")
    tu.add_argument("--seed", type=int, default=0, help="the sampler's seed (same seed, same trials)")
    tu.add_argument("--out", default=None, help="write the TuneResult as JSON here (and finished_at, UTC)")
    tu.set_defaults(func=_cmd_tune)


def _add_service_commands(sub: argparse._SubParsersAction) -> None:
    sv = sub.add_parser("serve", formatter_class=_Help, help="the HTTP API (settings from KVTUNE_* environment variables)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    sv.add_argument("--workers", type=int, default=1,
                    help="uvicorn worker processes on the one port (each with its own bundle cache), SQLite or PostgreSQL")
    _database_url(sv)
    sv.set_defaults(func=_cmd_serve)

    w = sub.add_parser("worker", formatter_class=_Help, help="claim and run tune jobs on the local GPU (one worker per GPU)")
    w.add_argument("--gpu", type=int, default=None, help="GPU index this worker owns (sets *_VISIBLE_DEVICES)")
    w.add_argument("--arch", choices=list(TARGETS), default=None, help="override target detection (e.g. interp)")
    w.add_argument("--once", action="store_true", help="exit after one job")
    w.add_argument("--max-idle", type=float, default=None, help="exit after this many seconds without a job (default: never)")
    w.add_argument("--lease", type=float, default=None, help="lease seconds (default KVTUNE_LEASE_S or 60)")
    w.add_argument("--heartbeat", type=float, default=None, help="heartbeat seconds (default KVTUNE_HEARTBEAT_S or lease/3)")
    w.add_argument("--poll", type=float, default=None, help="idle seconds between claims (default KVTUNE_POLL_S or 1)")
    w.add_argument("--concurrency", type=int, default=None,
                   help="jobs run at once, one thread each (default KVTUNE_CONCURRENCY or 1; keep 1 on a GPU)")
    _database_url(w)
    w.add_argument("--name", default=None, help="prefix of this worker's lease owner id (default KVTUNE_WORKER_NAME or host:pid:gpuN)")
    w.add_argument("--join", action=argparse.BooleanOptionalAction, default=None,
                   help="join running distributed jobs of this arch when idle (default KVTUNE_JOIN_DISTRIBUTED or yes)")
    w.set_defaults(func=_cmd_worker)

    dbp = sub.add_parser("db", formatter_class=_Help, help="database schema migrations")
    dbp.add_argument("action", choices=["upgrade", "current"], help="upgrade to head, or print the current revision")
    _database_url(dbp)
    dbp.set_defaults(func=_cmd_db)

    ex = sub.add_parser("export", formatter_class=_Help,
                        help="write a model shape's configs and sources as files (TunedKernels.from_folder)")
    ex.add_argument("--arch", required=True, choices=list(TARGETS), help="the target the configs are for")
    ex.add_argument("--heads", type=int, default=16, help="local attention heads")
    ex.add_argument("--topk", type=int, default=512, help="compressed keys a token attends to")
    ex.add_argument("--window", type=int, default=128, help="sliding-window keys")
    ex.add_argument("--formats", default=None, help="comma list, as GET /v1/configs takes it (default: each family's)")
    ex.add_argument("--out", required=True, help="the folder to write (created if missing)")
    ex.add_argument("--url", default=None, help="read from a running API instead of the database")
    ex.add_argument("--token", default=None, help="bearer token for --url (reads need none)")
    ex.add_argument("--device-name", default=None,
                    help="the GPU the files are named for (default: the one the tuned configs were measured on)")
    _database_url(ex)
    ex.set_defaults(func=_cmd_export)

    c = sub.add_parser("completion", formatter_class=_Help, help="print a shell completion script")
    c.add_argument("shell", choices=["bash"], help="the shell (bash's `complete` is also read by zsh's bashcompinit)")
    c.set_defaults(func=_cmd_completion)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvtune", formatter_class=_Help, epilog=EXAMPLES,
        description="Tune, serve and run Triton kernels for quantized KV caches: the NVFP4/MXFP4/FP8 cache "
                    "writer (pack), sparse attention decode (decode) and the MQA indexer (logits).")
    p.add_argument("--version", action="version", version=f"kvtune {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _add_offline_commands(sub)
    _add_service_commands(sub)
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvtune")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def _cmd_completion(args: argparse.Namespace) -> int:
    """A bash completion script made from the parser itself, so it can never miss a flag."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for name, sp in subs.choices.items():
        words = [o for a in sp._actions for o in a.option_strings] + [c for a in sp._actions if not a.option_strings
                                                                        for c in (a.choices or [])]
        cases.append(f'    {name}) words="{" ".join(words)}" ;;')
    print("_kvtune() {\n  local cur=${COMP_WORDS[COMP_CWORD]} words\n  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
          f'    words="{" ".join(subs.choices)} --help --version"\n  else\n  case ${{COMP_WORDS[1]}} in\n'
          + "\n".join(cases) + "\n  esac\n  fi\n  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\n"
          "complete -F _kvtune kvtune")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
