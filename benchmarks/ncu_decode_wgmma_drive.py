"""Launches the decode tile's wgmma path a few times at one (T, NUM_SPLITS), for Nsight Compute
(H200, the nvfp4_288 + fp8_528 pair at the seed shape):

    ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
        -k regex:decode_wgmma -s 2 -c 1 python3 benchmarks/ncu_decode_wgmma_drive.py 64 2
"""
from __future__ import annotations

import sys

import torch

from tuner.kernels import decode as dec

PAIR = ("nvfp4_288", "fp8_528")


def main() -> None:
    t, splits = int(sys.argv[1]), int(sys.argv[2])
    inputs = dec.make_decode_inputs(*PAIR, t, 16, 512, 128, "cuda", seed=t)
    cfg = dec.wgmma_config(dec.default_config(*PAIR)).replace(NUM_SPLITS=splits)
    for _ in range(3):
        dec.run_decode(*PAIR, cfg, inputs)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
