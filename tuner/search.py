"""Search a kernel family's space per (problem key, bucket) with Optuna, measuring every candidate
through a runner (`tuner.bench.runner.BenchRunner` on a device, `SimulatedRunner` on a recorded table).

- One Optuna study per (key, bucket), named `<key.slug()>/<bucket.name()>`, in memory or in the RDB
  storage passed in (so several workers of one arch can share a study).
- The kernel's default config is always trial 0 (`enqueue_trial`), so "tuned vs default" is measured
  in the same run, on the same device, with the same clock. The family's seed configs for the
  target (`seed_configs`: known-good variants a few trials may never draw) come next.
- Samples that are infeasible in the space or illegal on the target are told to Optuna as PRUNED
  without compiling anything; they do not count against the trial budget. Failed candidates
  (wrong result, compile error, crash, timeout...) are PRUNED too, which TPE ranks below every
  completed trial, so it learns to avoid them, and they can never be a study's best.
- A config already measured in the study is not measured again: Optuna is told the recorded result.
  A sample is first mapped to the config it runs as (`canonical_config`: a variant may fix some
  parameters), so that samples differing only in what a variant ignores are one config.
- Budgets: `trials` measured candidates per bucket, and an optional wall-time budget for the whole
  call, shared out over the buckets still to do (`bucket_share_s`). The default config always runs.
- Distributed jobs (several workers on one job's studies): `tune_shared` runs one participant's
  share bucket by bucket, and `prepare_storage` creates Optuna's tables first (its docstring states
  the storage contract; `tuner.study_storage` builds the storage: pooled, retried, heartbeats).
- Service jobs: every trial is tagged with its job, attempt and owner (`trial_tags`, user attr
  `RUN_ATTR`), and what a job publishes is read from the fenced trial rows (`collect_confirmed`),
  never from the study, which a worker fenced out of its lease may still write to.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import optuna
from optuna.trial import TrialState

from catalog.core import Bucket, Config, ProblemKey, TrialStatus
from catalog.families.base import measured_hash
from catalog.results import BucketResult, TrialRecord, TuneResult
from catalog.searches import SEARCHES  # the names, torch-free (the API validates them); used here too
from catalog.space import Space
from tuner.kernels import get_family
from tuner.kernels.base import KernelFamily
from tuner.study_storage import TrialHeartbeat, fail_running, fail_stale, is_transient, open_storage, tell_trial

if TYPE_CHECKING:
    from tuner.bench.protocol import Runner
    from tuner.bench.runner import BenchRunner

log = logging.getLogger(__name__)
TuneFn = Callable[..., TuneResult]  # `tune`'s signature: this module's, or a stand-in's (tests)
RECORD_ATTR = "kvtune_record"
PRUNED_ATTR = "kvtune_pruned"
RUN_ATTR = "kvtune_run"  # {"job", "attempt", "owner"}: who asked for the trial (a service job's)
FencedTrial = tuple[int, str, TrialRecord]  # (attempt, owner, record): a trial row written under the lease fence
_EXHAUST_LIMIT = 200_000  # spaces up to this many raw combinations are counted, to stop when all are measured


def study_name(key: ProblemKey, bucket: Bucket, job: int | None = None) -> str:
    """The Optuna study of (key, bucket): `job<id>/<slug>/<bucket>` for a service job, so two jobs of
    one key never share a study or a default trial (the attempts and participants of one job do);
    `<slug>/<bucket>` for a run outside the service (`kvtune tune --storage`), which reuses it."""
    base = f"{key.slug()}/{bucket.name()}"
    return base if job is None else f"job{job}/{base}"


def make_sampler(search: str, seed: int, trials: int) -> optuna.samplers.BaseSampler:
    """TPE (default), random, or the sampler of a grid search (which enqueues every point itself)."""
    if search == "tpe":
        # Multivariate TPE models the joint effect of tile sizes and warps; a short random start
        # (a quarter of the budget, 4..10) leaves most of a small budget to the model.
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=max(4, min(10, trials // 4)))
    if search in ("random", "grid"):
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown search {search!r}; known: {list(SEARCHES)}")


@dataclass
class _Budget:
    trials: int
    deadline: float | None
    should_stop: Callable[[], bool] | None

    def stop(self, measured: int) -> bool:
        if self.should_stop is not None and self.should_stop():
            return True
        if measured >= self.trials:
            return True
        # The default (the first measurement) always runs, whatever the clock says.
        return measured > 0 and self.deadline is not None and time.monotonic() >= self.deadline


def _grid_order(space: Space, default: Config) -> Iterator[Config]:
    """The exhaustive grid in the space's order, the default first."""
    yield default
    for c in space.grid():
        if c != default:
            yield c


def _count_runnable(space: Space, fam: KernelFamily, target: str) -> int | None:
    if math.prod(len(p.choices) for p in space.params) > _EXHAUST_LIMIT:
        return None
    return sum(1 for c in space.grid() if fam.config_legality(c, target) is None)


def _why_pruned(space: Space, fam: KernelFamily, target: str, config: Config) -> str | None:
    why = space.infeasible(config)
    if why:
        return f"infeasible: {why}"
    illegal = fam.config_legality(config, target)
    return f"illegal on {target}: {illegal}" if illegal else None


def _records(study: optuna.Study, current: Callable[[TrialRecord], bool] = lambda r: True) -> list[TrialRecord]:
    out = []
    for t in study.get_trials(deepcopy=False):
        d = t.user_attrs.get(RECORD_ATTR)
        if d is not None:
            rec = TrialRecord.from_json(d)
            if current(rec):
                out.append(rec)
    return sorted(out, key=lambda r: r.number)


class _Current:
    """Whether a record found in a (shared, persistent) study still describes this build and clock:
    a trial measured on an older template (another source hash) or on another clock is stale, and
    its config is measured again rather than trusted."""

    def __init__(self, fam: KernelFamily, key: ProblemKey, timing: str) -> None:
        self.fam, self.key, self.timing = fam, key, timing
        self._hash: dict[str, str | None] = {}

    def source_hash(self, config: Config) -> str | None:
        k = config.to_json()
        if k not in self._hash:
            try:
                self._hash[k] = measured_hash(self.fam.modules(self.key, config))
            except Exception:  # a config that does not render has no current source
                self._hash[k] = None
        return self._hash[k]

    def __call__(self, rec: TrialRecord) -> bool:
        if rec.source_hash and rec.source_hash != self.source_hash(rec.config):
            return False
        return not (rec.ok and rec.timing and self.timing and rec.timing != self.timing)


def _storage(storage: Any) -> Any:
    """A URL becomes the process's pooled, retrying storage with heartbeats (`study_storage`)."""
    return open_storage(storage) if isinstance(storage, str) else storage


def _older_attempt(tags: Mapping[str, Any] | None) -> Callable[[optuna.trial.FrozenTrial], bool]:
    attempt = (tags or {}).get("attempt")
    return lambda t: attempt is not None and int((t.user_attrs.get(RUN_ATTR) or {}).get("attempt", attempt)) < attempt


def _open_study(runner: Runner, fam: KernelFamily, key: ProblemKey, bucket: Bucket, space: Space, default: Config,
                *, search: str, seed: int, trials: int, storage: Any, study_job: int | None = None,
                tags: Mapping[str, Any] | None = None) -> tuple[optuna.Study, dict[str, TrialRecord], _Current]:
    """The (key, bucket) study, created or loaded, with what it already holds measured (current
    records only, by config) and, unless the search walks a grid, the default and then the family's
    seed configs enqueued where they are neither measured nor waiting already. Trials left RUNNING
    by a dead process (stale heartbeat) or by an older attempt of the job (`tags`) are FAILed."""
    target = runner.target
    study = optuna.create_study(study_name=study_name(key, bucket, study_job), storage=storage, direction="minimize",
                                sampler=make_sampler(search, seed, trials), load_if_exists=True)
    if storage is not None:
        fail_stale(study)
        if tags and "attempt" in tags:
            fail_running(study, _older_attempt(tags))
    # Several workers may share the study: what is already measured is reused, never re-measured
    # (unless it is stale: another template source or another clock).
    current = _Current(fam, key, runner.info().get("timing", ""))
    seen: dict[str, TrialRecord] = {r.config.to_json(): r for r in _records(study, current)}
    # Waiting (enqueued, not yet asked) trials keep their params in system_attrs["fixed_params"].
    waiting = [Config.from_dict(t.system_attrs.get("fixed_params") or {})
               for t in study.get_trials(deepcopy=False) if t.state is TrialState.WAITING]
    if search != "grid":
        if not (default.to_json() in seen or default in waiting):
            study.enqueue_trial(default.as_dict(), user_attrs={"kvtune_default": True})
        # The family's known-good configs for this target next (a few trials may never draw
        # them), where this space holds them and they are neither measured nor waiting already.
        for cfg in fam.seed_configs(key, target):
            cfg = fam.canonical_config(key, cfg)
            if cfg == default or cfg.to_json() in seen or cfg in waiting or _why_pruned(space, fam, target, cfg):
                continue
            study.enqueue_trial(cfg.as_dict(), user_attrs={"kvtune_seed": True})
    return study, seen, current


def _measure(runner: Runner, study: optuna.Study, trial: optuna.Trial, family: str, key: ProblemKey,
             bucket: Bucket, config: Config, seed: int) -> TrialRecord:
    """Run one candidate, attach its record to the trial and tell Optuna (failures as PRUNED)."""
    from tuner.bench.protocol import Candidate

    try:
        with TrialHeartbeat(study, trial):  # a process that dies here leaves a trial found stale
            m = runner.evaluate(Candidate(family, key, bucket, config, seed=seed * 1_000_003 + trial.number))
    except BaseException:
        tell_trial(study, trial, state=TrialState.FAIL)  # never leave a RUNNING trial in a shared study
        raise
    ok = m.status is TrialStatus.OK and m.time_us is not None
    # An "ok" without a time would be a runner bug; it must not become a winner either way.
    status = m.status if ok or m.status is not TrialStatus.OK else TrialStatus.CRASHED
    rec = TrialRecord(number=trial.number, bucket=bucket, config=config, status=status,
                      time_us=m.time_us if ok else None, error=m.error, source_hash=m.source_hash,
                      compile_stats=m.compile_stats, timing=m.timing)
    attrs = {RECORD_ATTR: rec.to_json()}
    if rec.ok:
        tell_trial(study, trial, rec.time_us, attrs=attrs)
    else:
        tell_trial(study, trial, state=TrialState.PRUNED, attrs=attrs)
    return rec


def tune_bucket(runner: Runner, family: str, key: ProblemKey, bucket: Bucket, *, trials: int = 32,
                search: str = "tpe", seed: int = 0, storage: Any = None, deadline: float | None = None,
                on_trial: Callable[[TrialRecord], None] | None = None,
                should_stop: Callable[[], bool] | None = None, space: Space | None = None,
                study_job: int | None = None, trial_tags: Mapping[str, Any] | None = None) -> BucketResult | None:
    """One study: measure up to `trials` candidates for `bucket`. None when nothing was measured
    (stopped before the default ran). `space` replaces the family's (e.g. a recorded table's
    sub-grid); its default is then trial 0. `study_job` names the service job whose study it is;
    `trial_tags` (job, attempt, owner) are set on every trial it asks for (`RUN_ATTR`)."""
    fam = get_family(family)
    target = runner.target
    if space is None:
        space, default = fam.space(key), fam.default_config(key)
    else:
        default = space.default()
    names = space.names()
    storage = _storage(storage)
    study, seen, current = _open_study(runner, fam, key, bucket, space, default, search=search, seed=seed,
                                       trials=trials, storage=storage, study_job=study_job, tags=trial_tags)
    grid = _grid_order(space, default) if search == "grid" else None
    runnable = _count_runnable(space, fam, target)
    budget = _Budget(trials, deadline, should_stop)
    measured = samples = pruned = 0
    max_samples = 50 + 20 * trials  # a space that is mostly infeasible must still end

    while not budget.stop(measured) and samples < max_samples:
        if runnable is not None and len(seen) >= runnable:
            break  # every runnable config is measured
        if grid is not None:
            nxt = next(grid, None)
            if nxt is None:
                break
            if nxt.to_json() in seen:
                continue
            if nxt != default and _why_pruned(space, fam, target, nxt):
                pruned += 1  # a grid never asks for what it knows it cannot run
                continue
            study.enqueue_trial(nxt.as_dict())
        trial = study.ask()
        samples += 1
        if trial_tags:
            trial.set_user_attr(RUN_ATTR, dict(trial_tags))
        config = Config.from_dict({p.name: trial.suggest_categorical(p.name, list(p.choices)) for p in space.params})
        assert set(config.as_dict()) == set(names)
        config = fam.canonical_config(key, config)  # Optuna keeps the sample; the config is what runs
        why = None if config == default else _why_pruned(space, fam, target, config)  # the default always runs
        if why:
            tell_trial(study, trial, state=TrialState.PRUNED, attrs={PRUNED_ATTR: why})
            pruned += 1
            continue
        prev = seen.get(config.to_json())
        if prev is not None:
            dup = {"kvtune_duplicate_of": prev.number}
            tell_trial(study, trial, prev.time_us if prev.ok else None,
                       state=None if prev.ok else TrialState.PRUNED, attrs=dup)
            continue
        rec = _measure(runner, study, trial, family, key, bucket, config, seed)
        seen[config.to_json()] = rec
        measured += 1
        if on_trial is not None:
            on_trial(rec)

    if storage is not None:
        fail_stale(study)
    return bucket_result(bucket, _records(study, current), default, pruned)


def bucket_result(bucket: Bucket, records: Iterable[TrialRecord], default: Config, pruned: int, *,
                  verified_default: bool = False) -> BucketResult | None:
    """A bucket's result from its current trial records (winner selection, one rule for a lone
    study and for a distributed job's): the best is the fastest verified trial (ties: the earliest),
    the default is the default config's earliest trial, or with `verified_default` its earliest
    verified one (a shared study may hold it twice: participants that start together both enqueue
    it). None without a default trial: nothing to compare against, so the bucket is not published."""
    recs = sorted((r for r in records if r.bucket == bucket), key=lambda r: r.number)
    defaults = [r for r in recs if r.config == default]
    if verified_default:
        defaults.sort(key=lambda r: not r.ok)  # stable: the earliest verified first
    if not defaults:
        return None
    ok = [r for r in recs if r.ok]  # only verified, timed trials can win
    best = min(ok, key=lambda r: (r.time_us, r.number)) if ok else None
    return BucketResult(bucket=bucket, default=defaults[0], best=best, trials=tuple(recs), pruned=pruned)


def bucket_share_s(end: float | None, buckets_left: int) -> float | None:
    """The seconds the next of `buckets_left` buckets may take out of a budget that ends at `end`
    (`time.monotonic()`; None: no budget): an equal share of what is left, so an early bucket cannot
    starve the rest."""
    return None if end is None else max(0.0, end - time.monotonic()) / buckets_left


def tune(key: ProblemKey, *, buckets: list[Bucket] | None = None, trials: int = 32, search: str = "tpe",
         target: str = "auto", time_budget_s: float | None = None, storage: Any = None, seed: int = 0,
         on_trial: Callable[[TrialRecord], None] | None = None, should_stop: Callable[[], bool] | None = None,
         runner: "BenchRunner | Runner | None" = None, family: str | None = None, space: Space | None = None,
         study_job: int | None = None, trial_tags: Mapping[str, Any] | None = None) -> TuneResult:
    """Tune `key` bucket by bucket and return per-bucket default vs best (verified) results.

    `family` defaults to `key.kernel` (a registered name or a dotted path); `buckets` default to the
    family's; `runner` defaults to a `BenchRunner` on `target` that is closed at the end (a runner
    passed in is left open). `on_trial` is called after every measured trial, failures included;
    `should_stop` is polled between trials for a clean early exit. A key whose arch is "auto" takes
    the runner's target. `space` replaces the family's search space (see `tune_bucket`).
    `storage`: None (in memory), a URL or an Optuna storage (`study_storage.open_storage`).
    `study_job`: the service job the studies belong to (`study_name`); `trial_tags`: see `tune_bucket`.
    """
    from tuner.bench.runner import BenchRunner

    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r}; known: {list(SEARCHES)}")
    if trials < 1:
        raise ValueError("trials must be at least 1 (the default config is trial 0)")
    fam_name = family or key.kernel
    fam = get_family(fam_name)
    own = runner is None
    run: Any = BenchRunner(target) if runner is None else runner
    try:
        tgt = run.target
        if target not in ("auto", tgt):
            raise ValueError(f"asked to tune for {target}, but the runner measures on {tgt}")
        if key.arch == "auto":
            key = replace(key, arch=tgt)
        elif key.arch != tgt:
            raise ValueError(f"key {key.slug()} is for {key.arch}, but the runner measures on {tgt}")
        todo = list(buckets) if buckets is not None else list(fam.buckets(key))
        end = None if time_budget_s is None else time.monotonic() + time_budget_s
        results: list[BucketResult] = []
        for i, b in enumerate(todo):
            if should_stop is not None and should_stop():
                break
            share = bucket_share_s(end, len(todo) - i)
            deadline = None if share is None else time.monotonic() + share
            r = tune_bucket(run, fam_name, key, b, trials=trials, search=search, seed=seed, storage=storage,
                            deadline=deadline, on_trial=on_trial, should_stop=should_stop, space=space,
                            study_job=study_job, trial_tags=trial_tags)
            if r is not None:
                results.append(r)
        info = run.info()
        return TuneResult(key=key, target=tgt, buckets=tuple(results), device_name=info.get("device_name", ""),
                          triton_version=info.get("triton", ""), torch_version=info.get("torch", ""),
                          search=search, seed=seed, timing=info.get("timing", ""))
    finally:
        if own:
            run.close()


# The worker's contract (kvtune.worker): an entry point declaring `shared_studies = True` keeps its
# Optuna studies in the RDB storage it is given as `storage` and measures with the `runner` it is
# given, so the participants of a distributed job can share its studies; the worker then creates
# Optuna's tables before its first job (`prepare_storage`), and `tune_shared` opens one benchmark
# child for all the buckets of a job. A stand-in without it (a test's) keeps no study and brings
# its own runner.
tune.shared_studies = True  # type: ignore[attr-defined]


def shared_studies(tune_fn: TuneFn) -> bool:
    """Whether the entry point `tune_fn` declares that it keeps shared studies (see above)."""
    return getattr(tune_fn, "shared_studies", False) is True


def prepare_storage(url: str) -> None:
    """Create Optuna's tables in the RDB storage at `url` (the job database: `db.Database.
    optuna_storage_url`); raises SQLAlchemy's errors. Optuna creates them on first use without a
    lock, and two workers doing that at once on a fresh PostgreSQL collide (`CREATE TYPE
    studydirection`: duplicate key), so a worker calls this before its first job and retries.

    The storage contract this module relies on (Optuna's `RDBStorage`, `optuna.storages.BaseStorage`):
    - Studies are shared through the database, never through a Python object: each process has its
      own storage per URL (`study_storage.open_storage`: one engine, pre-pinged, retried calls).
    - A study is one row by name (`study_name`: `job<id>/<key.slug()>/<bucket.name()>`); `create_study(...,
      load_if_exists=True)` from several processes yields the same study.
    - Trial numbers are assigned by the storage, unique within a study, so participants never
      overwrite each other's trials; a finished trial is never modified again.
    - An enqueued (WAITING) trial is handed to exactly one `ask`: the change WAITING -> RUNNING is
      made in one transaction (a row lock on PostgreSQL, the write lock on SQLite) and refused to
      everyone else, so a config enqueued once runs once.
    - A RUNNING trial is written only by the process that asked for it; it must always be told
      (`tune_bucket` tells FAIL on any exception). One whose process died is failed by Optuna's
      heartbeat (`study_storage`) or, being an older attempt's, when the next attempt opens it.
    - What is told, with its user attrs (`RECORD_ATTR`: the trial's `TrialRecord` as JSON;
      `PRUNED_ATTR`; `RUN_ATTR`), is visible to every later read from any process (`_records`).
    """
    storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    storage.engine.dispose()


def tune_shared(tune_fn: TuneFn, key: ProblemKey, buckets: list[Bucket], *, trials: int, search: str, target: str,
                time_budget_s: float | None, storage: Any, seed: int, slot: int,
                on_trial: Callable[[TrialRecord], None], stopped: Callable[[], bool],
                may_measure: Callable[[Bucket], bool], study_job: int | None = None,
                trial_tags: Mapping[str, Any] | None = None) -> TuneResult:
    """One participant's share of a distributed job: `tune_fn` on the job's shared studies in
    `storage`, one bucket at a time, each bucket an equal share of the time left (`bucket_share_s`).
    Before each measurement it asks `may_measure(bucket)` (the job's reservation: all participants
    together measure `trials` per bucket) and it stops a bucket when that says no or `stopped()`
    says yes. The sampler seed is `seed + slot`: participants must not propose the same sequence.
    Returns this participant's view (its results per bucket merged, `seed` as the job's); the
    winners are read from the fenced trial rows by whoever finishes last (`collect_confirmed`)."""
    from tuner.bench.runner import BenchRunner

    # One benchmark child for all the buckets (the real tuner starts one per call otherwise).
    runner = BenchRunner(target) if shared_studies(tune_fn) else None
    kwargs: dict[str, Any] = {}
    if runner is not None:
        kwargs = {"runner": runner, "study_job": study_job, "trial_tags": trial_tags}
    end = None if time_budget_s is None else time.monotonic() + time_budget_s
    parts: list[BucketResult] = []
    last: TuneResult | None = None
    try:
        for i, bucket in enumerate(buckets):
            if stopped():
                break

            def should_stop(bucket: Bucket = bucket) -> bool:
                return stopped() or not may_measure(bucket)

            last = tune_fn(key, buckets=[bucket], trials=trials, search=search, target=target,
                           time_budget_s=bucket_share_s(end, len(buckets) - i), storage=storage, seed=seed + slot,
                           on_trial=on_trial, should_stop=should_stop, **kwargs)
            parts.extend(last.buckets)
    finally:
        if runner is not None:
            runner.close()
    if last is None:
        return TuneResult(key=key, target=target, buckets=())
    return TuneResult(key=last.key, target=last.target, buckets=tuple(parts), device_name=last.device_name,
                      triton_version=last.triton_version, torch_version=last.torch_version,
                      search=last.search, seed=seed, timing=last.timing)


def close_studies(key: ProblemKey, buckets: Iterable[Bucket], *, storage: Any, study_job: int, attempt: int) -> None:
    """Before a job publishes: FAIL what its studies still hold RUNNING from a dead process (stale
    heartbeat) or from an older attempt, so that no trial of a finished job stays RUNNING."""
    storage = _storage(storage)
    for bucket in buckets:
        try:
            study = optuna.load_study(study_name=study_name(key, bucket, study_job), storage=storage)
            fail_stale(study)
            older = _older_attempt({"attempt": attempt})
            # An untagged RUNNING trial was asked by a process that died before it could tag it (or
            # beat): at publish time no participant is between those two steps any more.
            fail_running(study, lambda t: older(t) or RUN_ATTR not in t.user_attrs)
        except KeyError:
            continue  # a stand-in tuner keeps no study
        except Exception as e:  # noqa: BLE001 - the database's trouble must not cost the publish
            if not is_transient(e):
                raise
            log.warning("could not close the study of %s: %s", bucket.name(), e)


def collect_confirmed(key: ProblemKey, buckets: list[Bucket], mine: TuneResult, fenced: Iterable[FencedTrial], *,
                      seed: int, family: str | None = None, with_mine: bool = False,
                      verified_default: bool = True) -> TuneResult:
    """The result a job publishes: per bucket, the trials of its fenced rows (`fenced`: every row
    of the job, all attempts: each was written under the lease of the attempt that measured it),
    plus with `with_mine` those of `mine` (a stand-in tuner's own view: it keeps no study), later
    ones replacing earlier ones of the same number. Nothing is read from the studies: a worker
    fenced out of its lease may still have told a trial there (its `RUN_ATTR` says whose), and only
    what the fence let through is published. A trial measured with another template source or on
    another clock than `mine`'s is stale and left out, as `tune_bucket` does; winners as
    `bucket_result` selects them (`verified_default`: a distributed job's studies may hold the
    default twice)."""
    fam = get_family(family or key.kernel)
    default = fam.default_config(key)
    current = _Current(fam, key, mine.timing)
    rows = [rec for _attempt, _owner, rec in fenced]
    own = {br.bucket: br for br in mine.buckets}
    out: list[BucketResult] = []
    for bucket in buckets:
        recs: dict[int, TrialRecord] = {}
        if with_mine and bucket in own:
            recs.update((r.number, r) for r in own[bucket].trials)
        recs.update((r.number, r) for r in rows if r.bucket == bucket)
        br = bucket_result(bucket, (r for r in recs.values() if current(r)), default,
                           own[bucket].pruned if bucket in own else 0, verified_default=verified_default)
        if br is not None:
            out.append(br)
    return TuneResult(key=key, target=mine.target, buckets=tuple(out), device_name=mine.device_name,
                      triton_version=mine.triton_version, torch_version=mine.torch_version, search=mine.search,
                      seed=seed, timing=mine.timing)
