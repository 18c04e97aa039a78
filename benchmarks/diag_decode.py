"""Which decode-tile configs are wrong on this GPU, and for which tokens (a diagnostic, not a benchmark)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from catalog.families.decode import default_config  # noqa: E402
from tuner.kernels.decode import make_decode_inputs, run_decode  # noqa: E402
from tuner.reference import decode_reference  # noqa: E402


def main() -> None:
    pair = ("nvfp4_288", "fp8_528")
    for n_tok, topk, window in ((2, 32, 16), (4, 512, 128)):
        inp = make_decode_inputs(pair[0], pair[1], n_tok, 16, topk, window, "cuda", seed=3)
        ro, _ = decode_reference(inp["q"], inp["comp_cache"], pair[0], inp["topk_idx"], inp["win_cache"], pair[1],
                                 inp["window_idx"], inp["page_size"], inp["sm_scale"], inp["attn_sink"])
        d = default_config(*pair)
        for bn, mma, dot, nw, sp in itertools.product((16, 32, 64), ("heads_m", "keys_m"), ("bf16", "fp32"), (4, 8), (1, 8)):
            cfg = d.replace(BLOCK_N=bn, MMA=mma, DOT=dot, num_warps=nw, NUM_SPLITS=sp)
            try:
                inp["out"][0].fill_(float("nan"))
                o, _ = run_decode(pair[0], pair[1], cfg, inp)
                torch.cuda.synchronize()
                err = [float((o[t].double() - ro[t]).norm() / ro[t].norm()) for t in range(n_tok)]
                print(f"T={n_tok} topk={topk} BN={bn:2d} {mma:7s} {dot} w{nw} S{sp}: " + " ".join(f"{e:.1e}" for e in err), flush=True)
            except Exception as e:  # noqa: BLE001 - a diagnostic lists failures
                print(f"T={n_tok} BN={bn} {mma} {dot} w{nw} S{sp}: {type(e).__name__}: {str(e)[:120]}", flush=True)


if __name__ == "__main__":
    main()
