"""Launches one wgmma-path decode config a few times, for Nsight Compute (H200). Arguments: T,
NUM_SPLITS, then optionally the record pair (default nvfp4_288,fp8_528: the seed shape's), the
head count (16), the build (MMA=wgmma, wgmma_hm, wgmma_hmpv...), num_warps (4; the heads-on-M builds fix
theirs) and PREFETCH (0; 1 on the warp-specialised builds):

    ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
        -k regex:decode_wgmma -s 2 -c 1 python3 benchmarks/ncu_decode_wgmma_drive.py 64 2
    ncu ... python3 benchmarks/ncu_decode_wgmma_drive.py 64 0 fp8_584,fp8_584 128 wgmma_hm
    ncu ... python3 benchmarks/ncu_decode_wgmma_drive.py 64 0 fp8_584,fp8_584 128 wgmma_hmpv 4 1
"""
from __future__ import annotations

import sys

import torch

from tuner.kernels import decode as dec


def main() -> None:
    argv = sys.argv[1:]
    t, splits = int(argv[0]), int(argv[1])
    pair = tuple(argv[2].split(",")) if len(argv) > 2 else ("nvfp4_288", "fp8_528")
    heads = int(argv[3]) if len(argv) > 3 else 16
    mma = argv[4] if len(argv) > 4 else "wgmma"
    warps = int(argv[5]) if len(argv) > 5 else dec.WGMMA_WARPS
    prefetch = int(argv[6]) if len(argv) > 6 else 0
    inputs = dec.make_decode_inputs(pair[0], pair[1], t, heads, 512, 128, "cuda", seed=t)
    cfg = dec.wgmma_config(dec.default_config(*pair).replace(MMA=mma, num_warps=warps, PREFETCH=prefetch))
    cfg = cfg.replace(NUM_SPLITS=splits)
    for _ in range(3):
        dec.run_decode(pair[0], pair[1], cfg, inputs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
