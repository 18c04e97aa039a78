"""Verify and time candidates in a long-lived benchmark child process, one per GPU (or one for the
interpreter), so that nothing a candidate does can kill the caller.

Why a child: a candidate can abort the process (inline asm for the wrong vendor, a Triton assertion),
segfault, hang on the GPU, or leave a sticky CUDA error (illegal address, launch failure) after which
every later CUDA call in that process fails. Each of those ends one trial with its `TrialStatus` and
the error text; the child is killed or exits, and the next candidate gets a fresh one.

Protocol (`python -m tuner.bench`): the parent writes one JSON request per line on the child's stdin
(`{"op": "bench", "candidate": {...}, "opts": {...}}` or `{"op": "exit"}`); the child answers on its
original stdout, JSON lines only: `{"event": "ready", ...}` once after start-up, then per request
any number of `{"event": "phase", "phase": ...}` (render, inputs, compile, verify, sets, time: so a hang is
reported with where it hung) and one `{"event": "result", ...}`. A result with `"fatal": true` means
the child's CUDA context is unusable and it exits right after writing it. Everything else the child
or a kernel prints goes to its stderr (fd 1 is pointed at fd 2), which the parent keeps in a file
and quotes when the child dies.

`SimulatedRunner` has the same interface and replays a recorded timing table (Kernel Tuner's
simulation mode), so search tests run deterministically on a CPU.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Mapping, Protocol

from catalog.core import Bucket, Config, ProblemKey, TrialStatus

if TYPE_CHECKING:
    from catalog.space import Space

REPO_ROOT = Path(__file__).resolve().parent.parent
ERROR_LIMIT = 2000  # characters of error text kept per trial


@dataclass(frozen=True)
class Candidate:
    """One thing to measure: a config of a family for one key at one bucket's size."""

    family: str  # a registered name or a dotted path ("tests.tuner.fault_family:FAMILY")
    key: ProblemKey
    bucket: Bucket
    config: Config
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "key": self.key.to_json(), "bucket": self.bucket.to_json(),
                "config": self.config.as_dict(), "seed": self.seed}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Candidate:
        return cls(family=str(d["family"]), key=ProblemKey.from_json(d["key"]), bucket=Bucket.from_json(d["bucket"]),
                   config=Config.from_dict(d["config"]), seed=int(d.get("seed", 0)))


@dataclass(frozen=True)
class Measurement:
    """How one candidate ended. `time_us` (per launch, median) only when `status` is ok."""

    status: TrialStatus
    time_us: float | None = None
    error: str | None = None
    source_hash: str = ""
    compile_stats: dict[str, Any] = field(default_factory=dict)
    timing: str = ""
    seconds: float = 0.0  # wall time spent on the candidate, all phases

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "time_us": self.time_us, "error": self.error,
                "source_hash": self.source_hash, "compile_stats": self.compile_stats, "timing": self.timing,
                "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Measurement:
        return cls(status=TrialStatus(d["status"]), time_us=d.get("time_us"), error=d.get("error"),
                   source_hash=d.get("source_hash", ""), compile_stats=dict(d.get("compile_stats") or {}),
                   timing=d.get("timing", ""), seconds=float(d.get("seconds", 0.0)))


class Runner(Protocol):
    """What the search needs from something that measures candidates."""

    @property
    def target(self) -> str: ...

    def info(self) -> dict[str, str]:
        """device_name, torch, triton, timing: the provenance stored with results."""
        ...

    def evaluate(self, candidate: Candidate) -> Measurement: ...

    def close(self) -> None: ...


TIMING_SEED0 = 1_000_003  # seeds of the timing input sets: TIMING_SEED0 + i (verification uses the trial's)


@dataclass(frozen=True)
class TimingOptions:
    """How a GPU candidate is timed (sent to the child with every request)."""

    l2_factor: float = 3.0  # rotate input sets touching at least this many times the L2 size
    max_sets: int = 256
    max_sets_bytes: int = 4 << 30  # never hold more than this in timing inputs (nor 25% of free memory)
    graph_ms: float = 2.0  # one graph replay lasts at least this long (replay launch cost amortised)
    rep_ms: float = 100.0  # total timed replays per candidate, roughly
    min_reps: int = 10
    max_reps: int = 200
    interp_budget_s: float = 0.5  # the interpreter: time each candidate for about this long
    interp_sets: int = 2

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class BenchUnavailable(RuntimeError):
    """The benchmark child cannot be started at all (not a candidate's fault)."""


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


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
        """Stop the child: ask it to exit (graceful), else or then kill its process group."""
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
        self._buf = b""

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> None:
        self.close()
        last = ""
        for _attempt in range(2):  # a GPU just released by a killed child can refuse once
            self._err = tempfile.TemporaryFile(prefix="kvtune-bench-", suffix=".stderr")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tuner.bench"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
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
        from tuner.compile import compile_candidate

        k = (c.family, json.dumps(c.key.to_json(), sort_keys=True), c.config.to_json())
        if k not in self._compiled:  # a config compiles the same for every bucket
            self._compiled[k] = compile_candidate(c.family, c.key, c.config, self.target,
                                                  timeout=self.compile_timeout_s, prune_spills=self.prune_spills)
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
                    return Measurement(TrialStatus.TIMEOUT, error=_clip(f"{err}\n{tail}" if tail else err))
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
            return Measurement(TrialStatus.CRASHED, error=_clip(f"{err}\n{tail}" if tail else err))


def _clip(text: str) -> str:
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT // 2] + "\n...\n" + text[-ERROR_LIMIT // 2:]


# ---------------------------------------------------------------------------------------------
# Recorded timing tables and the simulated runner
# ---------------------------------------------------------------------------------------------

TABLE_FORMAT = "kvtune-timing-table/1"


def new_table(key: ProblemKey, family: str, target: str, info: Mapping[str, str], *, synthetic: bool = False,
              space: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An empty table: metadata (where and with what it was measured) and no entries yet.

    Entries live under `buckets[<Bucket.name()>]["entries"][<Config.to_json()>]` as
    `{"status": "ok", "time_us": 12.3}` or `{"status": "<failure>", "error": "..."}`."""
    return {
        "format": TABLE_FORMAT,
        "meta": {
            "family": family, "key": key.to_json(), "target": target,
            "device_name": info.get("device_name", ""), "torch": info.get("torch", ""),
            "triton": info.get("triton", ""), "timing": info.get("timing", ""),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "synthetic": synthetic, "space": space or [], "complete": False,
        },
        "buckets": {},
    }


def table_put(table: dict[str, Any], bucket: Bucket, config: Config, m: Measurement) -> None:
    b = table["buckets"].setdefault(bucket.name(), {"bucket": bucket.to_json(), "entries": {}})
    e: dict[str, Any] = {"status": m.status.value}
    if m.status is TrialStatus.OK:
        e["time_us"] = m.time_us
    else:
        e["error"] = (m.error or "")[:300]
    if m.compile_stats:
        e["stats"] = m.compile_stats
    b["entries"][config.to_json()] = e


def save_table(table: Mapping[str, Any], path: str | Path) -> None:
    from templates.render import write_atomic

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, json.dumps(table, indent=1, sort_keys=False) + "\n")


def load_table(path: str | Path) -> dict[str, Any]:
    t = json.loads(Path(path).read_text())
    if t.get("format") != TABLE_FORMAT:
        raise ValueError(f"{path}: not a {TABLE_FORMAT} table")
    return t


def synthetic_table(family: str, key: ProblemKey, buckets: list[Bucket], *, seed: int = 0,
                    fail_rate: float = 0.05) -> dict[str, Any]:
    """A SYNTHETIC timing table (labelled so in its metadata) over every feasible config of the
    family's space that is legal on `key.arch`: for tests and for trying the efficiency benchmark
    before real tables exist. Times follow a made-up multiplicative model (a factor per parameter
    value, one pairwise interaction, a bucket-dependent part and 3% per-config noise), so searches
    have structure to find; about `fail_rate` of configs fail (compile errors, a few wrong results)."""
    import random

    from tuner.kernels import get_family

    fam = get_family(family)
    space = fam.space(key)
    rng = random.Random(seed)
    factor = {(p.name, repr(v)): rng.lognormvariate(0, 0.35) for p in space.params for v in p.choices}
    pairs = [(a.name, b.name) for a, b in zip(space.params, space.params[1:])]
    table = new_table(key, family, key.arch, {"device_name": "synthetic", "timing": "synthetic"}, synthetic=True,
                      space=space.to_json())
    configs = [c for c in space.grid() if fam.config_legality(c, key.arch) is None]
    for b in buckets:
        brng = random.Random(f"{seed}/{b.name()}")
        bfac = {k: v * brng.lognormvariate(0, 0.15) for k, v in factor.items()}
        for c in configs:
            d = c.as_dict()
            t = 10.0 * math.log2(2 + b.rep)
            for k, v in d.items():
                t *= bfac[(k, repr(v))]
            for a, bn in pairs:  # neighbouring parameters interact (a tile size and its warps)
                t *= random.Random(f"{seed}/{a}={d[a]!r}/{bn}={d[bn]!r}").lognormvariate(0, 0.25)
            crng = random.Random(f"{seed}/{b.name()}/{c.to_json()}")
            t *= crng.lognormvariate(0, 0.03)
            r = crng.random()
            if c != fam.default_config(key) and r < fail_rate:
                st = TrialStatus.WRONG_RESULT if r < fail_rate / 4 else TrialStatus.COMPILE_ERROR
                table_put(table, b, c, Measurement(st, error="synthetic failure"))
            else:
                table_put(table, b, c, Measurement(TrialStatus.OK, time_us=round(t, 4)))
    table["meta"]["complete"] = True
    return table


def table_space(table: Mapping[str, Any]) -> "Space":
    """The search space a table was recorded over: the parameters and choices of its metadata,
    feasible exactly where the table has an entry (the recorder measured every feasible, legal
    config of that grid). Searching it in simulation prunes what the real space would prune,
    without the family's current code, which may have grown parameters since."""
    from catalog.space import Param, Space

    params = tuple(Param(p["name"], tuple(p["choices"]), p["default"], bool(p.get("render")))
                   for p in table["meta"]["space"])
    if not params:
        raise ValueError("the table's metadata records no space")
    recorded = {k for b in table["buckets"].values() for k in b["entries"]}

    def _recorded(c: Config) -> str | None:
        return None if c.to_json() in recorded else "not in the recorded grid"

    return Space(params=params, constraints=(_recorded,))


class SimulatedRunner:
    """Replays a recorded timing table instead of running anything: same interface as
    `BenchRunner`, deterministic, instant, no GPU. A config missing from the table raises
    `LookupError` (a table that does not match the space is a bug to see), unless `missing` names
    the status to report for it (for tables recorded under a time limit)."""

    def __init__(self, table: Mapping[str, Any] | str | Path, *, missing: TrialStatus | None = None) -> None:
        self.table = load_table(table) if isinstance(table, (str, Path)) else dict(table)
        self.meta = self.table["meta"]
        self.missing = missing
        self.calls = 0

    @property
    def target(self) -> str:
        return str(self.meta["target"])

    @property
    def key(self) -> ProblemKey:
        return ProblemKey.from_json(self.meta["key"])

    def buckets(self) -> list[Bucket]:
        return [Bucket.from_json(b["bucket"]) for b in self.table["buckets"].values()]

    def info(self) -> dict[str, str]:
        dev = self.meta.get("device_name", "")
        return {"device_name": f"{dev} (simulated{', synthetic' if self.meta.get('synthetic') else ''})",
                "torch": str(self.meta.get("torch", "")), "triton": str(self.meta.get("triton", "")),
                "timing": f"simulated:{self.meta.get('timing', '')}"}

    def evaluate(self, candidate: Candidate) -> Measurement:
        self.calls += 1
        if candidate.key != self.key:
            raise ValueError(f"table was recorded for {self.key.slug()}, asked about {candidate.key.slug()}")
        b = self.table["buckets"].get(candidate.bucket.name())
        e = None if b is None else b["entries"].get(candidate.config.to_json())
        timing = f"simulated:{self.meta.get('timing', '')}"
        if e is None:
            if self.missing is None:
                raise LookupError(f"{candidate.bucket.name()} {candidate.config.to_json()} is not in the table")
            return Measurement(self.missing, error="not in the recorded table", timing=timing)
        st = TrialStatus(e["status"])
        return Measurement(st, time_us=float(e["time_us"]) if st is TrialStatus.OK else None, error=e.get("error"),
                           compile_stats=dict(e.get("stats") or {}), timing=timing)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------------

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
            return {**out, "status": status.value, "time_us": None, "error": _clip(error), "fatal": fatal,
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


def child_main() -> None:
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
                      "error": _clip(f"benchmark child error: {type(e).__name__}: {e}"), "fatal": True}
        child.send(result)
        if result.get("fatal"):
            proto.flush()
            os._exit(3)  # a sticky CUDA error: this process can run nothing more


if __name__ == "__main__":
    child_main()
