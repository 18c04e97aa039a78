"""Compile a rendered variant for a target in a child process, with a timeout, and read its static
stats (registers, spills, shared memory / LDS, occupancy where the backend reports it).

Compiles run in a child because some failures are not exceptions: PTX inline asm handed to the AMDGPU
backend aborts the whole process (`unknown asm constraint 'f'`). A child that aborts, hangs or dies
is a result (`illegal`, with the compiler's last words), never a crash of the caller.

Child protocol: `python -m tuner.compile` reads JSON requests on stdin, one a line, and answers
each with one JSON result line on its own copy of stdout (the process's fd 1 goes to stderr, so
nothing a compiler prints can be read as a result). A child serves many requests: its ~0.5 s of
start-up (imports, Triton hashing its own libraries for the cache key) is paid once a child, not
once a case, and one that dies is replaced for the next request.
"""

from __future__ import annotations

import json
import os
import queue
import re
import select
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
        "num_ctas": case.num_ctas,
        "aligned_ints": list(case.aligned_ints),
        "target": target,
    }


def _last_words(text: str, limit: int = 600) -> str:
    """The useful tail of a compiler's stderr: the lines that say what went wrong."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    keep = [l for l in lines if re.search(r"error|abort|unknown|unsupported|not supported|invalid|fatal|couldn't", l, re.I)]
    out = "\n".join((keep or lines)[-6:])
    return out[-limit:]


class CompilerChild:
    """One `python -m tuner.compile` process, kept for many requests (see the module docstring).

    A request that kills the child (an abort in a compiler backend), outlasts its timeout (the
    child is killed) or gets no result line is an `illegal` result with the compiler's last words,
    and the next request starts a new child. Its stderr goes to a temporary file, read back a
    request at a time, so a chatty compiler never fills a pipe and blocks. One thread at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._err = tempfile.TemporaryFile(mode="w+")

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)  # cross-compiling needs the real compiler
        self._proc = subprocess.Popen([sys.executable, "-m", "tuner.compile"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._err, text=True, env=env,
                                      cwd=str(Path(__file__).resolve().parent.parent))
        return self._proc

    def request(self, req: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str]:
        """(the child's result, the stderr it wrote meanwhile), or (None, the error of a request that
        got no result: why, with the compiler's last words)."""
        if self._proc is not None and self._proc.poll() is not None:
            self.close()  # it died between requests
        proc = self._proc or self._start()
        assert proc.stdin is not None and proc.stdout is not None
        self._err.seek(0, os.SEEK_END)
        mark = self._err.tell()
        line, why = "", ""
        try:
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
            if ready:
                line = proc.stdout.readline()
            else:
                why = f"compile timed out after {timeout:.0f}s"
        except BrokenPipeError:
            pass
        if not line and not why:
            try:
                rc = proc.wait(timeout=30)
                why = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
            except subprocess.TimeoutExpired:
                why = "child closed its results but did not exit"
        try:
            out = json.loads(line) if line else None
        except ValueError:
            why = "child wrote no result"
            out = None
        self._err.seek(mark)
        err = self._err.read()
        if out is not None:
            return out, err
        self.close()  # dead, hung or out of step: the next request gets a new child
        if why.startswith("compile timed out"):
            return None, why
        if why == "child wrote no result":
            return None, f"{why}: {_last_words(err)}"
        return None, f"{_last_words(err)} ({why})"

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None:
                    f.close()
            self._proc = None


def compile_in_child(kernel: str, case: XCompileCase, target: str, expected: str = "", timeout: float = COMPILE_TIMEOUT_S,
                     child: CompilerChild | None = None) -> CompileResult:
    """`case` compiled for `target` in `child` (kept for the caller's next case), or in a child of
    its own when none is given."""
    base = dict(kernel=kernel, variant=case.variant, target=target, detail=case.detail,
                source_hash=case.rendered.source_hash, expected=expected)
    c = child or CompilerChild()
    try:
        out, text = c.request(_request(case, target), timeout)  # text: its stderr, or the error of no result
    finally:
        if child is None:
            c.close()
    if out is None:
        return CompileResult(status="illegal", error=text, **base)
    error = out.get("error")
    if error and re.search(r"error", text, re.I):
        # Some exceptions only point at the log (LLD: "failed to link ... because"): the assembler's
        # own words went to the child's stderr.
        error = f"{error}\n{_last_words(text)}"
    return CompileResult(
        status=out["status"], registers=out.get("registers"), spills=out.get("spills"),
        shared_bytes=out.get("shared_bytes"), occupancy=out.get("occupancy"), error=error, **base,
    )


def xcompile(kernel: str, targets: Sequence[str], jobs: int | None = None) -> list[CompileResult]:
    """Every variant of `kernel` on every target in `targets`, compiled by `jobs` children at once,
    each child serving case after case."""
    from tuner.kernels import get_family

    fam = get_family(kernel)
    work = [(case, t) for case in fam.xcompile_cases() for t in targets]
    n = jobs or max(1, os.cpu_count() or 1)
    children: queue.Queue[CompilerChild] = queue.Queue()
    for _ in range(n):
        children.put(CompilerChild())

    def one(item: tuple[XCompileCase, str]) -> CompileResult:
        case, t = item
        illegal = fam.legality(case.variant, t) or (case.only_targets and t not in case.only_targets)
        expected = "illegal" if illegal else "legal"
        child = children.get()
        try:
            return compile_in_child(kernel, case, t, expected, child=child)
        finally:
            children.put(child)

    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(one, work))
    finally:
        while not children.empty():
            children.get().close()


# ---------------------------------------------------------------------------------------------
# One search candidate (family, key, config) for one target: static stats to prune before the GPU
# ---------------------------------------------------------------------------------------------

# The most shared memory (LDS) one program may use, in bytes, per target. A candidate over it fails
# at launch (Triton's OutOfResources), so the search drops it without spending GPU time on it.
SHARED_LIMIT: dict[str, int] = {
    "sm_90": 232448,  # 227 KiB opt-in per block (H100/H200)
    "sm_100": 232448,  # 227 KiB (B200)
    "gfx942": 65536,  # 64 KiB LDS (MI300)
    "gfx950": 163840,  # 160 KiB LDS (MI355)
}


@dataclass(frozen=True)
class CandidateCompile:
    """What a static compile says about one candidate before it reaches the GPU.

    status: "compiled" (stats read, may go on), "nothing_to_compile" (interp: the interpreter runs
    Python, there is no binary), "no_case" (the family gives no way to compile this config
    statically; the GPU's JIT compiles it in the bench child instead), or a failure that prunes the
    candidate: "illegal_on_arch", "compile_error", "out_of_resources", "timeout".
    """

    status: str
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    occupancy: int | None = None
    error: str | None = None
    source_hash: str = ""
    seconds: float = 0.0
    # False when the compile case was derived from the family's xcompile cases rather than given
    # by the family: its compile errors are then not trusted to prune (the derived signature may be
    # the thing that is wrong), only its resource numbers are.
    exact: bool = True

    def stats(self) -> dict[str, Any]:
        return {k: v for k, v in (("registers", self.registers), ("spills", self.spills),
                                  ("shared_bytes", self.shared_bytes), ("occupancy", self.occupancy)) if v is not None}

    def prune_status(self) -> str | None:
        """The `TrialStatus` value that ends the candidate here, or None when it may go on."""
        if self.status in ("illegal_on_arch", "out_of_resources"):
            return self.status
        if self.status == "compile_error" and self.exact:
            return "compile_error"
        if self.status == "timeout" and self.exact:
            return "timeout"
        return None


def candidate_case(family: Any, key: Any, config: Any) -> tuple[XCompileCase | None, bool]:
    """The compile case of one config: the family's own `compile_case(key, config)` where it builds
    one (exact), else one derived from its `xcompile_cases()` (not exact): the
    case of the same variant rendered for the key's formats, with every tunable parameter of the
    config mapped onto a constexpr of the same name. A config with a parameter that is not a
    constexpr (e.g. a host-side choice like decode's NUM_SPLITS) cannot be derived: (None, False)."""
    exact = family.compile_case(key, config)
    if exact is not None:
        return exact, True
    variant = family.variant_of(config)
    details = set(key.formats) | {"+".join(key.formats)}
    cases = [c for c in family.xcompile_cases() if c.variant == variant and c.detail in details]
    if not cases:
        return None, False
    case = cases[0]
    render_params = {p.name for p in family.space(key).params if p.render}
    tunable = {k: v for k, v in config.as_dict().items() if k not in render_params and k not in ("num_warps", "num_stages")}
    if not set(tunable) <= set(case.constexprs):
        return None, False
    from dataclasses import replace

    return replace(
        case,
        rendered=family.render(key, config),
        constexprs={**case.constexprs, **tunable},
        num_warps=int(config.get("num_warps", case.num_warps)),
        num_stages=int(config.get("num_stages", case.num_stages)),
    ), False


def compile_candidate(family: str, key: Any, config: Any, target: str, *, timeout: float = COMPILE_TIMEOUT_S,
                      prune_spills: bool = True, child: CompilerChild | None = None) -> CandidateCompile:
    """Compile one candidate for `target` in a child process (`child`, kept by the caller for its
    next candidate, or one of its own) and judge its static stats.

    Over the target's shared-memory limit -> "out_of_resources"; register spills -> also
    "out_of_resources" when `prune_spills` (a spilling variant is slower than a smaller tile of the
    same kernel, which the search will try anyway). On `interp` there is nothing to compile.
    """
    import time

    from tuner.kernels import get_family

    if target == "interp":
        return CandidateCompile(status="nothing_to_compile")
    fam = get_family(family)
    illegal = fam.config_legality(config, target)
    if illegal:
        # Never hand a wrong-vendor variant to a compiler: it can abort the process.
        return CandidateCompile(status="illegal_on_arch", error=illegal)
    try:
        case, exact = candidate_case(fam, key, config)
    except Exception as e:  # a render or template error is this candidate's compile error
        return CandidateCompile(status="compile_error", error=f"{type(e).__name__}: {e}"[-2000:])
    if case is None:
        return CandidateCompile(status="no_case")
    t0 = time.monotonic()
    r = compile_in_child(family, case, target, timeout=timeout, child=child)
    dt = time.monotonic() - t0
    base = dict(registers=r.registers, spills=r.spills, shared_bytes=r.shared_bytes, occupancy=r.occupancy,
                source_hash=case.rendered.source_hash, seconds=round(dt, 3), exact=exact)
    if r.status != "compiled":
        timed_out = (r.error or "").startswith("compile timed out")
        return CandidateCompile(status="timeout" if timed_out else "compile_error", error=r.error, **base)
    limit = SHARED_LIMIT.get(target)
    if limit is not None and (r.shared_bytes or 0) > limit:
        return CandidateCompile(status="out_of_resources",
                                error=f"{r.shared_bytes} bytes of shared memory, {target} allows {limit}", **base)
    if prune_spills and (r.spills or 0) > 0:
        return CandidateCompile(status="out_of_resources",
                                error=f"{r.spills} bytes of register spills ({r.registers} registers)", **base)
    return CandidateCompile(status="compiled", **base)


# ---------------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------------


def _ptxas_log_stats(text: str) -> dict[str, Any]:
    """Registers and spills from the log of `ptxas -v` (the cubin's own numbers need a driver to read)."""
    regs = re.search(r"Used (\d+) registers", text)
    st = re.search(r"(\d+) bytes spill stores", text)
    ld = re.search(r"(\d+) bytes spill loads", text)
    return {
        "registers": int(regs.group(1)) if regs else None,
        "spills": (int(st.group(1)) + int(ld.group(1))) if st and ld else None,
    }


def _nvidia_stats(ptx: str, capability: int) -> dict[str, Any]:
    """Registers and spills of `ptx` by running `ptxas -v` on it."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    ptxas = get_ptxas(capability).path
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([ptxas, "-v", f"--gpu-name={sm_arch_from_capability(capability)}", str(src), "-o", str(Path(d) / "k.o")],
                           capture_output=True, text=True)
    return _ptxas_log_stats(r.stdout + r.stderr)


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


def ast_source(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], attrs: dict) -> Any:
    """What `triton.compile` takes for a kernel function: Triton's ASTSource, or Gluon's for a
    Gluon kernel (it builds the module with its layouts already assigned)."""
    if getattr(fn, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource as source_cls
    else:
        from triton.compiler import ASTSource as source_cls
    return source_cls(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


def compile_request(req: dict[str, Any]) -> Any:
    """Compile one request (`_request(case, target)`) in this process and return Triton's compiled
    kernel (its `asm` holds ptx/cubin or amdgcn). The process must not be under TRITON_INTERPRET."""
    import triton

    from templates import render as R
    from tuner.targets import get_target, gpu_target

    target = get_target(req["target"])
    mod = R.load(R.Rendered(req["template"], req["source"]))
    fn = getattr(mod, req["kernel_name"])
    # Pointers as real launches see them: torch allocations are 16-byte aligned, and without the
    # hint the compiler falls back to scalar loads and the stats describe a kernel no one runs.
    # Integers the seed launch passes as multiples of 16 likewise (Triton specialises them).
    names = list(fn.arg_names)
    aligned = set(req.get("aligned_ints", ()))
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a, ty in req["signature"].items()
             if ty.startswith("*") or a in aligned}
    src = ast_source(fn, req["signature"], req["constexprs"], attrs)
    return triton.compile(src, target=gpu_target(target),
                          options={"num_warps": req["num_warps"], "num_stages": req["num_stages"],
                                   **({"num_ctas": req["num_ctas"]} if req.get("num_ctas", 1) != 1 else {})})


def compile_with_stats(req: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """`compile_request` and the binary's static stats: shared memory, registers and spills
    (and, on AMD, occupancy). On NVIDIA targets they come from the log of Triton's own `ptxas -v`
    run (TRITON_DUMP_PTXAS_LOG prints it), not from a second ptxas run of the same PTX (a quarter
    of a large kernel's compile); a kernel from Triton's cache ran no ptxas, so it gets one."""
    import contextlib
    import io

    import triton

    from tuner.targets import get_target

    target = get_target(req["target"])
    if target.backend != "cuda":
        k = compile_request(req)
        return k, {"shared_bytes": int(getattr(k.metadata, "shared", 0) or 0), **_amd_stats(k.asm["amdgcn"])}
    log = io.StringIO()
    with triton.knobs.nvidia.scope(), contextlib.redirect_stdout(log):
        triton.knobs.nvidia.dump_ptxas_log = True
        k = compile_request(req)
    stats = _ptxas_log_stats(log.getvalue())
    if stats["registers"] is None:  # from the cache: no ptxas ran
        stats = _nvidia_stats(k.asm["ptx"], int(target.arch))
    return k, {"shared_bytes": int(getattr(k.metadata, "shared", 0) or 0), **stats}


def _child(req: dict[str, Any]) -> dict[str, Any]:
    try:
        _, stats = compile_with_stats(req)
    except Exception as e:  # a compile error is a result: the table records it
        return {"status": "illegal", "error": _last_words(f"{type(e).__name__}: {e}")}
    return {"status": "compiled", **stats}


def main() -> None:
    # Results go out on a copy of fd 1; fd 1 itself then points at stderr, so whatever a compiler
    # or Triton prints lands in the parent's log of this child, never in the result stream.
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        if line.strip():
            results.write(json.dumps(_child(json.loads(line))) + "\n")
            results.flush()


def format_table(results: Iterable[CompileResult]) -> str:
    rows = [("variant", "detail", "target", "status", "regs", "spills", "shared", "occ", "error")]
    for r in results:
        rows.append((r.variant, r.detail, r.target, r.status, _s(r.registers), _s(r.spills), _s(r.shared_bytes),
                     _s(r.occupancy), _headline(r.error)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _headline(error: str | None) -> str:
    """The line of a compiler error that says what went wrong (the first `error:` line, if any)."""
    if not error:
        return ""
    lines = error.splitlines()
    return next((l.strip() for l in lines if "error:" in l or "error   :" in l), lines[-1])[:90]


def _s(v: int | None) -> str:
    return "-" if v is None else str(v)


if __name__ == "__main__":
    main()
