"""The benchmark child: the process `runner.BenchRunner` starts (`python -m tuner.bench.child`). It
builds each candidate's inputs, runs it once, verifies its outputs against the family's reference,
then times it by CUDA/HIP-graph replay over rotating input sets (or by wall clock under the Triton
interpreter). The protocol it speaks is described in `tuner.bench.runner`.

It loads torch, triton and the kernel families, never `db` or `api`.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
import time
from typing import IO, Any, Mapping

from catalog.core import TrialStatus
from tuner.bench.protocol import TIMING_SEED0, Candidate, TimingOptions, clip_error

# Messages after which a CUDA context is unusable: every later call in the process fails too.
_STICKY = re.compile(
    r"illegal memory access|unspecified launch failure|device-side assert|misaligned address|illegal instruction|"
    r"an illegal|launch timed out|hardware exception|uncorrectable ECC|context is destroyed|"
    r"CUDA error|HIP error|hipError|cudaError",
    re.I,
)
_OOR = re.compile(r"out of resource|OutOfResources|out of memory|OutOfMemory", re.I)


def _nbytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


class _Child:
    def __init__(self, proto: IO[str]) -> None:
        import torch

        if not torch.cuda.is_available():
            # No device: the interpreter is the only way Triton runs here. Set before triton is
            # imported, so every kernel module loaded later is built for it.
            os.environ["TRITON_INTERPRET"] = "1"
        import triton

        from tuner.targets import detect

        self.proto = proto
        self.torch = torch
        self.target = detect()
        self.gpu = self.target.is_gpu
        self.device = "cuda" if self.gpu else "cpu"
        self.hip = bool(getattr(torch.version, "hip", None))
        if self.gpu:
            torch.cuda.init()
            self.device_name = torch.cuda.get_device_name(0)
            self.l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 << 20)
            self.label = "hip-graph" if self.hip else "cuda-graph"
        else:
            self.device_name = "cpu (Triton interpreter)"
            self.l2 = 0
            self.label = "cpu-interpreter"
        self.versions = {"torch": torch.__version__, "triton": triton.__version__}
        self._sets_key: str | None = None
        self._sets: list[dict[str, Any]] = []

    def send(self, msg: Mapping[str, Any]) -> None:
        self.proto.write(json.dumps(msg) + "\n")
        self.proto.flush()

    def ready(self) -> None:
        self.send({"event": "ready", "target": self.target.name, "device_name": self.device_name,
                   "timing": self.label, "pid": os.getpid(), **self.versions})

    def phase(self, name: str) -> None:
        self.send({"event": "phase", "phase": name})

    # -- failure classification ---------------------------------------------------------------
    def _sticky(self, e: BaseException) -> bool:
        """True when the process must not run another candidate: a sticky CUDA error."""
        text = f"{type(e).__name__}: {e}"
        if _OOR.search(text) and "illegal" not in text.lower():
            return False
        if _STICKY.search(text):
            return True
        if self.gpu:
            try:  # an asynchronous error surfaces at the next synchronisation
                self.torch.cuda.synchronize()
            except Exception:
                return True
        return False

    def classify(self, e: BaseException, first_launch: bool) -> tuple[TrialStatus, bool]:
        """(status, fatal) for an exception from launching a candidate. The first launch is where
        Triton's JIT compiles, so what it raises is a compile error unless it says otherwise."""
        from triton.runtime.errors import OutOfResources

        if isinstance(e, OutOfResources) or (_OOR.search(f"{type(e).__name__}: {e}") and "illegal" not in str(e).lower()):
            return TrialStatus.OUT_OF_RESOURCES, False
        if self._sticky(e):
            return TrialStatus.CRASHED, True
        return (TrialStatus.COMPILE_ERROR if first_launch else TrialStatus.CRASHED), False

    # -- one request ---------------------------------------------------------------------------
    def bench(self, req: Mapping[str, Any]) -> dict[str, Any]:
        import traceback

        from tuner.kernels import get_family
        from catalog.families.base import measured_hash

        t0 = time.monotonic()
        c = Candidate.from_json(req["candidate"])
        opts = TimingOptions(**req.get("opts", {}))
        out: dict[str, Any] = {"event": "result", "source_hash": "", "compile_stats": {}, "timing": ""}

        def fail(status: TrialStatus, error: str, fatal: bool = False) -> dict[str, Any]:
            return {**out, "status": status.value, "time_us": None, "error": clip_error(error), "fatal": fatal,
                    "seconds": round(time.monotonic() - t0, 3)}

        def exc_text(e: BaseException) -> str:
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            # the message first (what went wrong), then the innermost frames (where)
            return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:])

        fam = get_family(c.family)
        why = fam.config_legality(c.config, self.target.name)
        if why:
            return fail(TrialStatus.ILLEGAL_ON_ARCH, why)
        self.phase("render")
        try:
            rs = fam.modules(c.key, c.config)  # the config's own module first
            rendered = rs[0]
            out["source_hash"] = measured_hash(rs)
        except Exception as e:
            return fail(TrialStatus.COMPILE_ERROR, exc_text(e))
        self.phase("inputs")
        try:  # fresh inputs for verification every time: a stale output buffer must never pass
            inputs = fam.make_inputs(c.key, c.bucket, self.device, c.seed)
        except Exception as e:
            st, fatal = self.classify(e, first_launch=False)
            return fail(st if st is not TrialStatus.COMPILE_ERROR else TrialStatus.CRASHED,
                        "make_inputs failed: " + exc_text(e), fatal)
        self.phase("compile")
        try:
            outputs = fam.run(c.key, c.config, inputs)
            if self.gpu:
                self.torch.cuda.synchronize()
        except Exception as e:
            st, fatal = self.classify(e, first_launch=True)
            return fail(st, exc_text(e), fatal)
        self.phase("verify")
        try:
            wrong = fam.verify(c.key, inputs, outputs)
        except Exception as e:
            if self.gpu and self._sticky(e):
                return fail(TrialStatus.CRASHED, exc_text(e), True)
            wrong = f"verify raised {exc_text(e)}"
        if wrong:
            return fail(TrialStatus.WRONG_RESULT, str(wrong))
        if self.gpu:
            out["compile_stats"] = self._jit_stats(rendered)
        self.phase("time")
        try:
            if self.gpu:
                us, label, extra = self._time_gpu(fam, c, inputs, opts)
            else:
                us, label, extra = self._time_interp(fam, c, inputs, opts)
        except Exception as e:
            st, fatal = self.classify(e, first_launch=False)
            return fail(st, "while timing: " + exc_text(e), fatal)
        out["compile_stats"].update(extra)
        return {**out, "status": TrialStatus.OK.value, "time_us": us, "error": None, "fatal": False,
                "timing": label, "seconds": round(time.monotonic() - t0, 3)}

    # -- inputs for timing ------------------------------------------------------------------------
    def _timing_sets(self, fam: Any, c: Candidate, n: int) -> list[dict[str, Any]]:
        """`n` extra input sets for one (family, key, bucket), kept while the search stays on it.
        Their seeds are fixed, so every candidate of a bucket is timed on the same data."""
        k = json.dumps([c.family, c.key.to_json(), c.bucket.to_json()], sort_keys=True)
        if k != self._sets_key:
            self._sets, self._sets_key = [], None
            if self.gpu:
                self.torch.cuda.empty_cache()
        if len(self._sets) < n:
            self.phase("sets")
            while len(self._sets) < n:
                self._sets.append(fam.make_inputs(c.key, c.bucket, self.device, TIMING_SEED0 + len(self._sets)))
            self.phase("time")
        self._sets_key = k
        return self._sets[:n]

    def _n_gpu_sets(self, fam: Any, c: Candidate, inputs: dict[str, Any], opts: TimingOptions) -> tuple[int, dict[str, Any]]:
        try:
            touched = int(fam.bytes_moved(c.key, c.bucket))
        except Exception:
            touched = 0
        footprint = max(1, _nbytes(inputs))
        touched = touched or footprint
        want = math.ceil(opts.l2_factor * self.l2 / max(1, touched))
        free, _total = self.torch.cuda.mem_get_info()
        mem_cap = max(1, int(min(opts.max_sets_bytes, 0.25 * free) // footprint))
        n = max(2, min(want, opts.max_sets, mem_cap))
        return n, {"input_sets": n, "set_bytes_touched": touched, "set_bytes": footprint, "l2_bytes": self.l2,
                   "l2_resident": n * touched < 2 * self.l2}

    def _time_gpu(self, fam: Any, c: Candidate, inputs: dict[str, Any], opts: TimingOptions) -> tuple[float, str, dict[str, Any]]:
        """Median per-launch time of CUDA/HIP graph replays that cycle through several input sets,
        as an engine replays its decode graph over data that is not in L2."""
        torch = self.torch
        n, extra = self._n_gpu_sets(fam, c, inputs, opts)
        sets = [inputs] + self._timing_sets(fam, c, n - 1)

        def launch_all() -> None:
            for s in sets:
                fam.run(c.key, c.config, s)

        launch_all()  # every set once: any specialisation a set triggers compiles here, not in capture
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch_all()
        e1.record()
        torch.cuda.synchronize()
        pass_ms = max(e0.elapsed_time(e1), 1e-3)
        # Repeat the rotation inside one graph until a replay lasts graph_ms, so the replay's own
        # launch cost is amortised over many kernels.
        k = max(1, min(math.ceil(opts.graph_ms / pass_ms), max(1, 4000 // len(sets))))
        label = self.label
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(k):
                    launch_all()
            torch.cuda.synchronize()
            replay = g.replay
        except Exception as e:
            if self._sticky(e):
                raise
            # Not capturable (a host sync inside run): plain launches, and the label says so.
            label = label.replace("graph", "events")
            extra["graph_error"] = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.synchronize()

            def replay() -> None:
                for _ in range(k):
                    launch_all()

        replay()
        torch.cuda.synchronize()
        reps = max(opts.min_reps, min(opts.max_reps, int(opts.rep_ms / max(pass_ms * k, 1e-3))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            starts[i].record()
            replay()
            ends[i].record()
        torch.cuda.synchronize()
        per_launch_ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / (k * len(sets))
        extra.update({"replays": reps, "launches_per_replay": k * len(sets)})
        return per_launch_ms * 1e3, label, extra

    def _time_interp(self, fam: Any, c: Candidate, inputs: dict[str, Any], opts: TimingOptions) -> tuple[float, str, dict[str, Any]]:
        """Honest CPU wall-clock of the interpreter: it says nothing about a GPU, and is labelled so."""
        sets = [inputs] + self._timing_sets(fam, c, max(0, opts.interp_sets - 1))
        times: list[float] = []
        start = time.perf_counter()
        # Whole passes over the sets until the budget is spent, and at least 3 runs for a median.
        while len(times) < 3 or time.perf_counter() - start < opts.interp_budget_s:
            for s in sets:
                t = time.perf_counter()
                fam.run(c.key, c.config, s)
                times.append(time.perf_counter() - t)
            if len(times) >= 40 * len(sets):
                break
        return statistics.median(times) * 1e6, self.label, {"input_sets": len(sets), "runs": len(times)}

    def _jit_stats(self, rendered: Any) -> dict[str, Any]:
        """Registers, spills and shared memory of the binaries the first launch JIT-compiled
        (best effort: these are Triton internals, and only informative)."""
        try:
            from triton.runtime.jit import JITFunction

            from templates.render import load

            regs, spills, shared = [], [], []
            for obj in vars(load(rendered)).values():
                if not isinstance(obj, JITFunction):
                    continue
                for caches in getattr(obj, "device_caches", {}).values():
                    for k in caches[0].values():
                        regs.append(getattr(k, "n_regs", None))
                        spills.append(getattr(k, "n_spills", None))
                        shared.append(getattr(k.metadata, "shared", None))
            out: dict[str, Any] = {}
            if any(r is not None for r in regs):
                out["registers"] = max(r for r in regs if r is not None)
            if any(s is not None for s in spills):
                out["spills"] = sum(s for s in spills if s is not None)
            if any(s is not None for s in shared):
                out["shared_bytes"] = max(s for s in shared if s is not None)
            return out
        except Exception:
            return {}


def _watch_parent(parent: int) -> None:
    """Exit when the parent is gone (killed without the chance to stop us: SIGTERM, SIGKILL), even
    in the middle of a hung candidate: the child runs in its own session, so nothing else would."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(4)

    threading.Thread(target=watch, name="kvtune-parent-watch", daemon=True).start()


def main() -> None:
    # The protocol owns the original stdout; anything else printed (by us, a kernel, a C library)
    # goes to stderr, so it can never corrupt a message.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import faulthandler

    faulthandler.enable()
    _watch_parent(os.getppid())
    child = _Child(proto)
    child.ready()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        try:
            result = child.bench(req)
        except BaseException as e:  # a bug of ours, or a family's: still one failed trial
            result = {"event": "result", "status": TrialStatus.CRASHED.value, "time_us": None,
                      "error": clip_error(f"benchmark child error: {type(e).__name__}: {e}"), "fatal": True}
        child.send(result)
        if result.get("fatal"):
            proto.flush()
            os._exit(3)  # a sticky CUDA error: this process can run nothing more


if __name__ == "__main__":
    main()
