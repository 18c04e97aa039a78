"""Correctness and timing of the decode tile's wgmma path against the best Triton configs of
benchmarks/results/decode.md, side by side in one process (H200). Writes a markdown table to stdout."""
from __future__ import annotations

import sys

import torch

from benchmarks.common import provenance, time_us
from catalog.core import Config
from catalog.families.decode import AUTO, default_config
from catalog.families.decode_wgmma import wgmma_config
from tuner.kernels.decode import make_decode_inputs, run_decode, verify_decode, wgmma_plan

PAIRS = (("nvfp4_288", "fp8_528"), ("fp8_528", "nvfp4_288"), ("fp8_528", "fp8_528"))
TRITON_BEST = {  # decode.md's best configs (2026-11-29)
    1: dict(backend="lut", BLOCK_N=32, NUM_SPLITS=0, LISTS="apart", PREFETCH=1, num_warps=8),
    8: dict(backend="lut", BLOCK_N=32, NUM_SPLITS=0, LISTS="apart", PREFETCH=1, num_warps=8),
    64: dict(backend="lut", BLOCK_N=32, NUM_SPLITS=4, PREFETCH=1, num_warps=4),
}


def wgmma_cfg(comp: str, win: str, splits: int) -> Config:
    return wgmma_config(default_config(comp, win)).replace(NUM_SPLITS=splits)


def main() -> None:
    print(provenance())
    ts = [int(t) for t in (sys.argv[1].split(",") if len(sys.argv) > 1 else "1,2,4,8,16,32,64".split(","))]
    fails = 0
    for comp, win in PAIRS:
        for t in ts:
            inp = make_decode_inputs(comp, win, t, 16, 512, 128, "cuda", seed=t)
            for splits in (AUTO, 1, 2, 4, 8, 16):
                cfg = wgmma_cfg(comp, win, splits)
                parts, per = wgmma_plan(cfg, t, 512, 128, torch.device("cuda"))
                for sink in (True, False):
                    i = dict(inp) if sink else {**inp, "attn_sink": None}
                    i["out"][0].fill_(float("nan")); i["out"][1].fill_(float("nan"))
                    bad = verify_decode(comp, win, i, run_decode(comp, win, cfg, i))
                    fails += bad is not None
                    if bad:
                        print(f"FAIL {comp}+{win} T={t} splits={splits} sink={sink}: {bad}")
                us = time_us(lambda: run_decode(comp, win, cfg, inp)) if comp == "nvfp4_288" or t in (1, 64) else float("nan")
                print(f"{comp}+{win} T={t:<3} wgmma S={splits:<2} ({parts} x {per} tiles) {us:8.2f} us")
            if comp == "nvfp4_288" and t in TRITON_BEST:
                cfg = default_config(comp, win).replace(**TRITON_BEST[t])
                print(f"{comp}+{win} T={t:<3} triton best {time_us(lambda: run_decode(comp, win, cfg, inp)):8.2f} us")
    print("failures:", fails)


if __name__ == "__main__":
    main()
