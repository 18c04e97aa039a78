"""Compile a rendered variant for a target in a child process, with a timeout, and read its static
stats (registers, spills, shared memory / LDS, occupancy where the backend reports it).

Compiles run in a child because some failures are not exceptions: PTX inline asm handed to the AMDGPU
backend aborts the whole process (`unknown asm constraint 'f'`). A child that aborts, hangs or dies
is a result (`illegal`, with the compiler's last words), never a crash of the caller.

Child protocol: `python -m tuner.compile` reads one JSON request on stdin and writes one JSON
result on stdout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from tuner.kernels.base import XCompileCase

COMPILE_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class CompileResult:
    kernel: str
    variant: str
    target: str
    status: str  # "compiled" | "illegal"
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    occupancy: int | None = None
    error: str | None = None
    detail: str = ""
    source_hash: str = ""
    expected: str = ""  # "legal" or "illegal", from the family's legality table

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def matches_table(self) -> bool:
        return (self.status == "compiled") == (self.expected == "legal")


def _request(case: XCompileCase, target: str) -> dict[str, Any]:
    return {
        "source": case.rendered.source,
        "template": case.rendered.template,
        "kernel_name": case.kernel_name,
        "signature": case.signature,
        "constexprs": case.constexprs,
        "num_warps": case.num_warps,
        "num_stages": case.num_stages,
        "target": target,
    }


def _last_words(text: str, limit: int = 600) -> str:
    """The useful tail of a compiler's stderr: the lines that say what went wrong."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    keep = [l for l in lines if re.search(r"error|abort|unknown|unsupported|not supported|invalid|fatal|couldn't", l, re.I)]
    out = "\n".join((keep or lines)[-6:])
    return out[-limit:]


def compile_in_child(kernel: str, case: XCompileCase, target: str, expected: str = "", timeout: float = COMPILE_TIMEOUT_S) -> CompileResult:
    base = dict(kernel=kernel, variant=case.variant, target=target, detail=case.detail,
                source_hash=case.rendered.source_hash, expected=expected)
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # cross-compiling needs the real compiler
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tuner.compile"],
            input=json.dumps(_request(case, target)),
            capture_output=True, text=True, timeout=timeout, env=env,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
    except subprocess.TimeoutExpired:
        return CompileResult(status="illegal", error=f"compile timed out after {timeout:.0f}s", **base)
    if proc.returncode != 0:
        how = f"killed by signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return CompileResult(status="illegal", error=f"{_last_words(proc.stderr)} ({how})", **base)
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return CompileResult(status="illegal", error=f"child wrote no result: {_last_words(proc.stderr)}", **base)
    return CompileResult(
        status=out["status"], registers=out.get("registers"), spills=out.get("spills"),
        shared_bytes=out.get("shared_bytes"), occupancy=out.get("occupancy"), error=out.get("error"), **base,
    )


def xcompile(kernel: str, targets: Sequence[str], jobs: int | None = None) -> list[CompileResult]:
    """Every variant of `kernel` on every target in `targets`, compiled in parallel children."""
    from tuner.kernels import get_family

    fam = get_family(kernel)
    work = [(case, t) for case in fam.xcompile_cases() for t in targets]

    def one(item: tuple[XCompileCase, str]) -> CompileResult:
        case, t = item
        expected = "illegal" if fam.legality(case.variant, t) else "legal"
        return compile_in_child(kernel, case, t, expected)

    with ThreadPoolExecutor(max_workers=jobs or max(1, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, work))


# ---------------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------------


def _nvidia_stats(ptx: str, capability: int) -> dict[str, Any]:
    """Registers and spills from `ptxas -v` (the cubin's own numbers need a driver to read)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    ptxas = get_ptxas(capability).path
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([ptxas, "-v", f"--gpu-name={sm_arch_from_capability(capability)}", str(src), "-o", str(Path(d) / "k.o")],
                           capture_output=True, text=True)
    text = r.stdout + r.stderr
    regs = re.search(r"Used (\d+) registers", text)
    st = re.search(r"(\d+) bytes spill stores", text)
    ld = re.search(r"(\d+) bytes spill loads", text)
    return {
        "registers": int(regs.group(1)) if regs else None,
        "spills": (int(st.group(1)) + int(ld.group(1))) if st and ld else None,
    }


def _amd_stats(amdgcn: str) -> dict[str, Any]:
    def num(pattern: str) -> int | None:
        m = re.search(pattern, amdgcn)
        return int(m.group(1)) if m else None

    vgpr_spill = num(r"\.vgpr_spill_count:\s*(\d+)") or 0
    sgpr_spill = num(r"\.sgpr_spill_count:\s*(\d+)") or 0
    return {
        "registers": num(r"; NumVgprs: (\d+)"),
        "spills": vgpr_spill + sgpr_spill,
        "occupancy": num(r"; Occupancy: (\d+)"),
    }


def _child(req: dict[str, Any]) -> dict[str, Any]:
    import triton
    from triton.compiler import ASTSource

    from tuner import render as R
    from tuner.targets import get_target

    target = get_target(req["target"])
    mod = R.load(R.Rendered(req["template"], req["source"]))
    fn = getattr(mod, req["kernel_name"])
    src = ASTSource(fn=fn, signature=req["signature"], constexprs=req["constexprs"])
    try:
        k = triton.compile(src, target=target.gpu_target(),
                           options={"num_warps": req["num_warps"], "num_stages": req["num_stages"]})
    except Exception as e:  # a compile error is a result: the table records it
        return {"status": "illegal", "error": _last_words(f"{type(e).__name__}: {e}")}
    out: dict[str, Any] = {"status": "compiled", "shared_bytes": int(getattr(k.metadata, "shared", 0) or 0)}
    if target.backend == "cuda":
        out.update(_nvidia_stats(k.asm["ptx"], int(target.arch)))
    else:
        out.update(_amd_stats(k.asm["amdgcn"]))
    return out


def main() -> None:
    req = json.loads(sys.stdin.read())
    result = _child(req)
    sys.stdout.write("\n" + json.dumps(result) + "\n")


def format_table(results: Iterable[CompileResult]) -> str:
    rows = [("variant", "detail", "target", "status", "regs", "spills", "shared", "occ", "error")]
    for r in results:
        rows.append((r.variant, r.detail, r.target, r.status, _s(r.registers), _s(r.spills), _s(r.shared_bytes),
                     _s(r.occupancy), (r.error or "").splitlines()[-1][:70] if r.error else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _s(v: int | None) -> str:
    return "-" if v is None else str(v)


if __name__ == "__main__":
    main()
