"""Record a timing table: the full grid of one realistic space per kernel (`TABLE_SPACES`: the
family's space with some choices left out), every bucket, measured on
the local GPU through the benchmark child (verified, CUDA-graph timed). The tables feed the
simulated runner (`tuner.bench.simulation.SimulatedRunner`) that search tests and
`benchmarks/search_efficiency.py` replay on a CPU.

    python benchmarks/record_table.py --kernel decode --time-limit 540           # one H200
    python benchmarks/record_table.py --kernel decode --devices 0,1,2,3 --resume  # 4 GPUs, continue
    python benchmarks/record_table.py --kernel pack --smoke                        # a minute, to check

The table is written to `benchmarks/tables/<kernel>.json` atomically every few entries, so a run
cut by its time limit (or a killed command) keeps what it measured; `--resume` skips entries already
there. Buckets are done one after another (configs shuffled inside a bucket), so a cut run leaves
complete buckets and one partial one; `meta.complete` says whether the whole grid is in.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.bench.protocol import Candidate  # noqa: E402
from tuner.bench.runner import BenchRunner  # noqa: E402
from tuner.bench.simulation import load_table, new_table, save_table, table_put  # noqa: E402
from catalog.core import Bucket, Config, ProblemKey, TrialStatus  # noqa: E402
from tuner.kernels import get_family  # noqa: E402
from catalog.keys import make_key, parse_buckets  # noqa: E402

TABLE_DIR = Path(__file__).resolve().parent / "tables"

# The realistic sub-grid recorded per kernel (every parameter not named keeps all its choices):
# choices that never win on a GPU or that multiply compiles for nothing are left out, so a whole
# grid fits in minutes of device time. `--restrict NAME=a,b` overrides one parameter.
TABLE_SPACES: dict[str, dict[str, tuple]] = {
    "pack": {},  # the whole space (about 100 configs)
    # fp32 dot operands are a precision option (2x the shared memory, never faster); deeper
    # pipelines than one stage and 4 warps did not pay in the H200 sweep; AUTO and two fixed
    # split counts. 90 configs per bucket (one H200 recorded all 7 buckets in ~4 minutes).
    "decode": {"DOT": ("bf16",), "num_stages": (1,), "NUM_SPLITS": (0, 4, 16), "PREFETCH": (0,), "num_warps": (8,)},
    # The two paths that keep fp8/e2m1 operands (the dequantizing f16/bf16 paths were 2-3x slower
    # in the H200 sweep), the seed's 64 heads in one dot, and the tile shapes around the default.
    # PREFETCH (here and for decode) stays at its default: both would double the table; the
    # benchmarks sweep it.
    "logits": {"dot": ("fp8", "scaled"), "BLOCK_N": (64, 128), "TILES": (4,), "QT": (1, 2), "HEADS": (64,),
               "PREFETCH": (0,), "num_warps": (4, 8), "num_stages": (2,)},
}


def parse_restrict(items: list[str], space) -> dict[str, tuple]:  # noqa: ANN001
    """`NAME=a,b` strings -> {NAME: choices}, each value matched against the parameter's choices
    by its text (so ints and strings both work)."""
    out: dict[str, tuple] = {}
    by_name = {p.name: p for p in space.params}
    for item in items:
        name, _, values = item.partition("=")
        if name not in by_name or not values:
            raise SystemExit(f"--restrict {item!r}: expected NAME=a,b with NAME one of {sorted(by_name)}")
        text = {str(c): c for c in by_name[name].choices}
        bad = [v for v in values.split(",") if v not in text]
        if bad:
            raise SystemExit(f"--restrict {item!r}: {bad} not among {list(text)}")
        out[name] = tuple(text[v] for v in values.split(","))
    return out


def table_space_for(kernel: str, key, restrict: list[str]):  # noqa: ANN001, ANN201
    space = get_family(kernel).space(key)
    return space.restrict({**TABLE_SPACES.get(kernel, {}), **parse_restrict(restrict, space)})


def _work(kernel: str, key, space, buckets: list[Bucket], table: dict, smoke: bool,  # noqa: ANN001
          max_configs: int | None, target: str) -> list[tuple[Bucket, Config]]:
    fam = get_family(kernel)
    configs = [c for c in space.grid() if fam.legality(fam.variant_of(c), target) is None]
    default = space.default()
    items = []
    for b in buckets:
        cs = list(configs)
        random.Random(f"{key.slug()}/{b.name()}").shuffle(cs)  # a cut run keeps a random subset, not a corner
        cs.sort(key=lambda c: c != default)  # the default first in every bucket
        if smoke:
            cs = cs[:6]
        elif max_configs:
            cs = cs[:max_configs]
        done = table["buckets"].get(b.name(), {}).get("entries", {})
        items += [(b, c) for c in cs if c.to_json() not in done]
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", action="append", choices=["pack", "decode", "logits"],
                    help="repeatable; default: all three")
    ap.add_argument("--smoke", action="store_true", help="two buckets x six configs per kernel, to check the setup")
    ap.add_argument("--time-limit", type=float, default=540.0, help="seconds for the whole run (default 540)")
    ap.add_argument("--trial-timeout", type=float, default=60.0)
    ap.add_argument("--devices", default=None, help="GPU indices, one benchmark child each (default: one, the current)")
    ap.add_argument("--buckets", default=None, help="lo-hi[@ctx],... (default: the kernel's)")
    ap.add_argument("--max-configs", type=int, default=None, help="per bucket (default: the whole grid)")
    ap.add_argument("--restrict", action="append", default=[], metavar="NAME=a,b",
                    help="record only these choices of a parameter (repeatable; overrides TABLE_SPACES)")
    ap.add_argument("--resume", action="store_true", help="keep the entries of an existing table and add the rest")
    ap.add_argument("--precompile-jobs", type=int, default=min(12, os.cpu_count() or 1),
                    help="processes that compile every entry before timing starts (GPU only; 0 or 1: off)")
    ap.add_argument("--out-dir", default=str(TABLE_DIR))
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--topk", type=int, default=512)
    ap.add_argument("--window", type=int, default=128)
    args = ap.parse_args(argv)

    end = time.monotonic() + args.time_limit
    devices = [int(d) for d in args.devices.split(",")] if args.devices else [None]
    runners = [BenchRunner("auto", device_index=d, trial_timeout_s=args.trial_timeout, precompile=False)
               for d in devices]
    try:
        target = runners[0].target
        if target == "interp" and not args.smoke:
            print("no GPU here: only --smoke runs on the interpreter (its timings are CPU timings)", file=sys.stderr)
            return 2
        plans = [plan(kernel, target, args, runners[0].info()) for kernel in args.kernel or ["pack", "decode", "logits"]]
        compiled = _precompile_ahead(plans, target, args.precompile_jobs, end)
        for p in plans:
            # Timing waits for this kernel's compiles (the child would otherwise compile the same
            # binaries one by one beside the pool); later kernels keep compiling meanwhile.
            compiled[p.kernel].wait(timeout=max(0.0, end - time.monotonic()))
            if time.monotonic() >= end:
                print(f"{p.kernel}: skipped, time limit reached")
                continue
            measure(p, runners, args, end)
    finally:
        for r in runners:
            r.close()
        _stop_precompile()
    return 0


def _stop_precompile() -> None:
    """End compile workers still running past the time limit (a pool's exit would otherwise wait
    for their shares, past the device call's end)."""
    import multiprocessing as mp

    for child in mp.active_children():
        child.kill()


def _precompile_ahead(plans: list[Plan], target: str, jobs: int, end: float) -> dict[str, threading.Event]:
    """Compile every kernel's entries in a background thread, kernel after kernel, so the next
    kernel compiles on the CPU while this one is timed on the GPU (the pool's one-off launches
    are a few microseconds each against the timing child's graph replays, whose median they
    do not move). Returns an event per kernel, set once its entries are compiled (or skipped)."""
    events = {p.kernel: threading.Event() for p in plans}

    def run() -> None:
        for p in plans:
            if target != "interp" and time.monotonic() < end:
                precompile(p.kernel, p.key, p.items, jobs)
            events[p.kernel].set()

    threading.Thread(target=run, daemon=True, name="precompile").start()
    return events


def _precompile_share(kernel: str, key_json: dict, share: list[tuple[dict, dict]], device: str = "cuda") -> int:
    """Worker of `precompile`: launch each (bucket, config) once on small real inputs of its bucket,
    so that Triton's JIT compiles it into the shared on-disk cache. Failures are the bench child's
    to classify later; a sticky CUDA error ends this worker's share."""
    import torch

    from catalog.core import ProblemKey

    fam = get_family(kernel)
    key = ProblemKey.from_json(key_json)
    inputs: dict[str, object] = {}
    done = 0
    for bj, cj in share:
        b, c = Bucket.from_json(bj), Config.from_dict(cj)
        if b.name() not in inputs:
            inputs[b.name()] = fam.make_inputs(key, b, device, 1)
        try:
            fam.run(key, c, inputs[b.name()])
            if device == "cuda":
                torch.cuda.synchronize()
            done += 1
        except Exception as e:  # noqa: BLE001
            if "CUDA" in str(e) or "illegal" in str(e):
                break
    return done


def precompile_shares(items: list[tuple[Bucket, Config]], jobs: int) -> list[list[tuple[Bucket, Config]]]:
    """`jobs` shares of the entries, every bucket of a config in ONE share: most buckets launch the
    same binary, which that process then compiles once and finds in its own cache. Dealt
    round-robin entry by entry, the buckets of a config went to different processes that all
    compiled it at the same time (on the H200 host: 223 decode entries, 159 s in 30 processes)."""
    by_config: dict[str, list[tuple[Bucket, Config]]] = {}
    for b, c in items:
        by_config.setdefault(json.dumps(c.as_dict(), sort_keys=True), []).append((b, c))
    shares: list[list[tuple[Bucket, Config]]] = [[] for _ in range(jobs)]
    for group in sorted(by_config.values(), key=len, reverse=True):  # largest first, to the lightest share
        min(shares, key=len).extend(group)
    return shares


def precompile(kernel: str, key, items: list[tuple[Bucket, Config]], jobs: int, device: str = "cuda") -> None:  # noqa: ANN001
    """Compile every entry to measure in `jobs` processes before the (serial) timing starts: the
    bench child then finds each binary in Triton's cache. Compiling is CPU work and the timing
    child compiles one candidate at a time, so on a 16-core GPU host this is most of a table's
    device time saved. Best effort: whatever fails here is compiled and judged by the child."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    if jobs < 2 or not items:
        return
    t0 = time.monotonic()
    shares = [[(b.to_json(), c.as_dict()) for b, c in share] for share in precompile_shares(items, jobs)]
    done = 0
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
            for n in pool.map(_precompile_share, [kernel] * jobs, [key.to_json()] * jobs, shares, [device] * jobs):
                done += n
    except Exception as e:  # noqa: BLE001  (a broken pool only loses the head start)
        print(f"  precompile stopped: {type(e).__name__}: {e}", flush=True)
    print(f"  precompiled {done}/{len(items)} entries in {jobs} processes, {time.monotonic() - t0:.0f} s", flush=True)


@dataclass
class Plan:
    """One kernel's table to record: the table (loaded for --resume, else new), where it goes, and
    the (bucket, config) entries still to measure."""
    kernel: str
    key: ProblemKey
    out: Path
    table: dict
    items: list[tuple[Bucket, Config]]


def plan(kernel: str, target: str, args: argparse.Namespace, info: dict[str, str]) -> Plan:
    fam = get_family(kernel)
    key = make_key(kernel, target, args.heads, args.topk, args.window)
    buckets = parse_buckets(args.buckets, fam.buckets(key)) if args.buckets else fam.buckets(key)
    if args.smoke:
        buckets = buckets[:2]
    out = Path(args.out_dir) / (f"{kernel}.smoke.json" if args.smoke else f"{kernel}.json")
    table = None
    if args.resume and out.exists():
        table = load_table(out)
        if table["meta"]["key"] != key.to_json():
            raise SystemExit(f"{out} was recorded for another key; move it away or drop --resume")
    space = table_space_for(kernel, key, args.restrict)
    if table is not None and table["meta"]["space"] != space.to_json():
        raise SystemExit(f"{out} was recorded over another space; move it away or drop --resume")
    if table is None:
        table = new_table(key, kernel, target, info, space=space.to_json())
    items = _work(kernel, key, space, buckets, table, args.smoke, args.max_configs, target)
    print(f"{key.slug()}: {len(items)} entries to measure -> {out}", flush=True)
    return Plan(kernel, key, out, table, items)


def measure(p: Plan, runners: list[BenchRunner], args: argparse.Namespace, end: float) -> None:
    kernel, key, table, items, out = p.kernel, p.key, p.table, p.items, p.out
    print(f"{key.slug()}: timing {len(items)} entries on {len(runners)} device(s)", flush=True)
    todo: queue.Queue[tuple[Bucket, Config]] = queue.Queue()
    for it in items:
        todo.put(it)
    lock = threading.Lock()
    counts = {"done": 0, "failed": 0}
    last_save = [time.monotonic()]

    def worker(runner: BenchRunner) -> None:
        while time.monotonic() < end:
            try:
                b, c = todo.get_nowait()
            except queue.Empty:
                return
            m = runner.evaluate(Candidate(kernel, key, b, c, seed=counts["done"]))
            with lock:
                table_put(table, b, c, m)
                counts["done"] += 1
                counts["failed"] += m.status is not TrialStatus.OK
                if counts["done"] % 10 == 0 or time.monotonic() - last_save[0] > 30:
                    save_table(table, out)
                    last_save[0] = time.monotonic()
                    print(f"  {counts['done']}/{len(items)} measured, {counts['failed']} failed", flush=True)

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table["meta"]["complete"] = todo.empty() and counts["done"] == len(items) and not args.smoke \
        and not args.max_configs
    save_table(table, out)
    for name, b in table["buckets"].items():
        ok = [e["time_us"] for e in b["entries"].values() if e["status"] == "ok"]
        best = f"{min(ok):.2f} us" if ok else "-"
        print(f"  {name}: {len(b['entries'])} entries, {len(ok)} ok, best {best}")
    print(f"wrote {out} ({'complete' if table['meta']['complete'] else 'partial'})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
