"""The main job's demos: runnable on a GPU or, without one, on Triton's interpreter."""

from __future__ import annotations

import os
import time
from typing import Any

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
INTERP_NOTE = ("Triton's interpreter runs the kernels in Python on the CPU: its times are CPU times and say\n"
               "nothing of a GPU (run the demo on one for real numbers).")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fmt_us(v: float | None) -> str:
    return "-" if v is None else (f"{v / 1000:,.1f} ms" if v >= 10_000 else f"{v:,.2f} µs")


class _Service:
    """The API on a fresh SQLite file and one local worker, as subprocesses (stopped on exit)."""

    def __init__(self, arch: str) -> None:
        import secrets
        import sys
        import tempfile
        from pathlib import Path

        self.arch = arch
        self.work = Path(tempfile.mkdtemp(prefix="kvtune-demo-"))
        self.token = secrets.token_urlsafe(16)
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.logs = self.work / "service.log"
        self.env = dict(os.environ, KVTUNE_DATABASE_URL=f"sqlite:///{self.work / 'kvtune.db'}", KVTUNE_API_TOKEN=self.token,
                        KVTUNE_LOG_LEVEL="WARNING", KVTUNE_CACHE_DIR=str(self.work / "cache"))
        repo = Path(__file__).resolve().parent.parent
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), self.env.get("PYTHONPATH", "")) if p)
        self.cli = [sys.executable, "-m", "kvtune.cli"]
        self.procs: list[Any] = []

    def __enter__(self) -> _Service:
        import subprocess

        port = self.url.rsplit(":", 1)[1]
        with open(self.logs, "ab") as log:
            self.procs.append(subprocess.Popen([*self.cli, "serve", "--port", port], env=self.env, stdout=log, stderr=log))
            self.procs.append(subprocess.Popen([*self.cli, "worker", "--arch", self.arch, "--once"], env=self.env,
                                               stdout=log, stderr=log))
        return self

    def wait_healthy(self, client: Any, timeout_s: float = 60.0) -> bool:
        end = time.monotonic() + timeout_s
        while not client.healthy():
            if self.procs[0].poll() is not None or time.monotonic() > end:
                return False
            time.sleep(0.2)
        return True

    def __exit__(self, *exc: object) -> None:
        import subprocess

        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def _follow(client: Any, job: dict[str, Any], total: int) -> dict[str, Any]:
    """Poll the job, a line each time its state or trial count moves; a second-by-second bar on a
    terminal. Returns the job as it ended."""
    import sys

    from tqdm import tqdm

    live = sys.stdout.isatty()
    last: list[Any] = [None, -1]
    t0 = time.monotonic()
    with tqdm(total=total, unit="trial", disable=not live, leave=False) as bar:
        def show(j: dict[str, Any]) -> None:
            p = j.get("progress") or {}
            done = int(p.get("trials_done", 0))
            bar.set_postfix_str(f"{j['status']} {time.monotonic() - t0:.0f} s")
            if (j["status"], done) == tuple(last):
                bar.refresh()
                return
            if j["status"] == "queued":
                bar.write("  queued: the worker is starting (it loads torch and Triton first)")
            elif done > max(last[1], 0) or (done == 0 and j["status"] == "running"):
                bar.update(done - max(last[1], 0))
                best = "; ".join(f"{b}: best {_fmt_us(v.get('time_us'))} (default {_fmt_us(v.get('default_time_us'))})"
                                 for b, v in sorted((j.get("best") or {}).items()))
                failed = p.get("trials_failed", 0)
                bar.write(f"  {j['status']}: {done}/{p.get('trials_total', total)} trials measured"
                          f"{f', {failed} failed' if failed else ''}{f'  {best}' if best else ''}")
            last[:] = [j["status"], done]

        return client.wait(job["id"], timeout_s=3600, poll_s=0.5, on_progress=show)


def _tune(client: Any, arch: str, small: bool, trials: int | None, time_budget_s: float | None) -> dict[str, Any]:
    request: dict[str, Any] = {"kernel": "decode", "arch": arch, **SEED_SHAPE, "search": "tpe"}
    request.update({"buckets": [{"dim": "T", "lo": 1, "hi": 1}], "trials": trials or 2} if small
                   else {"trials": trials or 24})
    if time_budget_s:
        request["time_budget_s"] = time_budget_s
    job = client.submit_tune(**request)
    print(f"POST /v1/tune -> job {job['id']} ({job['key_slug']}), {request['trials']} trials per bucket: each is "
          "rendered, compiled, checked against the float64 reference, then timed")
    return _follow(client, job, request["trials"] * len(request.get("buckets") or [None] * 7))


def _show_bundle(bundle: dict[str, Any], arch: str) -> None:
    from catalog.words import describe

    print(f"\nGET /v1/configs?arch={arch}&heads=16&topk=512&window=128 (what an engine fetches):")
    for name, k in sorted(bundle["kernels"].items()):
        tuned = [e for e in k["buckets"] if not e["default"]]
        for e in tuned:
            sp = f"{e['speedup']:.2f}x" if e.get("speedup") else "-"
            print(f"  {name} {e['name']}: {_fmt_us(e['time_us'])} tuned against {_fmt_us(e['default_time_us'])} "
                  f"default ({sp})\n    tuned:   {describe(name, e['config'])}"
                  f"\n    default: {describe(name, e['default_config'])}")
        n_default = len(k["buckets"]) - len(tuned)
        if n_default:
            print(f"  {name}: {n_default} bucket(s) not tuned: served the default config, marked \"default\": true")


def _engine(service: _Service, arch: str, small: bool, bundle: dict[str, Any]) -> bool:
    from kvtune.demo_engine import serve_decode_calls

    sizes, calls = ([1, 2, 3], 6) if small else ([1, 2, 4, 8, 16, 32, 64], 300)
    print(f"\nAs an engine: TunedKernels.from_server(...), then {calls} decode calls of batch {sizes} "
          "through flash_mla_with_kvcache")
    r = serve_decode_calls(service.url, arch, SEED_SHAPE, bundle, sizes, calls)
    print(f"  {r.calls} calls in {r.seconds:.1f} s; compiles after warmup: {r.compiles_after_warmup}")
    speedups = {e["name"]: e.get("speedup") for e in bundle["kernels"]["decode"]["buckets"]}
    for name, n in sorted(r.by_bucket.items()):
        sp = speedups.get(name)
        print(f"  bucket {name}: {n} call{'s' if n != 1 else ''}, "
              f"{'tuned, %.2fx over the default' % sp if sp else 'the default config'}")
    return r.compiles_after_warmup == 0


def main_demo(trials: int | None = None, time_budget_s: float | None = None, keep_serving: bool | None = None) -> int:
    """The service end to end on this machine: the API on a fresh SQLite database and one local
    worker process, a tune job for the seed shape on the local GPU (or Triton's interpreter: then a
    deliberately small job, one T=1 bucket and 2 trials), the bundle in words, and an engine's use
    of it. With `keep_serving` (the default on a terminal) the API stays up for the dashboard."""
    import sys

    from tuner.runtime.client import ClientError, KvtuneClient

    target = detect()
    arch, small = target.name, not target.is_gpu
    if small:  # this process runs kernels too (the engine part): under the interpreter, as the worker does
        os.environ.setdefault("TRITON_INTERPRET", "1")
    keep_serving = sys.stdout.isatty() if keep_serving is None else keep_serving
    with _Service(arch) as service:
        print(f"kvtune demo: API + worker on {arch} ({'Triton interpreter on the CPU' if small else 'GPU'}); "
              f"state and logs in {service.work}")
        if small:
            print(INTERP_NOTE)
        try:
            with KvtuneClient(service.url, token=service.token, timeout=10) as client:
                if not service.wait_healthy(client):
                    print(f"the API did not start; see {service.logs}")
                    return 1
                print(f"API up at {service.url}")
                done = _tune(client, arch, small, trials, time_budget_s)
                if done["status"] != "succeeded":
                    print(f"job {done['status']}: {done.get('error')}\n(see {service.logs})")
                    return 1
                bundle = client.fetch_bundle(arch, **SEED_SHAPE)
        except ClientError as e:
            print(f"demo failed: {e} (see {service.logs})")
            return 1
        _show_bundle(bundle, arch)
        ok = _engine(service, arch, small, bundle)
        print(f"\nDashboard: {service.url}/dashboard (tuned against default, the study's progress)")
        if keep_serving:
            print("The API keeps serving until Ctrl-C.")
            try:
                service.procs[0].wait()
            except KeyboardInterrupt:
                print()
    return 0 if ok else 1
