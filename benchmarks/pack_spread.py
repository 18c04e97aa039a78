"""Where the small-record formats' pack times spread (issue 26 notes: mxfp4_68 and fp8_132 took
up to 2x longer in some processes): one config timed by do_bench and by CUDA-graph replay, on
several fresh allocations of the same inputs in one process, with each allocation's device address.

    python3 benchmarks/pack_spread.py mxfp4_68 backend=swar,BLOCK_T=16 --allocs 4 --out $OUT
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.bench_pack import _inputs  # noqa: E402
from benchmarks.common import parse_cfg, provenance, time_us  # noqa: E402
from catalog.families.pack import default_config, pack_bytes  # noqa: E402
from tuner.kernels.pack import pack  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("fmt")
    ap.add_argument("cfg", nargs="?", default="")
    ap.add_argument("--allocs", type=int, default=4)
    ap.add_argument("--out", default="/tmp")
    a = ap.parse_args()
    cfg = parse_cfg(a.cfg, default_config(a.fmt))
    rows = []
    keep = []  # earlier allocations stay alive, so each new one lands elsewhere
    for i in range(a.allocs):
        x, slots, cache = _inputs(a.fmt, 1 << 20, 64, seed=2)
        keep.append((x, slots, cache))
        fn = lambda: pack(x, slots, cache, a.fmt, 64, cfg)  # noqa: E731
        r = {"alloc": i, "x_ptr": hex(x.data_ptr()), "cache_ptr": hex(cache.data_ptr()),
             "do_bench_us": [round(time_us(fn, graph=False, rep=100), 1) for _ in range(2)],
             "graph_us": [round(time_us(fn, graph=True, rep=100), 1) for _ in range(2)]}
        rows.append(r)
        print(json.dumps(r), flush=True)
    out = {"provenance": provenance(), "fmt": a.fmt, "config": cfg.as_dict(), "bytes": pack_bytes(a.fmt, 1 << 20),
           "rows": rows}
    Path(a.out, f"pack_spread_{a.fmt}.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
