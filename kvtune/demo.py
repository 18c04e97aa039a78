"""The main job's demos: runnable on a GPU or, without one, on Triton's interpreter."""

from __future__ import annotations

import os
import time

import torch

from tuner.formats import FORMATS, alloc_cache, quantize, read_slots
from tuner.targets import detect


def _device() -> str:
    return "cuda" if detect().is_gpu else "cpu"


def pack_demo(tokens: int | None = None, page_size: int = 64) -> int:
    """Pack random tokens into every record format, check the bytes against the reference."""
    if not detect().is_gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from tuner.kernels.pack import pack

    target = detect()
    dev = _device()
    n = tokens or (65536 if target.is_gpu else 64)
    print(f"kvtune pack demo on {target.name} ({'CPU timings: Triton interpreter' if not target.is_gpu else dev}), {n} tokens, page {page_size}")
    bad = 0
    for name, f in FORMATS.items():
        g = torch.Generator(device="cpu").manual_seed(1)
        x = (torch.randn(n, f.dims, generator=g) * 4).to(torch.bfloat16).to(dev)
        pages = -(-n // page_size) + 1
        slots = torch.randperm(pages * page_size, generator=g)[:n].to(dev)
        slots[::17] = -1
        cache = alloc_cache(f, pages, page_size, device=dev)
        pack(x, slots, cache, f, page_size)  # compile / warm
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        pack(x, slots, cache, f, page_size)
        if dev == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        live = slots >= 0
        got = read_slots(cache, slots[live], f, page_size)
        ok = torch.equal(got.cpu(), quantize(x[live].cpu(), f))
        bad += not ok
        print(f"  {name:10s} {f.bytes_per_token:4d} B/token  {'byte-exact' if ok else 'MISMATCH'}  {dt * 1e3:9.2f} ms")
    return 1 if bad else 0


# The seed shape (FORMATS.md): 16 local heads, top-k 512, a 128-token window.
SEED_SHAPE = {"heads": 16, "topk": 512, "window": 128}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fmt_us(v: float | None) -> str:
    return "-" if v is None else (f"{v / 1000:9.1f} ms" if v >= 10_000 else f"{v:9.2f} us")


def main_demo(trials: int | None = None, time_budget_s: float | None = None) -> int:
    """The service end to end on this machine: the API on a fresh SQLite database and one local
    worker process, a tune job for the seed shape on the local GPU (or Triton's interpreter: then a
    deliberately small job, one T=1 bucket and 2 trials), and the engine client's view of the result."""
    import secrets
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from api.client import ClientError, KvtuneClient

    target = detect()
    arch = target.name
    small = not target.is_gpu
    work = Path(tempfile.mkdtemp(prefix="kvtune-demo-"))
    token = secrets.token_urlsafe(16)
    port = _free_port()
    env = dict(os.environ, KVTUNE_DATABASE_URL=f"sqlite:///{work / 'kvtune.db'}", KVTUNE_API_TOKEN=token,
               KVTUNE_LOG_LEVEL="WARNING", KVTUNE_CACHE_DIR=str(work / "cache"))
    repo = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    logs = work / "service.log"
    print(f"kvtune demo: API + worker on {arch} ({'Triton interpreter, CPU timings' if small else 'GPU'}); state in {work}")
    cli = [sys.executable, "-m", "kvtune.cli"]
    with open(logs, "ab") as log:
        server = subprocess.Popen([*cli, "serve", "--port", str(port)], env=env, stdout=log, stderr=log)
        worker = subprocess.Popen([*cli, "worker", "--arch", arch, "--once"], env=env, stdout=log, stderr=log)
    procs = [server, worker]
    try:
        with KvtuneClient(f"http://127.0.0.1:{port}", token=token, timeout=10) as client:
            end = time.monotonic() + 60
            while not client.healthy():
                if server.poll() is not None or time.monotonic() > end:
                    print(f"the API did not start; see {logs}")
                    return 1
                time.sleep(0.2)
            request = {"kernel": "decode", "arch": arch, **SEED_SHAPE, "search": "tpe"}
            request.update({"buckets": [{"dim": "T", "lo": 1, "hi": 1}], "trials": trials or 2} if small
                           else {"trials": trials or 24})
            if time_budget_s:
                request["time_budget_s"] = time_budget_s
            job = client.submit_tune(**request)
            print(f"POST /v1/tune -> job {job['id']} ({job['key_slug']}), {request['trials']} trials per bucket")
            last = [-1]

            def show(j: dict) -> None:
                p = j.get("progress") or {}
                if p.get("trials_done", 0) != last[0]:
                    last[0] = p.get("trials_done", 0)
                    print(f"  {j['status']:9s} {p.get('trials_done', 0)}/{p.get('trials_total', '?')} trials"
                          f" ({p.get('trials_failed', 0)} failed) {p.get('bucket', '')}")

            done = client.wait(job["id"], timeout_s=3600, poll_s=1.0, on_progress=show)
            if done["status"] != "succeeded":
                print(f"job {done['status']}: {done.get('error')}\n(see {logs})")
                return 1
            bundle = client.fetch_bundle(arch, **SEED_SHAPE)
    except ClientError as e:
        print(f"demo failed: {e} (see {logs})")
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

    print(f"GET /v1/configs?arch={arch}&heads=16&topk=512&window=128 (via api/client.py):")
    print(f"  {'kernel':7s} {'bucket':9s} {'default':>12s} {'tuned':>12s} {'speedup':>8s}  config")
    for name, k in sorted(bundle["kernels"].items()):
        for e in k["buckets"]:
            if e["default"]:
                continue
            sp = f"{e['speedup']:.2f}x" if e.get("speedup") else "-"
            print(f"  {name:7s} {e['name']:9s} {_fmt_us(e['default_time_us']):>12s} {_fmt_us(e['time_us']):>12s} {sp:>8s}"
                  f"  {e['config']}")
        n_default = sum(1 for e in k["buckets"] if e["default"])
        if n_default:
            print(f"  {name:7s} {n_default} bucket(s) untuned: served the default config, marked \"default\": true")
    return 0
