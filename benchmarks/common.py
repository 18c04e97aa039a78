"""Shared benchmark plumbing: environment provenance, copy bandwidth, timing, result files."""

from __future__ import annotations

import datetime as _dt
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
import triton

from catalog.core import Config


def provenance() -> dict[str, Any]:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (Triton interpreter)"
    arch = ""
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        arch = getattr(p, "gcnArchName", "") or f"sm_{p.major}{p.minor}"
    return {
        "gpu": gpu,
        "arch": arch,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def copy_bandwidth(gib: float = 4.0) -> float:
    """Measured device copy bandwidth in bytes/s (read + write counted), median of do_bench."""
    n = int(gib * (1 << 30))
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=500, return_mode="median")
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / (ms * 1e-3)


def time_us(fn: Callable[[], Any], graph: bool = True, rep: int = 200) -> float:
    """Median time of one call in microseconds: CUDA graph replay (as engines run) or plain launches."""
    if graph:
        ms = triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")
    else:
        ms = triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")
    return ms * 1e3


def sustained_clock(fn: Callable[[], Any], seconds: float = 3.0, period_ms: int = 100) -> dict[str, Any]:
    """The SM clock and board power while `fn` runs back to back for `seconds` (a CUDA graph of it
    replayed), sampled by `nvidia-smi` every `period_ms`: medians, and the throttle reasons seen.
    A kernel at the board's power cap runs at less than its maximum clock, so its time alone
    mixes the kernel's work with the clock it was given; time x clock (cycles) does not."""
    import shutil
    import statistics
    import subprocess
    import time

    if shutil.which("nvidia-smi") is None:  # (AMD: rocm-smi's fields differ; no sample rather than a wrong one)
        return {"samples": 0}
    g = torch.cuda.CUDAGraph()
    fn()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        fn()
    query = "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active"
    smi = subprocess.Popen(["nvidia-smi", query, "--format=csv,noheader,nounits", f"-lms={period_ms}",
                            f"--id={torch.cuda.current_device()}"], stdout=subprocess.PIPE, text=True)
    try:
        t_end = time.time() + seconds
        while time.time() < t_end:
            for _ in range(20):
                g.replay()
            torch.cuda.synchronize()
    finally:
        smi.terminate()
        out, _ = smi.communicate(timeout=10)
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.count(",") == 2]
    mhz = [float(r[0]) for r in rows if r[0].replace(".", "").isdigit()]
    watts = [float(r[1]) for r in rows if r[1].replace(".", "").isdigit()]
    if not mhz:
        return {"samples": 0}
    return {"samples": len(mhz), "sm_mhz": statistics.median(mhz), "sm_mhz_min": min(mhz), "sm_mhz_max": max(mhz),
            "power_w": statistics.median(watts) if watts else None, "throttle": sorted({r[2] for r in rows})}


def write_results(out_dir: str | Path, name: str, payload: dict[str, Any], markdown: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    (out / f"{name}.md").write_text(markdown)


@dataclass(frozen=True)
class SassOp:
    """One SASS instruction: its address, opcode ("LDG"), whole mnemonic ("LDG.E.128") and, for a
    branch, its target address."""

    addr: int
    opcode: str
    mnemonic: str
    target: int | None = None


# The integer (ALU) pipe's opcodes on sm_80 / sm_90 (Nsight Compute's pipe names: bit logic,
# shifts, integer adds and compares, selects, min/max, permutes, fp32 compares and min/max; IMAD and
# IMUL run on the FMA pipe). It takes a warp instruction every other cycle an SM sub-partition, half
# the issue rate, so a kernel whose SASS is half or more ALU is bound by it before it is bound by
# issue: the swar rounding's limit on the H200 (2026-12-06, benchmarks/results/pack_bf16x2/README.md).
ALU_OPS = frozenset({"LOP3", "SHF", "IADD3", "LEA", "SEL", "ISETP", "PRMT", "VIMNMX", "VIMNMX3", "IMNMX", "FMNMX",
                     "FSEL", "FSETP", "SGXT", "PLOP3", "I2FP", "IABS", "FLO", "POPC", "BMSK", "VIADD", "MOV", "CS2R",
                     "P2R", "R2P", "F2FP", "FCHK", "VHMNMX"})


def alu_share(ops: Mapping[str, int]) -> int:
    """How many of a kernel's SASS instructions issue to the integer (ALU) pipe."""
    return sum(k for op, k in ops.items() if op in ALU_OPS)


def sass_text(cubin: bytes) -> str:
    """A cubin disassembled on the CPU with the cuobjdump that ships with Triton (no GPU or driver
    needed): cuobjdump's text, operands included."""
    import subprocess
    import tempfile

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(cuobjdump), "-sass", str(path)], capture_output=True, text=True, check=True).stdout


def sass_ops(cubin: bytes) -> list[SassOp]:
    """The SASS instructions of a cubin in order, NOPs left out (sass_text's)."""
    import re

    sass = sass_text(cubin)
    ops = []
    for line in sass.splitlines():
        # "/*0a40*/  @!P0 LDG.E.128 R4, ..." -> LDG (addresses grow past 4 hex digits in big kernels)
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*)", line)
        if m and m.group(3) != "NOP":
            mnemonic = m.group(3)
            t = re.match(r"(0x[0-9a-f]+)", m.group(4).strip()) if mnemonic.startswith("BRA") else None
            ops.append(SassOp(int(m.group(1), 16), mnemonic.split(".")[0], mnemonic, int(t.group(1), 16) if t else None))
    return ops


def kernel_body(ops: list[SassOp]) -> list[SassOp]:
    """The instructions up to the kernel's last EXIT: what follows it are out-of-line slow paths
    (ptxas's subroutines for a 64-bit integer division whose operands do not fit 32 bits, an fp32
    division's special operands), entered by CALL only on those inputs."""
    last = max((i for i, o in enumerate(ops) if o.opcode == "EXIT"), default=len(ops) - 1)
    return ops[:last + 1]


def sass_opcodes(cubin: bytes) -> list[str]:
    """The SASS opcodes of a cubin in order, NOPs left out (see sass_ops)."""
    return [o.opcode for o in sass_ops(cubin)]


def main_loop(ops: list[SassOp]) -> list[SassOp]:
    """The instructions of the kernel's outermost loop: from the target to the source of the
    backward branch that spans the most code (a tile loop's body, run once per tile). Empty when
    the kernel has no loop."""
    back = [(o.target, o.addr) for o in ops if o.target is not None and o.target < o.addr]
    if not back:
        return []
    lo, hi = max(back, key=lambda b: b[1] - b[0])
    return [o for o in ops if lo <= o.addr <= hi]


def parse_cfg(text: str, base: Config) -> Config:
    """`NAME=v,NAME=v` over `base`; each value is read as the type of the base's value."""
    cfg = base
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        old = base.as_dict()[name]
        cfg = cfg.replace(**{name: type(old)(value)})
    return cfg
