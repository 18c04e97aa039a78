"""The parent's side of the benchmark: verify and time candidates in a long-lived benchmark child
process (`tuner.bench.child`), one per GPU (or one for the interpreter), so that nothing a candidate
does can kill the caller.

Why a child: a candidate can abort the process (inline asm for the wrong vendor, a Triton assertion),
segfault, hang on the GPU, or leave a sticky CUDA error (illegal address, launch failure) after which
every later CUDA call in that process fails. Each of those ends one trial with its `TrialStatus` and
the error text; the child is killed or exits, and the next candidate gets a fresh one.

Protocol (`python -m tuner.bench.child`): the parent writes one JSON request per line on the child's stdin
(`{"op": "bench", "candidate": {...}, "opts": {...}}` or `{"op": "exit"}`); the child answers on its
original stdout, JSON lines only: `{"event": "ready", ...}` once after start-up, then per request
any number of `{"event": "phase", "phase": ...}` (render, inputs, compile, verify, sets, time: so a hang is
reported with where it hung) and one `{"event": "result", ...}`. A result with `"fatal": true` means
the child's CUDA context is unusable and it exits right after writing it. Everything else the child
or a kernel prints goes to its stderr (fd 1 is pointed at fd 2), which the parent keeps in a file
and quotes when the child dies.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from catalog.core import TrialStatus
from tuner.bench.protocol import BenchUnavailable, Candidate, Measurement, TimingOptions, clip_error

if TYPE_CHECKING:
    from tuner.compile import CompilerChild

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_MODULE = "tuner.bench.child"


def _child_env(target: str, device_index: int | None) -> dict[str, str]:
    env = dict(os.environ)
    # The child imports what the parent imports: its sys.path (the repo root under pytest, a test
    # family's package) travels as PYTHONPATH.
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(REPO_ROOT), *paths]))
    if target == "interp":
        env["TRITON_INTERPRET"] = "1"
    elif target != "auto":
        env.pop("TRITON_INTERPRET", None)
    if device_index is not None:
        # The child sees one device, as its device 0. `device_index` counts the devices this
        # process sees, so an outer CUDA_VISIBLE_DEVICES (a worker pinned to some GPUs) is respected.
        # Only CUDA_VISIBLE_DEVICES is set: ROCm honours it too, applied after HIP_VISIBLE_DEVICES,
        # and setting both would filter twice.
        outer = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = outer[device_index] if device_index < len(outer) else str(device_index)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a segfault or abort prints the Python stack to stderr
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and whatever it started (ptxas, a compiler child): its own process group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _exit_text(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


class BenchRunner:
    """The parent's handle on one benchmark child (one GPU, or the interpreter).

    `evaluate` never raises for anything a candidate does: crashes, hangs and sticky errors come back
    as a `Measurement` with a failed status, and the next call starts a fresh child. It raises
    `BenchUnavailable` only when a child cannot be started at all.

    On a GPU target, `precompile` compiles each candidate first in a separate compiler child
    (`tuner.compile.compile_candidate`) and drops it without touching the GPU when its static stats
    say it cannot run well (shared memory over the limit, register spills). Not thread-safe: one
    runner per GPU.
    """

    def __init__(self, target: str = "auto", *, device_index: int | None = None, trial_timeout_s: float = 120.0,
                 start_timeout_s: float = 300.0, precompile: bool = True, prune_spills: bool = True,
                 compile_timeout_s: float = 180.0, sets_timeout_s: float = 900.0,
                 timing: TimingOptions | None = None) -> None:
        self._want_target = target
        self.device_index = device_index
        self.trial_timeout_s = trial_timeout_s
        self.start_timeout_s = start_timeout_s
        self.precompile = precompile
        self.prune_spills = prune_spills
        self.compile_timeout_s = compile_timeout_s
        self.sets_timeout_s = sets_timeout_s
        self.timing = timing or TimingOptions()
        self.starts = 0  # children started (1 + restarts)
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None
        self._buf = b""
        self._info: dict[str, str] = {}
        self._compiled: dict[tuple[str, str, str], Any] = {}
        self._compiler: CompilerChild | None = None  # started at the first precompile, kept for the rest
        self._finalizer: weakref.finalize | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> BenchRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def target(self) -> str:
        if not self._info:
            self._start()
        return self._info["target"]

    def info(self) -> dict[str, str]:
        if not self._info:
            self._start()
        return {k: self._info[k] for k in ("device_name", "torch", "triton", "timing")}

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    def close(self, graceful: bool = True) -> None:
        """Stop the child: ask it to exit (graceful), else or then kill its process group; and the
        compiler child (the next precompile starts another)."""
        proc = self._proc
        self._proc = None
        if proc is not None:
            if graceful and proc.poll() is None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(b'{"op": "exit"}\n')
                    proc.stdin.flush()
                    proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired, AssertionError):
                    pass
            _kill_group(proc)
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    f.close()
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._err is not None:
            self._err.close()
            self._err = None
        if self._compiler is not None:
            self._compiler.close()
            self._compiler = None
        self._buf = b""

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> None:
        self.close()
        last = ""
        for _attempt in range(2):  # a GPU just released by a killed child can refuse once
            self._err = tempfile.TemporaryFile(prefix="kvtune-bench-", suffix=".stderr")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._err, cwd=str(REPO_ROOT), env=_child_env(self._want_target, self.device_index),
                start_new_session=True,  # its own process group, so a kill takes its compilers too
            )
            self._finalizer = weakref.finalize(self, _kill_group, self._proc)
            self.starts += 1
            try:
                msg = self._read(time.monotonic() + self.start_timeout_s)
            except EOFError:
                msg = None
            if msg is not None and msg.get("event") == "ready":
                want = self._want_target
                if want not in ("auto", msg["target"]):
                    got = msg["target"]
                    self.close()
                    raise BenchUnavailable(f"asked to benchmark on {want}, but the device here is {got}")
                self._info = {k: str(msg.get(k, "")) for k in ("target", "device_name", "torch", "triton", "timing")}
                return
            rc = self._proc.poll()
            last = f"benchmark child did not start ({_exit_text(rc)}): {self._stderr_tail(0)}"
            self.close()
        raise BenchUnavailable(last)

    # -- I/O ---------------------------------------------------------------------------------
    def _read(self, deadline: float) -> dict[str, Any] | None:
        """The next protocol message, None at the deadline; EOFError when the child is gone."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return {"event": "garbage", "line": line[:200].decode(errors="replace")}

    def _stderr_pos(self) -> int:
        if self._err is None:
            return 0
        self._err.seek(0, os.SEEK_END)
        return self._err.tell()

    def _stderr_tail(self, since: int, lines: int = 14) -> str:
        """What the child wrote to stderr since `since`: the last lines (a faulthandler stack, a
        Triton error, the driver's complaint)."""
        if self._err is None:
            return ""
        self._err.flush()
        self._err.seek(since)
        text = self._err.read().decode(errors="replace")
        kept = [l for l in text.strip().splitlines() if l.strip()][-lines:]
        return "\n".join(kept)[-1500:]

    # -- one candidate -----------------------------------------------------------------------
    def evaluate(self, candidate: Candidate) -> Measurement:
        t0 = time.monotonic()
        if not self._alive():
            self._start()
        pre = self._precompile(candidate)
        if pre is not None and pre.prune_status():
            return Measurement(status=TrialStatus(pre.prune_status()), error=pre.error, source_hash=pre.source_hash,
                               compile_stats=pre.stats(), timing="static-compile", seconds=time.monotonic() - t0)
        m = self._bench(candidate)
        stats = dict(pre.stats()) if pre is not None else {}
        if stats:
            stats = {f"static_{k}": v for k, v in stats.items()}
        return Measurement(status=m.status, time_us=m.time_us, error=m.error, source_hash=m.source_hash,
                           compile_stats={**stats, **m.compile_stats}, timing=m.timing,
                           seconds=round(time.monotonic() - t0, 3))

    def _precompile(self, c: Candidate) -> Any:
        if not self.precompile or self.target == "interp":
            return None
        from tuner.compile import CompilerChild, compile_candidate

        k = (c.family, json.dumps(c.key.to_json(), sort_keys=True), c.config.to_json())
        if k not in self._compiled:  # a config compiles the same for every bucket
            self._compiler = self._compiler or CompilerChild()  # one compiler process for the runner's candidates
            self._compiled[k] = compile_candidate(c.family, c.key, c.config, self.target, timeout=self.compile_timeout_s,
                                                  prune_spills=self.prune_spills, child=self._compiler)
        return self._compiled[k]

    def _bench(self, c: Candidate) -> Measurement:
        assert self._proc is not None and self._proc.stdin is not None
        since = self._stderr_pos()
        req = json.dumps({"op": "bench", "candidate": c.to_json(), "opts": self.timing.to_json()}) + "\n"
        phase = "send"
        try:
            self._proc.stdin.write(req.encode())
            self._proc.stdin.flush()
            deadline = time.monotonic() + self.trial_timeout_s
            while True:
                msg = self._read(deadline)
                if msg is None:
                    tail = self._stderr_tail(since)
                    self.close(graceful=False)  # kill it: a hung kernel never returns on its own
                    allowed = self.sets_timeout_s if phase == "sets" else self.trial_timeout_s
                    err = f"no result within {allowed:g}s (in phase {phase}); benchmark child killed"
                    return Measurement(TrialStatus.TIMEOUT, error=clip_error(f"{err}\n{tail}" if tail else err))
                ev = msg.get("event")
                if ev == "phase":
                    # Building a bucket's timing input sets is the bench's own work, done once per
                    # bucket and not the candidate's: it gets its own allowance, and the candidate
                    # a fresh trial timeout for the timing that follows it.
                    new_phase = str(msg.get("phase"))
                    if new_phase == "sets":
                        deadline = time.monotonic() + self.sets_timeout_s
                    elif phase == "sets":
                        deadline = time.monotonic() + self.trial_timeout_s
                    phase = new_phase
                elif ev == "result":
                    m = Measurement.from_json(msg)
                    if msg.get("fatal"):
                        # The child exits by itself (its CUDA context is unusable); make sure of it.
                        assert self._proc is not None
                        try:
                            self._proc.wait(timeout=30)
                        except subprocess.TimeoutExpired:
                            pass
                        self.close(graceful=False)
                    return m
        except (EOFError, BrokenPipeError):
            proc = self._proc
            rc = None
            if proc is not None:
                try:
                    rc = proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    rc = None
            tail = self._stderr_tail(since)
            self.close(graceful=False)
            err = f"benchmark child died in phase {phase} ({_exit_text(rc)})"
            return Measurement(TrialStatus.CRASHED, error=clip_error(f"{err}\n{tail}" if tail else err))
