"""Warmup on a GPU (issue 7): after `warm(keys)`, a randomized serving loop over every bucket runs
under `no_compiles()` without a single compile; the same loop without warmup compiles.

Each phase runs in a fresh process so Triton's in-memory JIT cache starts empty (the on-disk cache
may be warm: a disk hit still goes through the compile hook, and still stalls a serving step).

    python benchmarks/warmup_serving.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from catalog.core import Bucket, Config, ProblemKey  # noqa: E402
from tuner.formats import alloc_cache, page_bytes  # noqa: E402
from tuner.kernels import get_family  # noqa: E402
from tuner.targets import detect  # noqa: E402

POOL_BYTES = 3 << 30  # over 2 GiB, as a real KV pool
PAGE = 64


def plan(target: str) -> list[dict[str, Any]]:
    """The bundle: per kernel, its key and a config per bucket (the family defaults)."""
    from catalog.keys import make_key

    out = []
    for kernel, formats in (("pack", ("nvfp4_288",)), ("decode", ("nvfp4_288", "fp8_528"))):
        key: ProblemKey = make_key(kernel, target, 16, 512, 128, formats)
        fam = get_family(kernel)
        buckets = [b for b in fam.buckets(key) if b.hi <= 1024]  # serving sizes; prefill-sized pack buckets aside
        out.append({"kernel": kernel, "key": key, "buckets": [(b, fam.default_config(key)) for b in buckets]})
    return out


def make_keys(target: str) -> tuple[list[dict], dict[str, str], float]:
    from tuner.warmup import keys_for

    t0 = time.perf_counter()
    keys, sources = [], {}
    for item in plan(target):
        fam = get_family(item["kernel"])
        for bucket, cfg in item["buckets"]:
            sources.update({r.source_hash: r.source for r in fam.modules(item["key"], cfg)})
            # Recorded on the device itself: launchers size some launch arguments from it (decode's
            # automatic split count follows the SM count), so keys belong to a device model.
            keys += [k.to_json() for k in keys_for(item["kernel"], item["key"], cfg, bucket, target, device="cuda")]
    # Buckets that share a config share binaries: a bundle lists each key once.
    keys = list({json.dumps(k, sort_keys=True): k for k in keys}.values())
    return keys, sources, time.perf_counter() - t0


def serve(target: str, steps: int, seed: int) -> int:
    """A randomized serving loop: every bucket, sizes drawn across its range, caches in pools over
    2 GiB, scratch under it. Returns the number of launches."""
    rng = random.Random(seed)
    from tuner.kernels.decode import decode
    from tuner.kernels.pack import pack

    pk = plan(target)
    pack_item, dec_item = pk[0], pk[1]
    nv = "nvfp4_288"
    pool_pages = POOL_BYTES // page_bytes(nv, PAGE)
    comp = alloc_cache(nv, pool_pages, PAGE, device="cuda")
    win = alloc_cache("fp8_528", POOL_BYTES // page_bytes("fp8_528", PAGE), PAGE, device="cuda")
    assert comp.untyped_storage().size() > 2**31 and win.untyped_storage().size() > 2**31
    launches = 0
    for step in range(steps):
        for bucket, cfg in pack_item["buckets"]:
            n = rng.randint(bucket.lo, bucket.hi)
            x = torch.randn(n, 512, device="cuda").to(torch.bfloat16)
            slots = torch.randint(0, pool_pages * PAGE, (n,), device="cuda")
            pack(x, slots, comp, nv, PAGE, cfg)
            launches += 1
        for bucket, cfg in dec_item["buckets"]:
            t = rng.randint(bucket.lo, bucket.hi)
            q = torch.randn(t, 16, 512, device="cuda").to(torch.bfloat16)
            topk = torch.randint(0, pool_pages * PAGE, (t, 512), device="cuda", dtype=torch.int32)
            topk[:, rng.randint(0, 511):] = -1
            wins = torch.randint(0, win.shape[0] * PAGE, (t, 128), device="cuda", dtype=torch.int32)
            decode(q, comp, nv, topk, win, "fp8_528", wins, PAGE, 0.04, attn_sink=torch.zeros(16, device="cuda"),
                   config=cfg)
            launches += 1
    torch.cuda.synchronize()
    return launches


def phase(args: argparse.Namespace) -> int:
    """One fresh process: optionally warm, then serve under the guard; prints a JSON line."""
    from tuner.warmup import CompiledWhileServing, WarmupKey, count_compiles, no_compiles, warm

    target = detect().name
    report: dict[str, Any] = {"phase": args.phase}
    if args.phase == "warm":
        data = json.loads(Path(args.keys).read_text())
        keys = [WarmupKey.from_json(k) for k in data["keys"]]
        r = warm(keys, data["sources"])
        report.update(keys=r.keys, warm_compiles=r.compiled, warm_seconds=round(r.seconds, 2),
                      warm_failed=list(r.failed))
    # Warmed: the loop runs under the guard that raises on any compile. Cold: the same loop, counted.
    guard = no_compiles if args.phase == "warm" else count_compiles
    seen: list[str] = []
    try:
        with guard() as seen:
            report["launches"] = serve(target, args.steps, args.seed)
    except CompiledWhileServing as e:
        report["guard_raised"] = str(e)[:500]
    report["serving_compiles"] = len(seen)
    report["first_compiles"] = seen[:4]
    print(json.dumps(report))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase", choices=["cold", "warm"])
    ap.add_argument("--keys", help="(internal) the keys file a phase reads")
    args = ap.parse_args()
    if args.phase:
        return phase(args)
    from benchmarks.common import provenance

    target = detect().name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys, sources, enum_s = make_keys(target)
    keys_file = out / "warmup_keys.json"
    keys_file.write_text(json.dumps({"keys": keys, "sources": sources}))
    results = {"provenance": provenance(), "target": target, "n_keys": len(keys), "enumerate_seconds": round(enum_s, 2)}
    for ph in ("cold", "warm"):
        cmd = [sys.executable, __file__, "--phase", ph, "--keys", str(keys_file), "--steps", str(args.steps), "--seed", str(args.seed + 1)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:])
            return 1
        results[ph] = json.loads(res.stdout.strip().splitlines()[-1])
    print(json.dumps(results, indent=1))
    # The keys themselves are kept (without the sources, which are large) for inspection.
    keys_file.write_text(json.dumps({"keys": keys}, indent=0))
    md = (f"# warmup before serving\n\n{results['provenance']['gpu']} ({target}), torch {results['provenance']['torch']}, "
          f"triton {results['provenance']['triton']}, {results['provenance']['date']}\n\n"
          f"{len(keys)} warmup keys (pack nvfp4_288 + decode nvfp4_288/fp8_528, every serving bucket), enumerated in "
          f"{enum_s:.1f} s.\n\n| phase | serving launches | compiles while serving | warm time |\n|---|---|---|---|\n"
          f"| no warmup | {results['cold']['launches']} | {results['cold']['serving_compiles']} | - |\n"
          f"| after warm(keys) | {results['warm']['launches']} | {results['warm']['serving_compiles']} | "
          f"{results['warm']['warm_seconds']} s for {results['warm']['keys']} keys |\n")
    (out / "warmup_h200.md").write_text(md)
    (out / "warmup_h200.json").write_text(json.dumps(results, indent=1))
    ok = results["warm"]["serving_compiles"] == 0 and results["cold"]["serving_compiles"] > 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
