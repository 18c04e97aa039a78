"""`kvtune worker`: one process per GPU. Claims jobs for its arch from the database, runs them with
the tuner under a lease it renews from a heartbeat thread, records every trial fenced by its attempt,
and publishes the winners in one transaction.

Stopping: SIGTERM/SIGINT ask the tuner to stop between trials (`should_stop`), and the job goes back
to the queue (a clean release, not counted as a failed attempt). A lost lease (heartbeat refused: the
job was cancelled, or the lease expired and the job was re-claimed) stops the tuner the same way, and
nothing more is written: every write is fenced, so even a write racing the loss changes nothing.

Distributed jobs (db/queue.py says how they are fenced): an idle worker joins a running distributed
job of its arch and runs the same tuner on the same Optuna studies (the job's database is the RDB
storage), bucket by bucket, with its own sampler seed (`tuner.search.tune_shared`). Each measurement
is reserved first, so the job's `trials` per bucket is the budget of all participants together, and
the parallel trials of one study are spread over as many GPUs as there are participants. The last
participant to finish publishes the winners of the job's fenced trial rows
(`tuner.search.collect_confirmed`); a participant that leaves hands the job to the others, or to
a `done` one waiting, which then publishes (db.queue.leave).

What is published comes from the fenced trial rows, never from the studies: a worker frozen past
its lease may still tell Optuna a trial when it resumes (each trial carries its attempt and owner,
`tuner.search.RUN_ATTR`), but its row is refused. A tune that loses its database connection beyond
the storage's retries (`tuner.study_storage`) gives the job back to the queue instead of failing it.

The tune entry point (KVTUNE_WORKER_TUNE, `module:function`) has `tuner.search.tune`'s signature;
one that declares `shared_studies = True` (the real tuner does) gets Optuna's tables created before
the first job (`tuner.search.prepare_storage`) and one benchmark child per distributed job. A
stand-in without it (a test's) keeps no study and brings its own runner.

Concurrency (KVTUNE_CONCURRENCY / --concurrency): how many jobs this process runs at once, one
thread and one lease each. Keep 1 on a GPU (co-running jobs distort each other's timings).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

from catalog.core import Bucket, Config
from catalog.results import TrialRecord, TuneResult
from db import leases, migrate, queue, workers
from db.errors import DatabaseUnavailable, DomainError, LeaseLost
from db.leases import Lease
from db.session import Database
from kvtune.publish import publish, winner_warmup_keys  # noqa: F401  (winner_warmup_keys: re-exported)
from tuner import search, study_storage
from tuner.search import TuneFn

log = logging.getLogger("kvtune.worker")


def load_tune(path: str) -> TuneFn:
    """`module:function` -> the function (the real tuner, or a test's stand-in)."""
    mod_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(mod_name), attr or "tune")


def pin_gpu(gpu: int | None) -> None:
    """Make GPU `gpu` the process's only visible device (before torch initialises CUDA/HIP), so the
    tuner and its benchmark children use device 0 and never touch another worker's GPU."""
    if gpu is None:
        return
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        os.environ[var] = str(gpu)


@dataclass
class _Progress:
    """What the job row shows while it runs: counts, and per bucket the default and best so far."""

    total: int
    default: Any = None  # the family's default Config: its time is the baseline shown beside the best
    done: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    best: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    bucket: str = ""

    def add(self, rec: TrialRecord) -> None:
        self.done += 1
        self.bucket = rec.bucket.name()
        if not rec.ok:
            self.failed[rec.status.value] = self.failed.get(rec.status.value, 0) + 1
        queue.merge_best(self.best, rec, is_default=rec.config == self.default)

    def as_json(self) -> dict[str, Any]:
        return {
            "trials_done": self.done, "trials_total": self.total, "trials_failed": sum(self.failed.values()),
            "failed_by_status": dict(self.failed), "bucket": self.bucket,
            "elapsed_s": round(time.monotonic() - self.started, 3),
        }


class _Outcome(NamedTuple):
    """How a tune ended: its result, or the error (`transient`: the database's, not the job's)."""

    result: TuneResult | None
    error: str | None
    progress: _Progress
    transient: bool = False


class Worker:
    def __init__(
        self, db: Database, *, arch: str, tune: TuneFn, lease_s: float = 60.0, heartbeat_s: float | None = None,
        poll_s: float = 1.0, owner: str | None = None, gpu: int | None = None, concurrency: int = 1,
        join_distributed: bool = True,
    ) -> None:
        self.db = db
        self.arch = arch
        self.tune = tune
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s or lease_s / 3
        if self.heartbeat_s >= lease_s:
            raise ValueError(f"heartbeat ({self.heartbeat_s}s) must be shorter than the lease ({lease_s}s)")
        self.poll_s = poll_s
        self.gpu = gpu
        gpu_tag = f"gpu{gpu}" if gpu is not None else arch
        # The owner id is the fencing identity: unique per process even when a name is configured.
        base = f"{owner}:{os.getpid()}" if owner else f"{socket.gethostname()}:{os.getpid()}:{gpu_tag}"
        self.owner = f"{base}:{uuid.uuid4().hex[:6]}"
        self.concurrency = concurrency
        self.join_distributed = join_distributed
        self.stop = threading.Event()
        self.jobs_run = 0
        self._count = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def _handler(signum: int, _frame: Any) -> None:
            log.info("%s: signal %d, stopping after the current trial", self.owner, signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, _handler)
        signal.signal(signal.SIGINT, _handler)

    def run(self, *, once: bool = False, max_idle_s: float | None = None) -> int:
        """Claim and run jobs until stopped; `once`: after one job (per slot); `max_idle_s`: after that
        long idle. With concurrency > 1, each slot is a thread with its own owner id `<owner>/sN`."""
        log.info("%s: worker for %s on %s (concurrency %d)", self.owner, self.arch, self.db.dialect, self.concurrency)
        if search.shared_studies(self.tune):
            self._init_optuna_storage()
        with workers.presence(self.db, self.owner, self.arch, self.gpu):  # for the API's no-live-worker warning
            self._slots(once, max_idle_s)
        log.info("%s: exiting after %d job(s)", self.owner, self.jobs_run)
        return 0

    def _slots(self, once: bool, max_idle_s: float | None) -> None:
        if self.concurrency == 1:
            self._loop(self.owner, None, once, max_idle_s)
        else:
            slots = [threading.Thread(target=self._loop, args=(f"{self.owner}/s{i}", f"{self.owner}/", once, max_idle_s),
                                      name=f"slot-{i}", daemon=True) for i in range(self.concurrency)]
            for t in slots:
                t.start()
            # Joined with a timeout so the main thread keeps taking signals.
            while any(t.is_alive() for t in slots):
                for t in slots:
                    t.join(0.2)

    def _init_optuna_storage(self) -> None:
        """Create Optuna's tables before the first job (`tuner.search.prepare_storage` says why): two
        workers racing on a fresh PostgreSQL would fail the job they were starting; here the loser
        simply retries and finds the tables made. Never fatal: a database that drops the
        connection through every try (Optuna's `StorageInternalError` wraps the driver's error, so
        it is not a SQLAlchemyError; a CI run lost a worker to one) leaves the tables to the first
        job's storage, which retries them itself."""
        from sqlalchemy.exc import SQLAlchemyError

        for i in range(5):
            try:
                search.prepare_storage(self.db.optuna_storage_url())
                return
            except Exception as e:  # noqa: BLE001 - classified: transient ones are retried, none ends the worker
                if not (isinstance(e, SQLAlchemyError) or study_storage.is_transient(e)):
                    log.warning("%s: could not initialise Optuna's storage (%s: %s); jobs will try again",
                                self.owner, type(e).__name__, e)
                    return
                log.info("%s: Optuna storage not ready (%s); retrying", self.owner, type(e).__name__)
                self.stop.wait(0.2 * (i + 1))
        log.warning("%s: could not initialise Optuna's storage; jobs will try again", self.owner)

    def _next(self, owner: str, exclude: str | None) -> Lease | None:
        n = queue.requeue_expired(self.db)
        if n:
            log.info("%s: re-queued %d job(s) whose lease expired", owner, n)
        lease = queue.claim(self.db, arch=self.arch, owner=owner, lease_s=self.lease_s)
        if lease is None and self.join_distributed:
            lease = queue.join(self.db, arch=self.arch, owner=owner, lease_s=self.lease_s, exclude_owner_prefix=exclude)
            if lease is not None:
                log.info("%s: joined distributed job %d attempt %d as participant %d", owner, lease.job_id,
                         lease.attempt, lease.slot)
        return lease

    def _loop(self, owner: str, exclude: str | None, once: bool, max_idle_s: float | None) -> None:
        idle_since = time.monotonic()
        while not self.stop.is_set():
            try:
                lease = self._next(owner, exclude)
            except DomainError as e:  # the database is down or busy beyond retries: wait, do not die
                log.warning("%s: cannot claim: %s", owner, e)
                self.stop.wait(self.poll_s)
                continue
            if lease is None:
                if max_idle_s is not None and time.monotonic() - idle_since >= max_idle_s:
                    break
                self.stop.wait(self.poll_s)
                continue
            try:
                self.run_job(lease)
            except Exception as e:  # noqa: BLE001 - one job's trouble never ends the worker
                log.exception("%s: job %d: %s", owner, lease.job_id, e)
                try:
                    if isinstance(e, DatabaseUnavailable) or study_storage.is_transient(e):
                        self._give_back(lease, f"database connection lost: {type(e).__name__}: {e}")
                    else:
                        queue.fail(self.db, lease, f"worker error: {type(e).__name__}: {e}")
                except Exception as e2:  # noqa: BLE001 - the lease expires and the job is re-queued
                    log.warning("%s: job %d: could not hand the job back (%s: %s); its lease will expire",
                                owner, lease.job_id, type(e2).__name__, e2)
            with self._count:
                self.jobs_run += 1
            idle_since = time.monotonic()
            if once:
                break

    @contextmanager
    def _heartbeat(self, lease: Lease) -> Iterator[threading.Event]:
        """Renew the lease every heartbeat_s in a thread while the body runs; the event it yields is set
        when the lease is lost (expired, re-claimed or cancelled)."""
        lost = threading.Event()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.heartbeat_s):
                try:
                    if not leases.heartbeat(self.db, lease, self.lease_s):
                        log.warning("%s: job %d: lease lost (expired, re-claimed or cancelled)", lease.owner, lease.job_id)
                        lost.set()
                        return
                except DomainError as e:  # keep trying: the lease may still be saved
                    log.warning("%s: heartbeat failed: %s", lease.owner, e)

        hb = threading.Thread(target=beat, name=f"heartbeat-{lease.job_id}", daemon=True)
        hb.start()
        try:
            yield lost
        finally:
            done.set()
            hb.join()

    # -- one job -----------------------------------------------------------------------------------
    def _study_kwargs(self, lease: Lease) -> dict[str, Any]:
        """What a tuner that keeps shared studies gets besides `tune`'s arguments: the job's studies
        (`study_job`), this process's pooled storage with Optuna's trial heartbeat timed from the
        lease (`tuner.study_storage`), and the tags of every trial it asks for (attempt and owner:
        who measured it, so an attempt's leftovers can be told apart from the next one's)."""
        interval, grace = study_storage.heartbeat_for_lease(self.lease_s, self.heartbeat_s)
        return {"study_job": lease.job_id,
                "storage": study_storage.open_storage(self.db.optuna_storage_url(), heartbeat_interval=interval,
                                                      grace_period=grace),
                "trial_tags": {"job": lease.job_id, "attempt": lease.attempt, "owner": lease.owner}}

    def run_job(self, lease: Lease) -> None:
        from tuner.kernels import get_family

        log.info("%s: job %d attempt %d: %s%s", lease.owner, lease.job_id, lease.attempt, lease.key.slug(),
                 f" (distributed, participant {lease.slot})" if lease.distributed else "")
        # The heartbeat starts before anything slow (the first family import loads torch and Triton).
        with self._heartbeat(lease) as lost:
            try:
                family = get_family(lease.key.kernel)
                buckets = list(lease.buckets) if lease.buckets else list(family.buckets(lease.key))
                default_cfg = family.default_config(lease.key)
            except Exception as e:  # noqa: BLE001 - a job naming a family this build lacks fails as data
                family = None
                load_error = f"cannot load kernel family {lease.key.kernel!r}: {e}"
            if family is not None:
                if lease.distributed:
                    out = self._tune_shared(lease, buckets, default_cfg, lost)
                    if not (lost.is_set() or self.stop.is_set()) and out.error is None and out.result is not None:
                        # Still under the heartbeat: a participant that finished first may wait for
                        # the others and take over the publishing.
                        self._finish_shared(lease, family, out.result, buckets, lost)
                        return
                else:
                    out = self._tune_alone(lease, buckets, default_cfg, lost)
            stopped = self.stop.is_set()
        if family is None:
            queue.fail(self.db, lease, load_error)
            return
        if lost.is_set():
            log.warning("%s: job %d attempt %d abandoned; nothing more is written", lease.owner, lease.job_id, lease.attempt)
        elif stopped or out.transient:
            self._give_back(lease, "worker shutting down" if stopped else f"database connection lost: {out.error}")
        elif out.error is not None or out.result is None:
            log.error("%s: job %d failed: %s", lease.owner, lease.job_id, out.error)
            queue.fail(self.db, lease, out.error or "tuner returned nothing")
        else:
            result = out.result
            if search.shared_studies(self.tune):  # publish what the fence let through, nothing else
                result = self._confirmed(lease, buckets, result, all_attempts=True, verified_default=False)
            publish(self.db, lease, family, result, out.progress.as_json())

    def _give_back(self, lease: Lease, reason: str) -> None:
        """Stopping (SIGTERM) or a database that dropped the tune's connection: not the job's fault,
        so it goes back to the queue (not counted as a failed attempt), or for a participant of a
        distributed job, to the others (db.queue.leave). The log says which."""
        if lease.distributed:
            what = queue.leave(self.db, lease, reason)
            log.info("%s: job %d: left (%s): %s", lease.owner, lease.job_id, reason.splitlines()[0],
                     what or "lease already gone")
            return
        released = queue.release(self.db, lease, reason)
        log.info("%s: job %d (%s): %s", lease.owner, lease.job_id, reason.splitlines()[0],
                 "back in the queue" if released else "lease already gone")

    def _outcome(self, progress: _Progress, run: Callable[[], TuneResult]) -> _Outcome:
        try:
            return _Outcome(run(), None, progress)
        except Exception as e:  # noqa: BLE001 - a tuner crash fails this job, never the worker
            # A lost or refused connection (Optuna's StorageInternalError wraps the driver's) is the
            # database's trouble, not the job's: the job is given back, not failed.
            transient = isinstance(e, DatabaseUnavailable) or study_storage.is_transient(e)
            return _Outcome(None, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}", progress, transient)

    def _tune_alone(self, lease: Lease, buckets: list[Bucket], default_cfg: Config, lost: threading.Event) -> _Outcome:
        progress = _Progress(total=lease.trials * len(buckets), default=default_cfg)

        def on_trial(rec: TrialRecord) -> None:
            if lost.is_set():
                return
            progress.add(rec)
            try:
                queue.record_trial(self.db, lease, rec, progress=progress.as_json(), best=progress.best)
            except LeaseLost:
                log.warning("%s: job %d: lease lost; trial %d not recorded", lease.owner, lease.job_id, rec.number)
                lost.set()
            except DomainError as e:
                log.warning("%s: could not record trial %d: %s", lease.owner, rec.number, e)

        kwargs: dict[str, Any] = {"storage": self.db.optuna_storage_url()}
        if search.shared_studies(self.tune):
            kwargs = self._study_kwargs(lease)  # one study per job: two jobs of a key never share trials
        return self._outcome(progress, lambda: self.tune(
            lease.key, buckets=list(lease.buckets) if lease.buckets else None, trials=lease.trials,
            search=lease.search, target=self.arch, time_budget_s=lease.time_budget_s, seed=lease.seed,
            on_trial=on_trial, should_stop=lambda: lost.is_set() or self.stop.is_set(), **kwargs))

    def _tune_shared(self, lease: Lease, buckets: list[Bucket], default_cfg: Config, lost: threading.Event) -> _Outcome:
        """A participant's share of a distributed job (`tuner.search.tune_shared`), each measurement
        reserved first (db.queue.reserve) so that all participants together measure `trials` per
        bucket. Returns this participant's view; the winners are read from the fenced trial rows by
        whoever finishes last."""
        progress = _Progress(total=lease.trials * len(buckets), default=default_cfg)
        total = lease.trials * len(buckets)

        def may_measure(bucket: Bucket) -> bool:
            try:
                return queue.reserve(self.db, lease, bucket.name(), lease.trials)
            except LeaseLost:
                log.warning("%s: job %d: lease lost", lease.owner, lease.job_id)
                lost.set()
                return False
            except DomainError as e:  # transient: carry on; the local budget still bounds the bucket
                log.warning("%s: could not reserve a trial: %s", lease.owner, e)
                return True

        def on_trial(rec: TrialRecord) -> None:
            if lost.is_set():
                return
            progress.add(rec)
            try:
                queue.record_shared_trial(self.db, lease, rec, is_default=rec.config == default_cfg, total=total)
            except LeaseLost:
                log.warning("%s: job %d: lease lost; trial %d not recorded", lease.owner, lease.job_id, rec.number)
                lost.set()
            except DomainError as e:
                log.warning("%s: could not record trial %d: %s", lease.owner, rec.number, e)

        kwargs: dict[str, Any] = {"storage": self.db.optuna_storage_url(), "study_job": lease.job_id}
        if search.shared_studies(self.tune):
            kwargs = self._study_kwargs(lease)
        return self._outcome(progress, lambda: search.tune_shared(
            self.tune, lease.key, buckets, trials=lease.trials, search=lease.search, target=self.arch,
            time_budget_s=lease.time_budget_s, seed=lease.seed, slot=lease.slot, on_trial=on_trial,
            stopped=lambda: lost.is_set() or self.stop.is_set(), may_measure=may_measure, **kwargs))

    def _finish_shared(self, lease: Lease, family: Any, mine: TuneResult, buckets: list[Bucket],
                       lost: threading.Event) -> None:
        try:
            last = queue.finish(self.db, lease)
            if not last:
                log.info("%s: job %d: share done; waiting for the other participants", lease.owner, lease.job_id)
            while not last:
                # Normally the others are at most one trial behind (the budget is reserved); if one
                # died, its lease runs out, and if one left, at once: this participant publishes.
                if lost.is_set() or self.stop.wait(min(self.poll_s, self.heartbeat_s)):
                    return  # stopping: its lease runs out; a `done` participant is never waited for
                state = queue.take_over(self.db, lease)
                if state in ("published", "ended"):
                    log.info("%s: job %d: %s", lease.owner, lease.job_id, "another participant published it"
                             if state == "published" else "the attempt ended without this participant publishing")
                    return
                last = state == "last"
        except LeaseLost:
            log.warning("%s: job %d: lease lost at the end of its share; nothing more is written", lease.owner, lease.job_id)
            return
        except DomainError as e:  # the database is unreachable: its lease runs out, others carry on
            log.warning("%s: job %d: cannot finish its share: %s", lease.owner, lease.job_id, e)
            return
        log.info("%s: job %d: last participant; publishing the winners of the fenced trial rows", lease.owner,
                 lease.job_id)
        # A stand-in tuner keeps no study, and numbers its trials per participant: this attempt's rows.
        shared = search.shared_studies(self.tune)
        publish(self.db, lease, family, self._confirmed(lease, buckets, mine, all_attempts=shared,
                                                        verified_default=True), None)

    def _confirmed(self, lease: Lease, buckets: list[Bucket], mine: TuneResult, *, all_attempts: bool,
                   verified_default: bool) -> TuneResult:
        """The job's result from its fenced trial rows (`tuner.search.collect_confirmed`), after
        failing what its studies still hold RUNNING from dead processes and older attempts."""
        shared = search.shared_studies(self.tune)
        if shared:
            kw = self._study_kwargs(lease)
            search.close_studies(lease.key, buckets, storage=kw["storage"], study_job=lease.job_id,
                                 attempt=lease.attempt)
        rows = queue.fenced_trials(self.db, lease, all_attempts=all_attempts)
        return search.collect_confirmed(lease.key, buckets, mine, rows, seed=lease.seed, with_mine=not shared,
                                        verified_default=verified_default)


def main(*, gpu: int | None = None, arch: str | None = None, once: bool = False, max_idle_s: float | None = None,
         lease_s: float | None = None, heartbeat_s: float | None = None, poll_s: float | None = None,
         concurrency: int | None = None, database_url: str | None = None, name: str | None = None,
         join_distributed: bool | None = None) -> int:
    """The `kvtune worker` entry point: settings from the environment (KVTUNE_*), each overridden by
    its flag when given (init arguments take precedence over the environment in pydantic-settings,
    and are validated the same way)."""
    from pydantic import ValidationError

    from catalog.settings import Settings

    logging.basicConfig(level=os.environ.get("KVTUNE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    overrides = {"gpu": gpu, "arch": arch, "lease_s": lease_s, "heartbeat_s": heartbeat_s, "poll_s": poll_s,
                 "concurrency": concurrency, "database_url": database_url, "worker_name": name,
                 "join_distributed": join_distributed}
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        log.error("invalid worker settings: %s", e)
        return 2
    # A --lease shorter than an inherited KVTUNE_HEARTBEAT_S would lose every lease: the flag wins,
    # and the heartbeat falls back to a third of it unless it was given as a flag too.
    hb = settings.heartbeat_s
    if hb is not None and hb >= settings.lease_s and heartbeat_s is None and lease_s is not None:
        hb = None
    if hb is not None and hb >= settings.lease_s:
        log.error("invalid worker settings: heartbeat %.3gs must be shorter than the lease %.3gs", hb, settings.lease_s)
        return 2
    gpu, arch = settings.gpu, settings.arch
    pin_gpu(gpu)
    if arch == "interp":
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported anywhere in this process
    if arch is None:
        from tuner.targets import detect

        arch = detect(0).name
    db = Database(settings.database_url)
    if settings.auto_migrate:
        migrate.upgrade(db)
    worker = Worker(
        db, arch=arch, tune=load_tune(settings.worker_tune), lease_s=settings.lease_s, heartbeat_s=hb,
        poll_s=settings.poll_s, gpu=gpu, owner=settings.worker_name, concurrency=settings.concurrency,
        join_distributed=settings.join_distributed,
    )
    worker.install_signal_handlers()
    try:
        return worker.run(once=once, max_idle_s=max_idle_s)
    finally:
        db.dispose()
