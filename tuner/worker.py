"""`kvtune worker`: one process per GPU. Claims jobs for its arch from the database, runs them with
the tuner under a lease it renews from a heartbeat thread, records every trial fenced by its attempt,
and publishes the winners in one transaction.

Stopping: SIGTERM/SIGINT ask the tuner to stop between trials (`should_stop`), and the job goes back
to the queue (a clean release, not counted as a failed attempt). A lost lease (heartbeat refused: the
job was cancelled, or the lease expired and the job was re-claimed) stops the tuner the same way, and
nothing more is written: every write is fenced, so even a write racing the loss changes nothing.
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
from dataclasses import dataclass, field
from typing import Any, Callable

from db import configs as db_configs
from db import migrate
from db import queue
from db.errors import DomainError, LeaseLost
from db.queue import Lease
from db.session import Database
from tuner.results import TrialRecord, TuneResult

log = logging.getLogger("kvtune.worker")

TuneFn = Callable[..., TuneResult]


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
        name = rec.bucket.name()
        self.bucket = name
        entry = self.best.setdefault(name, {"time_us": None, "params": None, "number": None, "default_time_us": None})
        if rec.config == self.default and rec.ok:  # measured in the same run, on the same device
            entry["default_time_us"] = rec.time_us
        if not rec.ok:
            self.failed[rec.status.value] = self.failed.get(rec.status.value, 0) + 1
        elif entry["time_us"] is None or rec.time_us < entry["time_us"]:  # type: ignore[operator]
            entry.update(time_us=rec.time_us, params=rec.config.as_dict(), number=rec.number,
                         source_hash=rec.source_hash)

    def as_json(self) -> dict[str, Any]:
        return {
            "trials_done": self.done, "trials_total": self.total, "trials_failed": sum(self.failed.values()),
            "failed_by_status": dict(self.failed), "bucket": self.bucket,
            "elapsed_s": round(time.monotonic() - self.started, 3),
        }


class Worker:
    def __init__(
        self, db: Database, *, arch: str, tune: TuneFn, lease_s: float = 60.0, heartbeat_s: float | None = None,
        poll_s: float = 1.0, owner: str | None = None, gpu: int | None = None,
    ) -> None:
        self.db = db
        self.arch = arch
        self.tune = tune
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s or lease_s / 3
        self.poll_s = poll_s
        gpu_tag = f"gpu{gpu}" if gpu is not None else arch
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{gpu_tag}:{uuid.uuid4().hex[:6]}"
        self.stop = threading.Event()
        self.jobs_run = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def _handler(signum: int, _frame: Any) -> None:
            log.info("%s: signal %d, stopping after the current trial", self.owner, signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, _handler)
        signal.signal(signal.SIGINT, _handler)

    def run(self, *, once: bool = False, max_idle_s: float | None = None) -> int:
        """Claim and run jobs until stopped; `once`: after one job; `max_idle_s`: after that long idle."""
        log.info("%s: worker for %s on %s", self.owner, self.arch, self.db.dialect)
        idle_since = time.monotonic()
        while not self.stop.is_set():
            try:
                n = queue.requeue_expired(self.db)
                if n:
                    log.info("%s: re-queued %d job(s) whose lease expired", self.owner, n)
                lease = queue.claim(self.db, arch=self.arch, owner=self.owner, lease_s=self.lease_s)
            except DomainError as e:  # the database is down or busy beyond retries: wait, do not die
                log.warning("%s: cannot claim: %s", self.owner, e)
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
                log.exception("%s: job %d: %s", self.owner, lease.job_id, e)
                try:
                    queue.fail(self.db, lease, f"worker error: {type(e).__name__}: {e}")
                except DomainError:
                    pass  # the database is unreachable: the lease expires and the job is re-queued
            self.jobs_run += 1
            idle_since = time.monotonic()
            if once:
                break
        log.info("%s: exiting after %d job(s)", self.owner, self.jobs_run)
        return 0

    # -- one job -----------------------------------------------------------------------------------
    def run_job(self, lease: Lease) -> None:
        from tuner.kernels import get_family

        log.info("%s: job %d attempt %d: %s", self.owner, lease.job_id, lease.attempt, lease.key.slug())
        lost = threading.Event()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.heartbeat_s):
                try:
                    if not queue.heartbeat(self.db, lease, self.lease_s):
                        log.warning("%s: job %d: lease lost (expired, re-claimed or cancelled)", self.owner, lease.job_id)
                        lost.set()
                        return
                except DomainError as e:  # keep trying: the lease may still be saved
                    log.warning("%s: heartbeat failed: %s", self.owner, e)

        # The heartbeat starts before anything slow (the first family import loads torch and Triton).
        hb = threading.Thread(target=beat, name=f"heartbeat-{lease.job_id}", daemon=True)
        hb.start()
        try:
            family = get_family(lease.key.kernel)
            n_buckets = len(lease.buckets) if lease.buckets else len(family.buckets(lease.key))
            default_cfg = family.default_config(lease.key)
        except Exception as e:  # noqa: BLE001 - a job naming a family this build lacks fails as data
            done.set()
            hb.join()
            queue.fail(self.db, lease, f"cannot load kernel family {lease.key.kernel!r}: {e}")
            return
        progress = _Progress(total=lease.trials * n_buckets, default=default_cfg)

        def on_trial(rec: TrialRecord) -> None:
            if lost.is_set():
                return
            progress.add(rec)
            try:
                queue.record_trial(self.db, lease, rec, progress=progress.as_json(), best=progress.best)
            except LeaseLost:
                log.warning("%s: job %d: lease lost; trial %d not recorded", self.owner, lease.job_id, rec.number)
                lost.set()
            except DomainError as e:
                log.warning("%s: could not record trial %d: %s", self.owner, rec.number, e)

        result: TuneResult | None = None
        error: str | None = None
        try:
            result = self.tune(
                lease.key, buckets=list(lease.buckets) if lease.buckets else None, trials=lease.trials,
                search=lease.search, target=self.arch, time_budget_s=lease.time_budget_s,
                storage=self.db.optuna_storage_url(), seed=lease.seed, on_trial=on_trial,
                should_stop=lambda: lost.is_set() or self.stop.is_set(),
            )
        except Exception as e:  # noqa: BLE001 - a tuner crash fails this job, never the worker
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"
        finally:
            stopped = self.stop.is_set()
            done.set()
            hb.join()

        if lost.is_set():
            log.warning("%s: job %d attempt %d abandoned; nothing more is written", self.owner, lease.job_id, lease.attempt)
            return
        if stopped:
            released = queue.release(self.db, lease, "worker shutting down")
            log.info("%s: job %d %s", self.owner, lease.job_id, "back in the queue" if released else "lease already gone")
            return
        if error is not None or result is None:
            log.error("%s: job %d failed: %s", self.owner, lease.job_id, error)
            queue.fail(self.db, lease, error or "tuner returned nothing")
            return
        self._publish(lease, family, result, progress)

    def _publish(self, lease: Lease, family: Any, result: TuneResult, progress: _Progress) -> None:
        winners = [br for br in result.buckets if br.best is not None]
        if not winners:
            failed = {k: v for br in result.buckets for k, v in br.failed_by_status().items()}
            queue.fail(self.db, lease, f"no verified config in any bucket (failed trials by status: {failed})")
            return
        hashes: dict[str, str] = {}
        sources: dict[str, tuple[str, str, str]] = {}
        try:
            for br in winners:
                assert br.best is not None
                r = family.render(lease.key, br.best.config)
                hashes[br.bucket.name()] = r.source_hash
                sources[r.source_hash] = (r.source_hash, r.template, r.source)
        except Exception as e:  # noqa: BLE001
            queue.fail(self.db, lease, f"cannot render the winning config: {type(e).__name__}: {e}")
            return

        def publish(s: Any) -> dict[str, Any]:
            db_configs.store_sources(s, sources.values())
            return db_configs.publish(s, job_id=lease.job_id, key=lease.key, result=result, source_hashes=hashes)

        try:
            queue.complete(self.db, lease, publish, progress=progress.as_json())
            log.info("%s: job %d succeeded: %d bucket(s) published", self.owner, lease.job_id, len(winners))
        except LeaseLost:
            log.warning("%s: job %d: lease lost before publishing; nothing published", self.owner, lease.job_id)


def main(*, gpu: int | None = None, arch: str | None = None, once: bool = False, max_idle_s: float | None = None,
         lease_s: float | None = None) -> int:
    """The `kvtune worker` entry point: settings from the environment (KVTUNE_*)."""
    from api.settings import Settings

    logging.basicConfig(level=os.environ.get("KVTUNE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    settings = Settings()
    gpu = gpu if gpu is not None else settings.gpu
    arch = arch or settings.arch
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
        db, arch=arch, tune=load_tune(settings.worker_tune), lease_s=lease_s or settings.lease_s,
        heartbeat_s=settings.heartbeat_s if lease_s is None else None, poll_s=settings.poll_s, gpu=gpu,
    )
    worker.install_signal_handlers()
    try:
        return worker.run(once=once, max_idle_s=max_idle_s)
    finally:
        db.dispose()
