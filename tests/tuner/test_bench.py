"""The benchmark child on the CPU: every way a candidate can fail ends as a status with its error
text, the parent survives, and the next candidate gets a working (restarted) child."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import json
from pathlib import Path

import pytest

from tests.tuner.fault_family import KEY, NAME
from tuner.bench.protocol import BenchUnavailable, Candidate, Measurement
from tuner.bench.runner import BenchRunner
from tuner.bench.simulation import (SimulatedRunner, load_table, new_table, save_table, synthetic_table,
                                   table_put)
from tuner.compile import SHARED_LIMIT, CompilerChild, compile_candidate, compile_in_child
from catalog.core import Bucket, Config, TrialStatus
from tuner.kernels import get_family
from catalog.families.pack import pack_key

BUCKET = Bucket("N", 1, 8)
HANG_TIMEOUT_S = 2.5


def cand(mode: str, delay: int = 0, seed: int = 0) -> Candidate:
    return Candidate(NAME, KEY, BUCKET, Config.of(mode=mode, delay_ms=delay), seed)


@pytest.fixture(scope="module")
def runner():
    with BenchRunner("interp", trial_timeout_s=HANG_TIMEOUT_S) as r:
        # The child up before any test reads its pid or start count: a runner starts it at its first
        # evaluate, and under xdist any of this module's tests can be a worker's first.
        assert r.evaluate(cand("ok", 1)).status is TrialStatus.OK and r.starts == 1
        yield r


def test_dotted_family_path() -> None:
    fam = get_family(NAME)
    assert fam.name == "fault"
    assert get_family("tests.tuner.fault_family") is fam  # module path alone: its FAMILY
    assert get_family("pack").name == "pack"
    with pytest.raises(ValueError, match="no kernel family"):
        get_family("tests.tuner.fault_family:NOPE")
    with pytest.raises(ValueError, match="unknown kernel"):
        get_family("nope")


def test_ok_is_timed_on_the_interpreter(runner: BenchRunner) -> None:
    assert runner.target == "interp"
    m = runner.evaluate(cand("ok", 3))
    assert m.status is TrialStatus.OK, m.error
    assert m.timing == "cpu-interpreter"
    assert m.time_us is not None and 2900 < m.time_us < 30_000  # a 3 ms sleep, measured on the CPU clock
    assert m.source_hash and m.compile_stats["runs"] >= 3


def test_building_timing_sets_is_not_the_candidates_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bucket's timing input sets (hundreds of launches' worth on a GPU) may take longer to build
    # than a trial may run: the candidate is still timed, with a fresh trial timeout after them.
    # Only a build past its own allowance fails, and says it hung building the sets.
    monkeypatch.setenv("KVTUNE_FAULT_SETS_S", "5")
    with BenchRunner("interp", trial_timeout_s=HANG_TIMEOUT_S, sets_timeout_s=60) as r:
        m = r.evaluate(cand("ok", 1))
        assert m.status is TrialStatus.OK, m.error
        assert m.seconds > 5
    with BenchRunner("interp", trial_timeout_s=HANG_TIMEOUT_S, sets_timeout_s=1) as r:
        m = r.evaluate(cand("ok", 1))
        assert m.status is TrialStatus.TIMEOUT
        assert "no result within 1s (in phase sets)" in (m.error or "")


def test_the_child_runs_as_its_module_and_loads_no_app_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    # The child is `python -m tuner.bench.child`, and after rendering, building inputs, running and
    # verifying a candidate it has imported neither db nor api (nor the kvtune app layer).
    monkeypatch.setenv("KVTUNE_FAULT_MODULES", "1")
    with BenchRunner("interp", trial_timeout_s=60) as r:
        m = r.evaluate(cand("ok", 1))
    assert m.status is TrialStatus.WRONG_RESULT  # the hook reports through verify's error text
    assert m.error == "main=tuner.bench.child app="


def test_wrong_values_are_wrong_result(runner: BenchRunner) -> None:
    m = runner.evaluate(cand("wrong"))
    assert m.status is TrialStatus.WRONG_RESULT
    assert m.time_us is None  # a wrong candidate is never timed
    assert "values differ from 2x" in (m.error or "")


def test_raise_at_first_launch_is_compile_error(runner: BenchRunner) -> None:
    pid = runner.pid
    m = runner.evaluate(cand("raise"))
    assert m.status is TrialStatus.COMPILE_ERROR
    assert "this variant does not compile" in (m.error or "")
    assert runner.pid == pid  # an exception costs no restart


def test_abort_is_crashed_and_child_restarts(runner: BenchRunner) -> None:
    starts = runner.starts
    m = runner.evaluate(cand("abort"))
    assert m.status is TrialStatus.CRASHED
    assert "SIGABRT" in (m.error or "") and "fault_family.py" in (m.error or "")  # faulthandler's stack
    ok = runner.evaluate(cand("ok", 1))
    assert ok.status is TrialStatus.OK and runner.starts == starts + 1


def test_hang_is_timeout_and_child_restarts(runner: BenchRunner) -> None:
    starts = runner.starts
    m = runner.evaluate(cand("hang"))
    assert m.status is TrialStatus.TIMEOUT
    assert f"no result within {HANG_TIMEOUT_S:g}s" in (m.error or "") and "phase compile" in (m.error or "")
    assert runner.evaluate(cand("ok", 1)).status is TrialStatus.OK
    assert runner.starts == starts + 1


def test_sticky_device_error_ends_the_child(runner: BenchRunner) -> None:
    pid = runner.pid
    m = runner.evaluate(cand("sticky"))
    assert m.status is TrialStatus.CRASHED
    assert "illegal memory access" in (m.error or "")
    assert runner.pid is None  # it exited by itself after reporting
    assert runner.evaluate(cand("ok", 1)).status is TrialStatus.OK
    assert runner.pid not in (None, pid)


def test_out_of_bounds_store_segfaults_the_interpreter(runner: BenchRunner) -> None:
    m = runner.evaluate(cand("oob"))
    assert m.status is TrialStatus.CRASHED and "SIGSEGV" in (m.error or "")
    assert runner.evaluate(cand("ok", 1)).status is TrialStatus.OK


def test_illegal_variant(runner: BenchRunner) -> None:
    m = runner.evaluate(cand("illegal"))
    assert m.status is TrialStatus.ILLEGAL_ON_ARCH and "illegal everywhere" in (m.error or "")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_a_gpu_target_without_a_gpu_is_unavailable() -> None:
    r = BenchRunner("sm_90", start_timeout_s=60)
    with pytest.raises(BenchUnavailable, match="sm_90"):
        r.target
    r.close()


def test_compile_candidate_interp_and_illegal() -> None:
    key = pack_key("mxfp4_68", "sm_90")
    cfg = get_family("pack").default_config(key)
    assert compile_candidate("pack", key, cfg, "interp").status == "nothing_to_compile"
    ill = compile_candidate("pack", key, cfg.replace(backend="ptx"), "sm_90")  # no child is even started
    assert ill.status == "illegal_on_arch" and ill.prune_status() == "illegal_on_arch"


def test_compile_candidate_static_stats_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real cross-compile for sm_90 on the CPU: stats come back, and a candidate over the target's
    shared-memory limit is pruned before any GPU sees it."""
    key = pack_key("mxfp4_68", "sm_90")
    cfg = get_family("pack").default_config(key)
    monkeypatch.setitem(SHARED_LIMIT, "sm_90", 1)
    r = compile_candidate("pack", key, cfg, "sm_90", timeout=120)
    assert r.registers and r.registers > 0 and r.spills == 0 and r.shared_bytes and r.shared_bytes > 1
    assert r.status == "out_of_resources" and r.prune_status() == "out_of_resources"
    assert "shared memory" in (r.error or "")


def test_one_compiler_child_serves_case_after_case_through_an_abort_and_a_timeout(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """xcompile's children serve many cases each: a case whose compile ends the child (LLVM's fatal
    error on PTX inline asm for AMD), or outlasts its timeout, is an illegal row with the reason, and the same
    CompilerChild compiles the next case in a new process; a compile's own prints never reach the
    result stream."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # cold: the timeout below cannot be met from a cache
    cases = {c.variant: c for c in get_family("pack").xcompile_cases() if c.detail == "nvfp4_288"}
    child = CompilerChild()
    try:
        soft = compile_in_child("pack", cases["soft"], "gfx942", child=child)
        pid = child._proc.pid if child._proc else None
        swar = compile_in_child("pack", cases["swar"], "gfx942", child=child)
        assert child._proc is not None and child._proc.pid == pid  # kept across the cases that compile
        aborted = compile_in_child("pack", cases["ptx"], "gfx942", child=child)
        assert child._proc is None  # the fatal error took the process with it
        again = compile_in_child("pack", cases["swar"], "gfx942", child=child)
        assert child._proc is not None and child._proc.pid != pid
        slow = compile_in_child("pack", cases["swar"], "sm_90", timeout=0.05, child=child)
        after = compile_in_child("pack", cases["soft"], "sm_90", child=child)
    finally:
        child.close()
    assert soft.status == swar.status == again.status == after.status == "compiled", (soft, swar, again, after)
    assert again == swar and soft.registers and swar.registers and after.registers and after.spills is not None
    assert aborted.status == "illegal" and "unknown asm constraint 'f'" in (aborted.error or ""), aborted
    assert (aborted.error or "").endswith("(exit 1)"), aborted.error  # LLVM's fatal error exits the child
    assert slow.status == "illegal" and slow.error == "compile timed out after 0s", slow
    # A child a case gives the same answer.
    assert compile_in_child("pack", cases["soft"], "gfx942") == soft


_PTXAS_LOG_CHECK = """
import json
from tuner.compile import _nvidia_stats, _request, candidate_case, compile_with_stats
from tuner.kernels import get_family
from catalog.families.pack import pack_key

key = pack_key("mxfp4_68", "sm_90")
fam = get_family("pack")
case, _ = candidate_case(fam, key, fam.default_config(key))
cold_k, cold = compile_with_stats(_request(case, "sm_90"))
again = _nvidia_stats(cold_k.asm["ptx"], 90)
warm_k, warm = compile_with_stats(_request(case, "sm_90"))
print(json.dumps({"cold": cold, "again": again, "warm": warm, "same_ptx": warm_k.asm["ptx"] == cold_k.asm["ptx"]}))
"""


def test_nvidia_stats_from_tritons_ptxas_log_equal_a_second_ptxas_run(tmp_path: Path) -> None:
    """The stats of an NVIDIA compile come from the log of Triton's own `ptxas -v` run: the same
    registers and spills as running ptxas again on its PTX; a kernel from Triton's cache (no
    ptxas ran) still gets them. In a child without TRITON_INTERPRET, on a cold cache first."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", _PTXAS_LOG_CHECK], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    got = json.loads(out.strip().splitlines()[-1])
    cold, again, warm = got["cold"], got["again"], got["warm"]
    assert cold["registers"] > 0 and cold["spills"] is not None and cold["shared_bytes"] is not None, got
    assert {k: cold[k] for k in again} == again, got
    assert warm == cold and got["same_ptx"], got


def test_simulated_runner_replays_and_refuses_unknowns(tmp_path: Path) -> None:
    key = pack_key("mxfp4_68", "sm_90")
    b = Bucket("N", 1, 64)
    t = new_table(key, "pack", "sm_90", {"device_name": "test"}, synthetic=True)
    good, bad = Config.of(a=1), Config.of(a=2)
    table_put(t, b, good, Measurement(TrialStatus.OK, time_us=5.0))
    table_put(t, b, bad, Measurement(TrialStatus.WRONG_RESULT, time_us=1.0, error="off by one"))
    save_table(t, tmp_path / "t.json")
    sim = SimulatedRunner(load_table(tmp_path / "t.json"))
    assert sim.target == "sm_90" and "synthetic" in sim.info()["device_name"]
    assert sim.evaluate(Candidate("pack", key, b, good)).time_us == 5.0
    w = sim.evaluate(Candidate("pack", key, b, bad))
    assert w.status is TrialStatus.WRONG_RESULT and w.time_us is None  # the table keeps no time for it
    with pytest.raises(LookupError):
        sim.evaluate(Candidate("pack", key, b, Config.of(a=3)))
    assert SimulatedRunner(t, missing=TrialStatus.CRASHED).evaluate(
        Candidate("pack", key, b, Config.of(a=3))).status is TrialStatus.CRASHED
    with pytest.raises(ValueError, match="recorded for"):
        sim.evaluate(Candidate("pack", pack_key("nvfp4_288", "sm_90"), b, good))


def test_synthetic_table_covers_only_runnable_configs() -> None:
    key = pack_key("nvfp4_288", "sm_90")
    fam = get_family("pack")
    t = synthetic_table("pack", key, [Bucket("N", 1, 64)])
    assert t["meta"]["synthetic"] is True
    entries = t["buckets"]["N1-64"]["entries"]
    configs = [Config.from_dict(json.loads(k)) for k in entries]
    assert configs and all(fam.space(key).infeasible(c) is None for c in configs)
    assert {c["backend"] for c in configs} == {"soft", "swar", "bf16x2"}  # ptx and gfx950 are illegal on sm_90


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU")
def test_gpu_graph_timing_precompile_and_sticky_error() -> None:
    """On a GPU: pack is verified and timed by CUDA graph replay over rotating input sets, with static
    stats from the precompile; a real illegal address is a sticky error that ends the child."""
    with BenchRunner("auto", trial_timeout_s=300) as r:
        key = pack_key("nvfp4_288", r.target)
        fam = get_family("pack")
        m = r.evaluate(Candidate("pack", key, Bucket("N", 1, 64), fam.default_config(key), 0))
        assert m.status is TrialStatus.OK, m.error
        assert m.timing in ("cuda-graph", "hip-graph") and m.time_us and 0 < m.time_us < 1e4
        assert m.compile_stats["input_sets"] >= 2 and m.compile_stats["launches_per_replay"] >= 2
        assert "static_registers" in m.compile_stats  # the precompile ran and did not prune it
        gpu_key = dataclasses.replace(KEY, arch=r.target)
        oob = r.evaluate(Candidate(NAME, gpu_key, BUCKET, Config.of(mode="oob", delay_ms=0)))
        assert oob.status is TrialStatus.CRASHED and r.pid is None, oob.error
        ok = r.evaluate(Candidate(NAME, gpu_key, BUCKET, Config.of(mode="ok", delay_ms=1)))
        assert ok.status is TrialStatus.OK, ok.error
