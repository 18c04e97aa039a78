"""The search: a study survives every kind of failed candidate and the best verified config wins;
default is trial 0; TPE, random and grid on a SYNTHETIC recorded table (simulation mode);
pruning; budgets; shared RDB storage."""

from __future__ import annotations

import json
import time
from pathlib import Path

import optuna
import pytest

from tests.tuner.fault_family import KEY, NAME
from tuner.bench.protocol import Candidate, Measurement
from tuner.bench.runner import BenchRunner
from tuner.bench.simulation import SimulatedRunner, synthetic_table
from catalog.core import Bucket, Config, ProblemKey, TrialStatus
from tuner.kernels import get_family
from catalog.families.pack import PACK_BUCKETS, pack_key
from catalog.results import BucketResult, TrialRecord, TuneResult, format_tune_table
from tuner.search import study_name, tune

optuna.logging.set_verbosity(optuna.logging.WARNING)

# pack on sm_100: all three e2m1 backends in the space, two of them legal there.
SIM_KEY = pack_key("nvfp4_288", "sm_100")
SIM_BUCKETS = [PACK_BUCKETS[0], PACK_BUCKETS[2]]


@pytest.fixture(scope="module")
def table() -> dict:
    return synthetic_table("pack", SIM_KEY, SIM_BUCKETS, seed=3)  # SYNTHETIC: made-up times


def _best_in_table(table: dict, bucket: Bucket) -> tuple[float, str]:
    ok = {k: e["time_us"] for k, e in table["buckets"][bucket.name()]["entries"].items() if e["status"] == "ok"}
    k = min(ok, key=ok.get)
    return ok[k], k


def test_failures_are_trials_and_the_best_verified_config_wins() -> None:
    """On the real benchmark child (interpreter): raise, abort, hang, sticky error and wrong values
    each end one trial with its status; the study finishes; the fastest *verified* config wins even
    though the wrong-result config is faster still."""
    seen: list[TrialRecord] = []
    with BenchRunner("interp", trial_timeout_s=2.5) as runner:
        res = tune(KEY, buckets=[Bucket("N", 1, 8)], trials=20, search="grid", runner=runner, family=NAME,
                   on_trial=seen.append)
    (b,) = res.buckets
    status = {r.config["mode"]: r.status for r in b.trials if r.config["mode"] != "ok"}
    assert status == {"wrong": TrialStatus.WRONG_RESULT, "raise": TrialStatus.COMPILE_ERROR,
                      "abort": TrialStatus.CRASHED, "hang": TrialStatus.TIMEOUT, "sticky": TrialStatus.CRASHED,
                      "oob": TrialStatus.CRASHED}
    assert "illegal" not in {r.config["mode"] for r in b.trials}  # pruned: it never reached the child
    assert len(b.trials) == 9  # every runnable config once, then the study ends by itself
    assert [r.number for r in seen] == [r.number for r in b.trials]  # on_trial saw failures too
    assert b.default.number == 0 and b.default.config == Config.of(mode="ok", delay_ms=6)
    assert b.best is not None and b.best.config == Config.of(mode="ok", delay_ms=1)
    assert b.best.ok and b.speedup is not None and b.speedup > 3
    assert b.failed_by_status() == {"wrong_result": 1, "compile_error": 1, "crashed": 3, "timeout": 1}
    assert res.timing == "cpu-interpreter" and res.target == "interp"
    # The result survives JSON, and the table names every failure.
    again = TuneResult.from_json(json.loads(json.dumps(res.to_json())))
    assert again == res
    assert "timeout 1" in format_tune_table(res)


class _LyingRunner:
    """A runner whose wrong-result candidates come back with the fastest times of all."""

    target = "sm_100"

    def __init__(self, table: dict) -> None:
        self.sim = SimulatedRunner(table)

    def info(self) -> dict[str, str]:
        return self.sim.info()

    def evaluate(self, c: Candidate) -> Measurement:
        m = self.sim.evaluate(c)
        if c.config["BLOCK_T"] == 16:  # "fastest", and wrong
            return Measurement(TrialStatus.WRONG_RESULT, time_us=0.001, error="mismatch")
        return m

    def close(self) -> None:
        pass


def test_a_wrong_result_never_wins_whatever_its_time(table: dict) -> None:
    res = tune(SIM_KEY, buckets=SIM_BUCKETS[:1], trials=60, search="tpe", runner=_LyingRunner(table))
    (b,) = res.buckets
    assert any(r.status is TrialStatus.WRONG_RESULT for r in b.trials)
    assert b.best is not None and b.best.ok and b.best.config["BLOCK_T"] != 16
    assert all(r.time_us is None for r in b.trials if not r.ok)  # failed trials carry no time
    with pytest.raises(ValueError, match="cannot be a bucket's best"):
        BucketResult(bucket=b.bucket, default=b.default, best=next(r for r in b.trials if not r.ok), trials=b.trials)


@pytest.mark.parametrize("search", ["tpe", "random", "grid"])
def test_searches_on_a_recorded_table(table: dict, search: str) -> None:
    sim = SimulatedRunner(table)  # raises on any config not in the table: infeasible ones never get here
    fam = get_family("pack")
    res = tune(SIM_KEY, buckets=SIM_BUCKETS, trials=25, search=search, seed=7, runner=sim)
    assert len(res.buckets) == 2 and sim.calls == 50
    for b in res.buckets:
        assert len(b.trials) == 25
        assert b.trials[0].number == 0 and b.default is b.trials[0]
        assert b.default.config == fam.default_config(SIM_KEY)
        configs = [r.config.to_json() for r in b.trials]
        assert len(set(configs)) == len(configs)  # nothing measured twice
        for r in b.trials:
            assert fam.space(SIM_KEY).infeasible(r.config) is None
            assert r.config["backend"] != "gfx950"  # illegal on sm_100: pruned before the runner
        ok = [r for r in b.trials if r.ok]
        assert b.best == min(ok, key=lambda r: r.time_us)
        assert res.timing.startswith("simulated")
    if search != "grid":
        assert sum(b.pruned for b in res.buckets) > 0  # the sampler did propose infeasible/illegal points


def test_searches_are_deterministic_by_seed(table: dict) -> None:
    def run(search: str, seed: int) -> list[str]:
        res = tune(SIM_KEY, buckets=SIM_BUCKETS[:1], trials=15, search=search, seed=seed, runner=SimulatedRunner(table))
        return [r.config.to_json() for r in res.buckets[0].trials]

    assert run("tpe", 1) == run("tpe", 1)
    assert run("random", 1) == run("random", 1)
    assert run("random", 1) != run("random", 2)


def test_grid_is_exhaustive_and_finds_the_table_best(table: dict) -> None:
    b = SIM_BUCKETS[0]
    n = len(table["buckets"][b.name()]["entries"])
    res = tune(SIM_KEY, buckets=[b], trials=10_000, search="grid", runner=SimulatedRunner(table))
    best_us, best_cfg = _best_in_table(table, b)
    assert len(res.buckets[0].trials) == n  # ends when the grid is done, not at the trial budget
    assert res.buckets[0].best.time_us == best_us and res.buckets[0].best.config.to_json() == best_cfg


def test_tpe_gets_close_to_the_best_on_a_budget(table: dict) -> None:
    b = SIM_BUCKETS[0]
    n = len(table["buckets"][b.name()]["entries"])
    best_us, _ = _best_in_table(table, b)
    res = tune(SIM_KEY, buckets=[b], trials=n // 4, search="tpe", seed=0, runner=SimulatedRunner(table))
    assert res.buckets[0].best.time_us <= 1.10 * best_us  # within 10% with a quarter of the grid


def test_random_and_tpe_stop_when_every_runnable_config_is_measured(table: dict) -> None:
    b = SIM_BUCKETS[0]
    n = len(table["buckets"][b.name()]["entries"])
    res = tune(SIM_KEY, buckets=[b], trials=10_000, search="random", runner=SimulatedRunner(table))
    assert len(res.buckets[0].trials) == n


def test_time_budget_and_should_stop(table: dict) -> None:
    class Slow(SimulatedRunner):
        def evaluate(self, c: Candidate) -> Measurement:
            time.sleep(0.05)
            return super().evaluate(c)

    t = time.monotonic()
    res = tune(SIM_KEY, buckets=SIM_BUCKETS, trials=1000, search="random", time_budget_s=0.6, runner=Slow(table))
    assert time.monotonic() - t < 2.0
    assert len(res.buckets) == 2 and all(1 <= len(b.trials) < 20 for b in res.buckets)  # each got its share
    calls = []
    res = tune(SIM_KEY, buckets=SIM_BUCKETS, trials=50, runner=SimulatedRunner(table),
               on_trial=calls.append, should_stop=lambda: len(calls) >= 3)
    assert len(calls) == 3 and len(res.buckets) == 1 and res.buckets[0].default.number == 0
    # Stopped before anything ran: no bucket at all, rather than a bucket without its default.
    assert tune(SIM_KEY, buckets=SIM_BUCKETS, runner=SimulatedRunner(table), should_stop=lambda: True).buckets == ()


def test_two_jobs_of_one_key_never_share_a_study_or_a_default(table: dict, tmp_path: Path) -> None:
    # Issue 24: two concurrent jobs of one key shared one Optuna study and the first job's default
    # trial. A service job's studies are its own (the worker passes its job id); its next attempt
    # resumes them.
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    b = SIM_BUCKETS[0]
    runs = {job: SimulatedRunner(table) for job in (1, 2)}
    r = {job: tune(SIM_KEY, buckets=[b], trials=3, storage=url, runner=runs[job], study_job=job) for job in (1, 2)}
    assert runs[1].calls == 3 and runs[2].calls == 3  # job 2 measured its own default
    assert r[2].buckets[0].default.number == 0 and len(r[2].buckets[0].trials) == 3
    assert sorted(optuna.study.get_all_study_names(storage=url)) == [f"job{j}/{SIM_KEY.slug()}/{b.name()}" for j in (1, 2)]
    again = SimulatedRunner(table)
    r3 = tune(SIM_KEY, buckets=[b], trials=3, storage=url, runner=again, study_job=1)  # job 1's next attempt
    assert len(r3.buckets[0].trials) == 6 and r3.buckets[0].default == r[1].buckets[0].default  # resumed


def test_shared_rdb_study_resumes_without_remeasuring(table: dict, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    b = SIM_BUCKETS[0]
    first = SimulatedRunner(table)
    r1 = tune(SIM_KEY, buckets=[b], trials=4, storage=url, runner=first)
    second = SimulatedRunner(table)
    r2 = tune(SIM_KEY, buckets=[b], trials=4, storage=url, seed=1, runner=second)
    assert first.calls == 4 and second.calls == 4  # the default was not measured again
    assert len(r2.buckets[0].trials) == 8 and r2.buckets[0].default == r1.buckets[0].default
    assert r2.buckets[0].default.number == 0
    names = optuna.study.get_all_study_names(storage=url)
    assert names == [study_name(SIM_KEY, b)] and names[0] == f"{SIM_KEY.slug()}/{b.name()}"
    # Timings from another clock are stale: measured again, and never mixed into the result.
    other = dict(table, meta={**table["meta"], "timing": "another-clock"})
    third = SimulatedRunner(other)
    r3 = tune(SIM_KEY, buckets=[b], trials=4, storage=url, seed=2, runner=third)
    # Timings from another clock are stale, a failure to compile is no timing: it stays a result.
    last = r2.buckets[0].trials[-1].number
    timed = [r for r in r3.buckets[0].trials if r.ok]
    assert third.calls == 4 and len([r for r in r3.buckets[0].trials if r.number > last]) == 4
    assert all(r.number > last for r in timed)
    assert r3.buckets[0].default.config == r1.buckets[0].default.config
    assert r3.buckets[0].default.number > last
    assert timed and all(r.timing == "simulated:another-clock" for r in timed)


def test_key_and_runner_must_agree(table: dict) -> None:
    with pytest.raises(ValueError, match="runner measures on sm_100"):
        tune(pack_key("nvfp4_288", "sm_90"), runner=SimulatedRunner(table))
    with pytest.raises(ValueError, match="unknown search"):
        tune(SIM_KEY, search="anneal", runner=SimulatedRunner(table))


def test_a_table_recorded_over_a_sub_grid_is_searched_on_that_grid(table: dict) -> None:
    # What benchmarks/record_table.py does: record a restriction of the family's space; the search
    # then runs on the table's own grid and never asks for a config outside it (the runner raises).
    from tuner.bench.simulation import table_space
    from catalog.families.pack import space as pack_space

    sub = pack_space("nvfp4_288").restrict({"BLOCK_T": (2, 4), "num_warps": (1, 2), "BLOCKS_PER_PROG": (1,),
                                            "num_stages": (1,)})
    keep = {c.to_json() for c in sub.grid()}
    small = json.loads(json.dumps(table))
    small["meta"]["space"] = sub.to_json()
    for b in small["buckets"].values():
        b["entries"] = {k: e for k, e in b["entries"].items() if k in keep}
    b = SIM_BUCKETS[0]
    n = len(small["buckets"][b.name()]["entries"])
    assert 0 < n < len(table["buckets"][b.name()]["entries"])
    space = table_space(small)
    assert space.default() == sub.default()
    for search in ("grid", "random", "tpe"):
        res = tune(SIM_KEY, buckets=[b], trials=10_000, search=search, runner=SimulatedRunner(small), space=space)
        measured = {t.config.to_json() for t in res.buckets[0].trials}
        assert measured == set(small["buckets"][b.name()]["entries"]), search
        assert res.buckets[0].best.time_us == _best_in_table(small, b)[0], search


def test_restrict_keeps_the_default_and_known_choices() -> None:
    from catalog.families.pack import space as pack_space

    full = pack_space("nvfp4_288")
    sub = full.restrict({"num_warps": (1, 2, 4)})
    assert [p.choices for p in sub.params if p.name == "num_warps"] == [(1, 2, 4)]
    assert sub.default() == full.default() and set(sub.grid()) <= set(full.grid())
    with pytest.raises(ValueError, match="default"):
        full.restrict({"num_warps": (8,)})
    with pytest.raises(ValueError, match="not among"):
        full.restrict({"num_warps": (2, 3)})
    with pytest.raises(ValueError, match="unknown"):
        full.restrict({"WARPS": (2,)})


def test_search_efficiency_report_on_a_recorded_sub_grid(table: dict, tmp_path: Path) -> None:
    # benchmarks/search_efficiency.py end to end on a table recorded over a sub-grid, one bucket of
    # it cut short by the recorder's time limit (skipped: its best is unknown).
    import sys

    from tuner.bench.simulation import save_table
    from catalog.families.pack import space as pack_space

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import search_efficiency

    sub = pack_space("nvfp4_288").restrict({"BLOCK_T": (2, 4, 8), "num_warps": (1, 2, 4)})
    keep = {c.to_json() for c in sub.grid()}
    small = json.loads(json.dumps(table))
    small["meta"]["space"] = sub.to_json()
    for b in small["buckets"].values():
        b["entries"] = {k: e for k, e in b["entries"].items() if k in keep}
    cut = small["buckets"][SIM_BUCKETS[1].name()]["entries"]
    for k in list(cut)[: len(cut) // 2]:
        del cut[k]
    save_table(small, tmp_path / "pack.json")
    assert search_efficiency.main(["--tables", str(tmp_path / "pack.json"), "--seeds", "2",
                                   "--out", str(tmp_path / "eff")]) == 0
    raw = json.loads((tmp_path / "eff.json").read_text())
    assert {r["bucket"] for r in raw} == {SIM_BUCKETS[0].name()}
    n = len(small["buckets"][SIM_BUCKETS[0].name()]["entries"])
    assert {r["search"] for r in raw} == {"tpe", "random", "grid"}
    assert all(r["grid"] == n and r["trials"] is not None and 1 <= r["trials"] <= n for r in raw)
    assert "| pack (SYNTHETIC) | tpe |" in (tmp_path / "eff.md").read_text()  # the table says what it is


@pytest.mark.parametrize("kernel", ["pack", "decode", "logits"])
def test_recorded_h200_tables_replay_on_the_cpu(kernel: str) -> None:
    # The tables recorded on the H200 (benchmarks/tables/) drive the search as the GPU did: on the
    # table's own grid, the exhaustive search of a bucket ends at the grid's size with the recorded
    # best as the winner, and TPE's winner within the same budget is a recorded, verified entry.
    from tuner.bench.simulation import load_table, table_space

    table = load_table(Path(__file__).resolve().parents[2] / "benchmarks" / "tables" / f"{kernel}.json")
    assert table["meta"]["complete"] and not table["meta"]["synthetic"] and table["meta"]["device_name"] == "NVIDIA H200"
    key = ProblemKey.from_json(table["meta"]["key"])
    space = table_space(table)
    first, last = list(table["buckets"])[0], list(table["buckets"])[-1]
    for name in (first, last):
        b = Bucket.from_json(table["buckets"][name]["bucket"])
        n = len(table["buckets"][name]["entries"])
        best_us, best_cfg = _best_in_table(table, b)
        res = tune(key, buckets=[b], trials=10_000, search="grid", runner=SimulatedRunner(table), space=space,
                   family=kernel)
        got = res.buckets[0]
        assert len(got.trials) == n and got.best.time_us == best_us and got.best.config.to_json() == best_cfg
        assert got.default.config == space.default()  # trial 0 is the default, as on the GPU
        res = tune(key, buckets=[b], trials=n // 4, search="tpe", seed=1, runner=SimulatedRunner(table), space=space,
                   family=kernel)
        won = res.buckets[0].best
        assert won.ok and table["buckets"][name]["entries"][won.config.to_json()]["time_us"] == won.time_us


def test_a_variant_that_fixes_parameters_is_reached_and_measured_once() -> None:
    # logits' wgmma path fixes all but TILES and num_stages: a sample of it runs as its canonical
    # config, so a random search still reaches it where it is one feasible combination among the
    # 256 raw wgmma samples of the space, and measures it once. SYNTHETIC times: wgmma 1 us,
    # every other config 5 us or more.
    from tuner.bench.simulation import new_table, table_put
    from catalog.families.logits import dot_config, logits_key
    from catalog.families.logits import space as logits_space

    key = logits_key("mxfp4_68", "fp8", "sm_90")
    fam = get_family("logits")
    sub = logits_space("mxfp4_68", "fp8").restrict({
        "dot": ("fp8", "wgmma"), "backend": ("soft",), "BLOCK_N": (32, 64), "TILES": (4,), "QT": (1, 2),
        "HEADS": (32, 64), "PAGE_LOOKUP": ("tile", "key"), "MMA": ("heads_m", "keys_m"), "PREFETCH": (0, 1),
        "LOADS": ("gather", "descriptor"), "num_warps": (4, 8), "num_stages": (2,)})
    b = Bucket("B", 33, 64, 65536)
    table = new_table(key, "logits", "sm_90", {"timing": "synthetic"}, synthetic=True, space=sub.to_json())
    feasible = [c for c in sub.grid() if sub.infeasible(c) is None and fam.config_legality(c, "sm_90") is None]
    wgmma = dot_config(sub.default(), "wgmma")
    assert [c for c in feasible if c["dot"] == "wgmma"] == [wgmma]
    for i, c in enumerate(feasible):
        table_put(table, b, c, Measurement(TrialStatus.OK, time_us=1.0 if c == wgmma else 5.0 + i / 1000))
    res = tune(key, buckets=[b], trials=8, search="random", seed=0, runner=SimulatedRunner(table), space=sub)
    trials = res.buckets[0].trials
    assert res.buckets[0].best.config == wgmma
    assert sum(t.config == wgmma for t in trials) == 1
    assert fam.canonical_config(key, wgmma.replace(BLOCK_N=32, QT=2, num_warps=8)) == wgmma
    assert fam.canonical_config(key, sub.default()) == sub.default()


def test_the_familys_seed_configs_are_measured_right_after_the_default() -> None:
    # decode on sm_90 seeds its wgmma path: trial 1 of every search (not grid, which enqueues the
    # whole grid itself), whatever the sampler would draw; nothing is seeded where it cannot run.
    # SYNTHETIC times: wgmma 1 us, every other config 5 us or more.
    from tuner.bench.simulation import new_table, table_put
    from catalog.families.decode import decode_key
    from catalog.families.decode_wgmma import wgmma_config
    from catalog.families.decode import space as decode_space

    key = decode_key("nvfp4_288", "fp8_528", "sm_90")
    fam = get_family("decode")
    sub = decode_space("nvfp4_288", "fp8_528").restrict({
        "backend": ("soft", "lut"), "BLOCK_N": (32, 64), "NUM_SPLITS": (0, 2), "LISTS": ("both",), "COMBINE": ("kernel",),
        "DOT": ("bf16",), "MMA": ("heads_m", "keys_m", "wgmma"), "PREFETCH": (0, 1), "num_warps": (4, 8),
        "num_stages": (1,)})
    wgmma = wgmma_config(sub.default())
    assert fam.seed_configs(key, "sm_90") == [wgmma, wgmma_config(wgmma.replace(MMA="wgmma_ws"))]
    assert fam.seed_configs(decode_key("nvfp4_288", "fp8_528", "sm_100"), "sm_100") == []
    # The V4 record pair is seeded too (the wgmma path reads fp8_584); a pair it cannot read is not.
    from catalog.families.decode import default_config as decode_default

    v4 = wgmma_config(decode_default("fp8_584", "fp8_584"))
    assert fam.seed_configs(decode_key("fp8_584", "fp8_584", "sm_90"), "sm_90") == \
        [v4, wgmma_config(v4.replace(MMA="wgmma_ws"))]  # and its warp-specialised build
    assert fam.seed_configs(decode_key("fp8_528", "fp8_584", "sm_90"), "sm_90") == []  # no room for two lists' buffers
    b = Bucket("T", 1, 1)
    table = new_table(key, "decode", "sm_90", {"timing": "synthetic"}, synthetic=True, space=sub.to_json())
    feasible = [c for c in sub.grid() if sub.infeasible(c) is None and fam.config_legality(c, "sm_90") is None]
    assert wgmma in feasible
    for i, c in enumerate(feasible):
        table_put(table, b, c, Measurement(TrialStatus.OK, time_us=1.0 if c == wgmma else 5.0 + i / 1000))
    for search in ("tpe", "random"):
        res = tune(key, buckets=[b], trials=2, search=search, seed=0, runner=SimulatedRunner(table), space=sub)
        trials = res.buckets[0].trials
        assert [t.config for t in trials] == [sub.default(), wgmma]
        assert res.buckets[0].best.config == wgmma
