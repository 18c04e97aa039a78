"""Distributed tuning on the GPUs of one host (issue 29): the same distributed decode job at the seed
shape (fixed trials per bucket, fixed seed) run by 1, 2, ..., N workers, one per GPU (`--gpu i`),
on one SQLite database and one API on loopback. Per N it records the wall time to the job's end,
the trials each worker measured, the best time per bucket with its config, and the default config's
time per bucket (trial 0 of each shared study: measured by whichever participant asked first, so
across the runs it lands on different GPUs; a distorted GPU shows up as spread there).

Written 2026-12-01 with no several-GPU machine lent; smoke-tested on `interp` only.

    python benchmarks/bench_distributed.py --gpus 1,2,4 --trials 8 --out benchmarks/results     # on N GPUs
    python benchmarks/bench_distributed.py --arch interp --gpus 1,2 --trials 2 --buckets 1-1   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import select  # noqa: E402

from db.models import TrialResult  # noqa: E402
from db.session import Database  # noqa: E402
from tuner.runtime.client import KvtuneClient  # noqa: E402

SHAPE = {"heads": 16, "topk": 512, "window": 128}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cli: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cli, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=REPO)


def run_n(n: int, arch: str, trials: int, buckets: list[dict[str, int]] | None, seed: int, work: Path) -> dict[str, Any]:
    db_url = f"sqlite:///{work / f'n{n}.db'}"
    token = secrets.token_urlsafe(12)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KVTUNE_DATABASE_URL": db_url, "KVTUNE_API_TOKEN": token}
    if arch == "interp":
        env["TRITON_INTERPRET"] = "1"
    port = free_port()
    cli = [sys.executable, "-m", "kvtune.cli"]
    procs = [_start([*cli, "serve", "--port", str(port)], env, work / f"n{n}.serve.log")]
    url = f"http://127.0.0.1:{port}"
    try:
        with KvtuneClient(url, token=token, timeout=30) as client:
            end = time.monotonic() + 60
            while not client.healthy():
                if time.monotonic() > end:
                    raise RuntimeError(f"the API did not start: {work / f'n{n}.serve.log'}")
                time.sleep(0.2)
            body: dict[str, Any] = {"kernel": "decode", "arch": arch, **SHAPE, "trials": trials, "seed": seed,
                                    "search": "tpe", "distributed": True, "max_workers": n}
            if buckets:
                body["buckets"] = [{"dim": "T", **b} for b in buckets]
            job = client.submit_tune(**body)
            t0 = time.monotonic()
            for i in range(n):  # one worker a GPU, all on the one job
                gpu = ["--gpu", str(i)] if arch != "interp" else []
                procs.append(_start([*cli, "worker", "--arch", arch, *gpu, "--once", "--name", f"bench-w{i}"], env,
                                    work / f"n{n}.worker{i}.log"))
            done = client.wait(job["id"], timeout_s=3 * 3600, poll_s=1.0)
            wall = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(60)
    return {"workers": n, "status": done["status"], "wall_s": round(wall, 1), "best": done.get("best"),
            **_trials(db_url, job["id"])}


def _trials(db_url: str, job_id: int) -> dict[str, Any]:
    db = Database(db_url)
    try:
        rows = db.run(lambda s: s.execute(select(TrialResult.worker, TrialResult.bucket, TrialResult.number,
                                                 TrialResult.time_us, TrialResult.params)
                                          .where(TrialResult.job_id == job_id)).all(), write=False)
    finally:
        db.dispose()
    per_worker: dict[str, int] = {}
    default_times: dict[str, list[float]] = {}
    for r in rows:
        per_worker[r.worker] = per_worker.get(r.worker, 0) + 1
        if r.number == 0 and r.time_us is not None:  # each participant's study starts at the default
            default_times.setdefault(r.bucket, []).append(r.time_us)
    return {"trials_per_worker": per_worker, "default_us_by_bucket": default_times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="1,2", help="worker counts to run, e.g. 1,2,4,8")
    ap.add_argument("--arch", default="sm_90", help="the workers' target (interp: a CPU smoke run)")
    ap.add_argument("--trials", type=int, default=8, help="trials per bucket for the whole job")
    ap.add_argument("--buckets", default=None, help="lo-hi,... of T (default: the decode family's)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="write distributed_<arch>.json here")
    args = ap.parse_args()
    buckets = None
    if args.buckets:
        buckets = [{"lo": int(p.split("-")[0]), "hi": int(p.split("-")[-1])} for p in args.buckets.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kvtune-distributed-"))
    results = [run_n(int(n), args.arch, args.trials, buckets, args.seed, work) for n in args.gpus.split(",")]
    base = results[0]["wall_s"]
    for r in results:
        r["speedup"] = round(base / r["wall_s"], 2) if r["wall_s"] else None
        print(f"N={r['workers']}: {r['status']} in {r['wall_s']} s ({r['speedup']}x), trials {r['trials_per_worker']}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"distributed_{args.arch}.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"logs and databases in {work}")
    return 0 if all(r["status"] == "succeeded" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
