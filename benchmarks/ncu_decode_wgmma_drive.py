import sys
from tuner.kernels import decode as dec
PAIR = ("nvfp4_288", "fp8_528")
t, s = int(sys.argv[1]), int(sys.argv[2])
i = dec.make_decode_inputs(*PAIR, t, 16, 512, 128, "cuda", seed=t)
cfg = dec.default_config(*PAIR).replace(MMA="wgmma", BLOCK_N=64, num_warps=4, NUM_SPLITS=s)
for _ in range(3):
    dec.run_decode(*PAIR, cfg, i)
import torch; torch.cuda.synchronize()
