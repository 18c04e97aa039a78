"""Packs 1M bf16 tokens with one config a few times, for Nsight Compute (H200). Arguments: the
record format, then the config over the format's default as NAME=v,... (benchmarks.common.parse_cfg):

    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy --section LaunchStats -k regex:pack_kernel -s 2 -c 1 \
        python3 benchmarks/ncu_pack_drive.py mxfp4_68 backend=swar,BLOCK_T=16
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.bench_pack import _inputs  # noqa: E402
from benchmarks.common import parse_cfg  # noqa: E402
from catalog.families.pack import default_config  # noqa: E402
from tuner.kernels.pack import pack  # noqa: E402


def main() -> None:
    fmt = sys.argv[1]
    cfg = parse_cfg(sys.argv[2] if len(sys.argv) > 2 else "", default_config(fmt))
    x, slots, cache = _inputs(fmt, 1 << 20, 64, seed=2)  # the inputs bench_pack times
    for _ in range(3):
        pack(x, slots, cache, fmt, 64, cfg)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
