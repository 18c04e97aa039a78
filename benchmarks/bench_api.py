"""GET /v1/configs under load: a real uvicorn (`api.server.serve`, as `kvtune serve --workers N` runs
it) in a subprocess on loopback, on SQLite and PostgreSQL, with 1 and 2 worker processes.

The bundle is the seed shape (sm_90, heads 16, topk 512, window 128) with a tuned decode config
published through db.configs.publish (as a worker would) and pack and logits untuned, so every read
also counts two misses. Open loop: requests are sent at a fixed rate whatever the answers do, and a
request's latency runs from the time it was scheduled (so a stalled server or a generator that falls
behind shows up as latency, not as a slower offered rate). Closed loop: C clients each send the next
request when the last one is answered, to find the saturation throughput. Every loop is bounded in
count and in time; an answer other than 200, an exception or a timeout is an error.

After each server run the stored miss count of the pack key is compared with the reads served (the
batched flush must not lose counts). The generator shares the machine with the server: its own CPU
time is part of what is measured, and the load average is recorded beside each run.

    PYTHONPATH=$PWD python benchmarks/bench_api.py                  # everything, ~4 minutes
    PYTHONPATH=$PWD python benchmarks/bench_api.py --backends sqlite --workers 1 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import os
import platform
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from catalog.core import TrialStatus  # noqa: E402
from catalog.families import get_spec  # noqa: E402
from catalog.keys import make_key  # noqa: E402
from catalog.results import BucketResult, TrialRecord, TuneResult  # noqa: E402
from db import configs, migrate  # noqa: E402
from db.session import Database  # noqa: E402

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
SEED = {"arch": "sm_90", "heads": 16, "topk": 512, "window": 128}
OPEN_CONNECTIONS = 32  # open loop: connections (so requests in flight) at most
TIMEOUT_S = 5.0


@dataclass
class Run:
    backend: str
    workers: int
    mode: str  # "open" or "closed"
    offered: float | None  # req/s (open) or None
    clients: int | None
    duration_s: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    server_cpu_s: float = 0.0  # CPU time of the server's processes during the run
    generator_cpu_s: float = 0.0
    wall_s: float = 0.0  # the run's wall time, its clients' setup included

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def pct(self, p: float) -> float | None:
        if not self.latencies_ms:
            return None
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

    @property
    def sent(self) -> int:
        return len(self.latencies_ms) + sum(self.errors.values())


# -- database and server ---------------------------------------------------------------------------
def seed(db: Database) -> str:
    """Publish a tuned decode config for every default bucket of the seed key; returns the pack key's
    slug (untuned: its misses are counted)."""
    key = make_key("decode", SEED["arch"], SEED["heads"], SEED["topk"], SEED["window"])
    spec = get_spec("decode")
    cfg = spec.default_config(key)
    results, hashes = [], {}
    for b in spec.buckets(key):
        d = TrialRecord(number=0, bucket=b, config=cfg, status=TrialStatus.OK, time_us=20.0, timing="cuda-graph")
        best = TrialRecord(number=1, bucket=b, config=cfg.replace(num_warps=8), status=TrialStatus.OK, time_us=10.0,
                           timing="cuda-graph")
        results.append(BucketResult(b, d, best, (d, best)))
        hashes[b.name()] = hashlib.sha256(f"bench/{b.name()}".encode()).hexdigest()[:16]
    res = TuneResult(key=key, target=key.arch, buckets=tuple(results), device_name="NVIDIA H200",
                     triton_version="3.6.0", torch_version="2.11.0", timing="cuda-graph")
    db.run(lambda s: (configs.store_sources(s, [(h, "decode_tile.py.j2", f"# {h}") for h in hashes.values()]),
                      configs.publish(s, job_id=None, key=key, result=res, source_hashes=hashes)))
    return make_key("pack", SEED["arch"], SEED["heads"], SEED["topk"], SEED["window"]).slug()


@contextmanager
def scratch_database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="kvtune-bench-") as d:
            yield f"sqlite:///{d}/kvtune.db"
        return
    import psycopg

    name = f"kvtune_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", autocommit=True,
                            connect_timeout=5)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_cpu_s(pid: int) -> float:
    """utime + stime of `pid` and its descendants (uvicorn's worker processes), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d.name)] = (int(f[1]), (int(f[11]) + int(f[12])) / tick)
    todo, total = [pid], 0.0
    while todo:
        p = todo.pop()
        total += stats.get(p, (0, 0.0))[1]
        todo += [c for c, (ppid, _) in stats.items() if ppid == p]
    return total


@contextmanager
def server(db_url: str, workers: int, log: Path) -> Iterator[tuple[str, int]]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "KVTUNE_DATABASE_URL": db_url, "KVTUNE_API_TOKEN": "bench"}
    code = f"from api.server import serve; serve(host='127.0.0.1', port={port}, workers={workers}, log_level='warning')"
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"server did not come up:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# -- load ------------------------------------------------------------------------------------------
async def _one(http: httpx.AsyncClient, run: Run, t_sched: float) -> None:
    try:
        r = await asyncio.wait_for(http.get("/v1/configs", params=SEED), TIMEOUT_S)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        run.error("timeout")
        return
    except httpx.HTTPError as e:
        run.error(type(e).__name__)
        return
    if r.status_code != 200:
        run.error(f"HTTP {r.status_code}")
        return
    run.latencies_ms.append((time.perf_counter() - t_sched) * 1000)


def _client(url: str, ssl_ctx: ssl.SSLContext) -> httpx.AsyncClient:
    # One keep-alive connection per client: the generator's connections are its own tasks, never a
    # shared pool that requests queue in (httpcore's pool costs more per request as waiters pile up).
    # One SSL context for all (plain HTTP here, but httpx builds one per client otherwise: ~15 ms each).
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S, limits=limits, verify=ssl_ctx)


@asynccontextmanager
async def _clients(url: str, n: int) -> AsyncIterator[list[httpx.AsyncClient]]:
    """n clients, each with its connection open and used once, before any timing starts."""
    ctx = ssl.create_default_context()
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(_client(url, ctx)) for _ in range(n)]
        await asyncio.gather(*(c.get("/healthz") for c in clients))
        yield clients


async def open_loop(url: str, run: Run, connections: int = OPEN_CONNECTIONS) -> None:
    """Slot i is due at t0 + i/rate; `connections` senders take the next slot when free and send it
    at its time (a slot taken late is late: its latency counts from when it was due)."""
    assert run.offered
    total = int(run.offered * run.duration_s)
    next_slot = 0

    async def sender(http: httpx.AsyncClient, t0: float) -> None:
        nonlocal next_slot
        while next_slot < total:
            t_sched = t0 + next_slot / run.offered
            next_slot += 1
            delay = t_sched - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await _one(http, run, t_sched)

    async with _clients(url, connections) as clients:
        t0 = time.perf_counter() + 0.05
        await asyncio.wait_for(asyncio.gather(*(sender(c, t0) for c in clients)), run.duration_s + 2 * TIMEOUT_S + 30)


async def closed_loop(url: str, run: Run) -> None:
    assert run.clients
    cap = int(run.duration_s * 20_000)  # a bound on count as well as on time

    async def client(http: httpx.AsyncClient, end: float) -> None:
        while time.perf_counter() < end and run.sent < cap:
            await _one(http, run, time.perf_counter())

    async with _clients(url, run.clients) as clients:
        end = time.perf_counter() + run.duration_s
        await asyncio.wait_for(asyncio.gather(*(client(c, end) for c in clients)), run.duration_s + TIMEOUT_S + 10)


def stored_misses(db_url: str, slug: str) -> int:
    db = Database(db_url)
    try:
        from sqlalchemy import select

        from db.models import LookupMiss

        return int(db.run(lambda s: s.scalar(select(LookupMiss.count).where(LookupMiss.key_slug == slug)), write=False) or 0)
    finally:
        db.dispose()


def bench_one(backend: str, workers: int, args: argparse.Namespace, log: Path) -> tuple[list[Run], dict[str, Any]]:
    runs: list[Run] = []
    with scratch_database(backend) as url:
        db = Database(url)
        migrate.upgrade(db)
        pack_slug = seed(db)
        db.dispose()
        with server(url, workers, log) as (base, pid):
            warm = Run(backend, workers, "warm", None, 4, 1.0)
            asyncio.run(closed_loop(base, warm))
            plan = [Run(backend, workers, "open", rate, None, args.duration) for rate in args.rates]
            plan.append(Run(backend, workers, "closed", None, args.clients, args.duration))
            for run in plan:
                cpu0, gen0, t0 = tree_cpu_s(pid), time.process_time(), time.perf_counter()
                asyncio.run(open_loop(base, run) if run.mode == "open" else closed_loop(base, run))
                run.wall_s = time.perf_counter() - t0
                run.server_cpu_s, run.generator_cpu_s = tree_cpu_s(pid) - cpu0, time.process_time() - gen0
                run.load = os.getloadavg()
                runs.append(run)
                print(_row(run), flush=True)
            served = warm.sent - sum(warm.errors.values()) + sum(len(r.latencies_ms) for r in runs)
        # The server flushed its last counts at shutdown.
        check = {"reads_served": served, "pack_misses_stored": stored_misses(url, pack_slug)}
    return runs, check


# -- report ----------------------------------------------------------------------------------------
def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _row(r: Run) -> str:
    ok = len(r.latencies_ms)
    rate = f"{r.offered:.0f}" if r.offered else f"closed x{r.clients}"
    errs = ", ".join(f"{k}: {v}" for k, v in sorted(r.errors.items())) or "0"
    return (f"| {r.backend} | {r.workers} | {rate} | {ok / max(r.wall_s, r.duration_s):.0f} | {r.sent} | {errs} | "
            f"{_fmt(r.pct(50))} | {_fmt(r.pct(99))} | {_fmt(max(r.latencies_ms) if ok else None)} | "
            f"{1000 * r.server_cpu_s / max(r.sent, 1):.2f} | {1000 * r.generator_cpu_s / max(r.sent, 1):.2f} | "
            f"{r.load[0]:.2f} |")


def _versions() -> dict[str, str]:
    import fastapi
    import sqlalchemy
    import uvicorn

    out = {"python": platform.python_version(), "uvicorn": uvicorn.__version__, "fastapi": fastapi.__version__,
           "sqlalchemy": sqlalchemy.__version__, "httpx": httpx.__version__, "sqlite": sqlite3.sqlite_version}
    try:
        import psycopg

        out["psycopg"] = psycopg.__version__
        with psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", connect_timeout=5) as c:
            out["postgresql"] = str(c.execute("SHOW server_version").fetchone()[0])
    except Exception as e:  # noqa: BLE001  (recorded, not fatal: the sqlite runs stand alone)
        out["postgresql"] = f"unavailable ({e})"
    for mod in ("uvloop", "httptools"):
        try:
            __import__(mod)
            out[mod] = "installed"
        except ImportError:
            out[mod] = "not installed"
    return out


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def render(runs: list[Run], checks: list[tuple[str, int, dict[str, Any]]], args: argparse.Namespace,
           started: dt.datetime, load0: tuple[float, float, float]) -> str:
    lines = [
        f"# GET /v1/configs under load ({started:%Y-%m-%d})", "",
        "Generated by `benchmarks/bench_api.py`: the server is `api.server.serve(workers=N)` in a subprocess on",
        "loopback; the generator is one asyncio process with httpx on the same machine. Latency runs from a",
        "request's scheduled send time (open loop) or its send time (closed loop). Bundle: seed shape",
        f"({SEED}), tuned decode published, pack and logits untuned (two misses counted per read).", "",
        f"- date: {started.isoformat(timespec='seconds')}",
        f"- machine: {_machine()}; load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
        f"- commit: {_commit()}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in _versions().items()),
        f"- {args.duration:.0f} s per rate, closed loop with {args.clients} clients, timeout {TIMEOUT_S:.0f} s per request",
        "", ("| backend | workers | offered req/s | served req/s | sent | errors | p50 ms | p99 ms | max ms "
         "| server CPU ms/req | generator CPU ms/req | load 1m |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(r) for r in runs]
    lines += ["", "Misses counted against reads served (the batched flush loses none):", ""]
    lines += [f"- {b}, {w} worker(s): {c['reads_served']} reads served, {c['pack_misses_stored']} pack misses stored"
              for b, w, c in checks]
    goal = [r for r in runs if r.mode == "open" and r.offered == 500]
    lines += ["", "Goal (0 errors and p99 <= 10 ms at 500 req/s): " + "; ".join(
        f"{r.backend} x{r.workers}: {'met' if not r.errors and (r.pct(99) or 1e9) <= 10 else 'not met'}"
        f" (p99 {_fmt(r.pct(99))} ms, {sum(r.errors.values())} errors)" for r in goal), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rates", default="100,500,1000")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per rate (and of the closed loop)")
    ap.add_argument("--clients", type=int, default=32, help="closed-loop clients")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/api_<date>.md")
    args = ap.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r]
    if not 0 < args.duration <= 60 or not 1 <= args.clients <= 256 or any(not 0 < r <= 5000 for r in args.rates):
        ap.error("duration in (0, 60] s, clients in [1, 256], rates in (0, 5000] req/s")
    started = dt.datetime.now().astimezone()
    load0 = os.getloadavg()
    runs: list[Run] = []
    checks: list[tuple[str, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="kvtune-bench-logs-") as logs:
        for backend in args.backends.split(","):
            for w in (int(x) for x in args.workers.split(",")):
                log = Path(logs) / f"{backend}-{w}.log"
                rs, check = bench_one(backend, w, args, log)
                runs += rs
                checks.append((backend, w, check))
                print(f"{backend} x{w}: {check}", flush=True)
    out = Path(args.out or REPO / "benchmarks" / "results" / f"api_{started:%Y%m%d}.md")
    out.write_text(render(runs, checks, args, started, load0))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
