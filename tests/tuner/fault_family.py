"""A test-only kernel family whose configs misbehave on purpose, so the benchmark child and the
search can be tested on the CPU in seconds: `mode` picks a behaviour, `delay_ms` makes the healthy
configs measurably different. Loaded by dotted path: `get_family("tests.tuner.fault_family:FAMILY")`.

    ok      y = 2x after sleeping delay_ms (1, 3 or 6: the best healthy config is delay_ms=1)
    wrong   y = 2x + 1 with no delay: the fastest config of all, and wrong
    raise   raises at the first launch (-> compile_error)
    abort   os.abort() (-> crashed, the child dies)
    hang    sleeps forever (-> timeout, the child is killed)
    sticky  raises the message of a sticky CUDA error (-> crashed, the child exits itself)
    oob     a real Triton kernel storing 2**40 bytes past its buffer: a segfault on the interpreter,
            an illegal address (a sticky CUDA error) on a GPU (-> crashed either way)
    illegal a variant the legality table forbids everywhere (-> illegal_on_arch / pruned)

KVTUNE_FAULT_SETS_S (seconds, read in the bench child) makes building the timing input sets slow.
KVTUNE_FAULT_MODULES=1 makes verify fail with what the child process is: the module it runs as
`__main__` and which app-layer packages (db, api, kvtune) it has loaded.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Sequence

import torch
import triton
import triton.language as tl

from tuner.bench.protocol import TIMING_SEED0
from catalog.core import Bucket, Config, ProblemKey
from catalog.space import Param, Space
from tuner.kernels.base import KernelFamily, XCompileCase
from templates.render import Rendered

MODES = ("ok", "wrong", "raise", "abort", "hang", "sticky", "oob", "illegal")
DELAYS = (0, 1, 3, 6)
KEY = ProblemKey("fault", "interp", heads=1, topk=0, window=0, formats=("none",), head_dim=64)


@triton.jit
def _store_far(x_ptr, off):
    tl.store(x_ptr + off + tl.arange(0, 16), tl.full((16,), 1.0, tl.float32))


def _one_delay_per_failure(c: Config) -> str | None:
    # Healthy configs need a delay (so their times differ), every failure mode exists once.
    if c["mode"] == "ok" and c["delay_ms"] == 0:
        return "ok needs a delay"
    if c["mode"] != "ok" and c["delay_ms"] != 0:
        return f"{c['mode']} has no delay"
    return None


class _FaultFamily(KernelFamily):
    name = "fault"
    template = "fault"

    def variants(self) -> Sequence[str]:
        return MODES

    def legality(self, variant: str, target: str) -> str | None:
        return "the illegal variant is illegal everywhere" if variant == "illegal" else None

    def xcompile_cases(self) -> Sequence[XCompileCase]:
        return ()

    def space(self, key: ProblemKey) -> Space:
        return Space(params=(Param("mode", MODES, "ok", render=True), Param("delay_ms", DELAYS, 6)),
                     constraints=(_one_delay_per_failure,))

    def default_config(self, key: ProblemKey) -> Config:
        return self.space(key).default()

    def variant_of(self, config: Config) -> str:
        return str(config["mode"])

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        return [Bucket("N", 1, 8), Bucket("N", 9, 64)]

    def render(self, key: ProblemKey, config: Config) -> Rendered:
        return Rendered("fault", f"# fault family, mode {config['mode']}\n")

    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]:
        if seed >= TIMING_SEED0:  # the bench's timing input sets: as slow as KVTUNE_FAULT_SETS_S says
            time.sleep(float(os.environ.get("KVTUNE_FAULT_SETS_S", "0")))
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(bucket.rep, key.head_dim, generator=g).to(device)}

    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any:
        mode = config["mode"]
        if mode == "raise":
            raise RuntimeError("fault family: this variant does not compile")
        if mode == "abort":
            os.abort()
        if mode == "hang":
            while True:
                time.sleep(1)
        if mode == "sticky":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if mode == "oob":
            _store_far[(1,)](inputs["x"], 1 << 40)
        time.sleep(config["delay_ms"] / 1e3)
        y = inputs["x"] * 2
        return y + 1 if mode == "wrong" else y

    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        if os.environ.get("KVTUNE_FAULT_MODULES"):
            main = getattr(sys.modules["__main__"].__spec__, "name", None)
            app = sorted({m.split(".")[0] for m in sys.modules} & {"db", "api", "kvtune"})
            return f"main={main} app={','.join(app)}"
        bad = int((outputs != inputs["x"] * 2).sum())
        return f"{bad} of {outputs.numel()} values differ from 2x" if bad else None

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        return 2 * 4 * bucket.rep * key.head_dim


FAMILY = _FaultFamily()
NAME = "tests.tuner.fault_family:FAMILY"
