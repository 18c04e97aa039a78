"""The Optuna RDB storage the shared studies live in, built to survive a database that drops its
connections, and Optuna's trial heartbeat, so trials of a killed process do not stay RUNNING.

- Pool: `pool_pre_ping`, so a pooled connection the server has dropped (a restart, a failover,
  `pg_terminate_backend`) is replaced at checkout instead of failing the next storage call.
- Retries: `RDBStorage` wraps every driver error of a call in `StorageInternalError` and retries
  nothing. `RetryingRDBStorage` re-runs a call whose error is a lost connection or a busy database
  (`is_transient`), with jittered backoff; only the outermost storage call retries (they nest).
  A call whose commit went through but whose answer was lost is re-run too: the state change that
  a retry finds already made (`set_trial_state_values`) counts as done.
- Heartbeat: `heartbeat_interval` and `grace_period` are given to `RDBStorage`, the tuner records a
  trial's heartbeat while it measures it (`TrialHeartbeat`: `Study.ask` starts none) and calls
  `optuna.storages.fail_stale_trials` when it opens a study and when it ends a bucket, so a trial
  whose process died is FAILed once its heartbeat is older than the grace period. A service
  worker derives both from its job lease (`heartbeat_for_lease`), so that a job re-queued because
  its lease ran out finds the dead attempt's trials already stale.

Storages are cached per (url, interval, grace) in the process: one engine, one pool.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
import warnings
from typing import Any, Callable, TypeVar

import optuna
from optuna.exceptions import StorageInternalError, UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.trial import TrialState
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_HEARTBEAT_S = 10.0  # a run outside the service (`kvtune tune --storage`)
DEFAULT_GRACE_S = 30.0
RETRIES = 10
# Opening a storage is many statements (Optuna creates its tables and stamps its schema version),
# each kept once committed: an attempt cut by a dropped connection leaves less for the next one.
# With connections dropped every 0.15 s on a loaded 2-core machine, 10 attempts did not reach the
# end once (tests/deploy/test_study_storage_faults.py); more attempts, each shorter, do.
CONNECT_RETRIES = 30
# Optuna warns that heartbeats are meant for Study.optimize; the tuner asks and tells, and records
# each trial's heartbeat itself (TrialHeartbeat).
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

# The storage calls that reach the database (the _CachedStorage in front of it calls the private ones).
_DB_CALLS = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr", "get_study_id_from_name",
    "get_study_name_from_id", "get_study_directions", "get_study_user_attrs", "get_study_system_attrs",
    "get_trial_user_attrs", "get_trial_system_attrs", "get_all_studies", "create_new_trial", "_create_new_trial",
    "set_trial_param", "_set_trial_param",
    "get_trial_param", "set_trial_state_values", "set_trial_intermediate_value", "set_trial_user_attr",
    "set_trial_system_attr", "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials",
    "_get_trials", "get_best_trial", "_get_best_trial_id", "record_heartbeat", "_get_stale_trial_ids",
)


def is_transient(exc: BaseException) -> bool:
    """A lost connection or a busy database (worth retrying, or re-queueing the job), as opposed to
    a bug or a value the database refuses: the error itself or an error it was raised from (Optuna's
    `StorageInternalError` wraps the driver's; a query Optuna retries itself after catching a lost
    connection ends in `PendingRollbackError`, raised while handling it)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen and len(seen) < 8:
        seen.add(id(cur))
        if _transient_one(cur):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _transient_one(exc: BaseException) -> bool:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True  # connection refused/closed, admin shutdown, SQLite busy or locked
    state = getattr(getattr(exc, "orig", None), "sqlstate", None) or ""
    return state.startswith("08") or state in ("40001", "40P01", "57P01", "57P02", "57P03")


_depth = threading.local()


def with_retries(what: str, fn: Callable[[], T], *, done: Callable[[], bool] | None = None,
                 retries: int = RETRIES) -> T:
    """`fn()`, re-run up to `retries` times on transient errors (`is_transient`) with jittered
    backoff. `done`: whether a call that raised `UpdateFinishedTrialError` on a re-run had in fact
    gone through the first time (its commit made, its answer lost)."""
    delay = 0.05
    for i in range(retries + 1):
        try:
            return fn()
        except UpdateFinishedTrialError:
            if i and done is not None and done():
                return True  # type: ignore[return-value]
            raise
        except Exception as e:
            if i == retries or not is_transient(e):
                raise
            log.info("optuna storage: %s: %s; retrying (%d/%d)", what, type(e.__cause__ or e).__name__, i + 1, retries)
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


def _retried(name: str, fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def call(self: RDBStorage, *args: Any, **kwargs: Any) -> T:
        if getattr(_depth, "n", 0):  # inside another storage call: the outer one retries
            return fn(self, *args, **kwargs)

        def once() -> T:
            _depth.n = 1
            try:
                return fn(self, *args, **kwargs)
            finally:
                _depth.n = 0

        done = (lambda: _already(self, args, kwargs)) if name == "set_trial_state_values" else None
        return with_retries(name, once, done=done)

    return call


def _already(storage: RDBStorage, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    trial_id = args[0] if args else kwargs["trial_id"]
    state = args[1] if len(args) > 1 else kwargs["state"]
    return RDBStorage.get_trial(storage, trial_id).state == state


class RetryingRDBStorage(RDBStorage):
    """`RDBStorage` whose database calls are retried on transient errors (module docstring)."""


for _name in _DB_CALLS:
    setattr(RetryingRDBStorage, _name, _retried(_name, getattr(RDBStorage, _name)))

_cache: dict[tuple[str, float, float], RetryingRDBStorage] = {}
_cache_lock = threading.Lock()


def open_storage(url: str, *, heartbeat_interval: float = DEFAULT_HEARTBEAT_S,
                 grace_period: float = DEFAULT_GRACE_S) -> RetryingRDBStorage:
    """The process's storage for `url` with this heartbeat (module docstring), made on first use."""
    key = (url, float(heartbeat_interval), float(grace_period))
    with _cache_lock:
        st = _cache.get(key)
        if st is None:
            kwargs: dict[str, Any] = {"pool_pre_ping": True}
            if not url.startswith("sqlite"):
                kwargs.update(pool_size=4, max_overflow=4)
            st = with_retries("connect", lambda: RetryingRDBStorage(
                url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_interval, grace_period=grace_period),
                retries=CONNECT_RETRIES)
            _cache[key] = st
        return st


def heartbeat_for_lease(lease_s: float, heartbeat_s: float) -> tuple[float, float]:
    """(heartbeat interval, grace period) for trials measured under a job lease of `lease_s`
    renewed every `heartbeat_s`. A lease runs out at least `lease_s - heartbeat_s` after its holder
    died, and its last trial heartbeat is no later than its death: a grace period below that makes
    the dead attempt's trials stale by the time the job is claimed again."""
    grace = max(0.2, 0.75 * (lease_s - heartbeat_s))
    return grace / 3, grace


def fail_stale(study: optuna.Study) -> None:
    """Optuna's `fail_stale_trials`: RUNNING trials whose heartbeat is older than the grace period
    are FAILed. Best effort: a database that stays unreachable leaves them for the next call."""
    try:
        optuna.storages.fail_stale_trials(study)
    except Exception as e:  # noqa: BLE001
        if not is_transient(e):
            raise
        log.warning("could not fail stale trials of %s: %s", study.study_name, e)


def fail_running(study: optuna.Study, where: Callable[[optuna.trial.FrozenTrial], bool]) -> int:
    """FAIL the RUNNING trials of `study` that `where` selects (those of a fenced-out attempt)."""
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if where(t):
            try:
                n += bool(study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL))
            except UpdateFinishedTrialError:
                pass  # told meanwhile
    return n


class TrialHeartbeat:
    """Records a trial's heartbeat now and then every interval, in a thread, while the body runs
    (what `Study.optimize` does for its trials). Failures are logged, never raised: a missed beat
    at worst lets the trial be failed as stale, which the tuner's tell then finds (`tell_trial`)."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial) -> None:
        self.storage = study._storage
        self.trial_id = trial._trial_id
        self.interval = self.storage.get_heartbeat_interval() if hasattr(self.storage, "get_heartbeat_interval") else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _beat(self) -> bool:
        try:
            self.storage.record_heartbeat(self.trial_id)
            return True
        except Exception as e:  # noqa: BLE001
            log.warning("trial heartbeat failed: %s", e)
            return False

    def __enter__(self) -> TrialHeartbeat:
        if self.interval is None:
            return self
        self._beat()  # before the body: a trial without any heartbeat is never found stale
        interval = float(self.interval)

        def run() -> None:
            while not self._stop.wait(interval):
                self._beat()

        self._thread = threading.Thread(target=run, name=f"trial-heartbeat-{self.trial_id}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def tell_trial(study: optuna.Study, trial: optuna.Trial, value: float | None = None, *,
               state: TrialState | None = None, attrs: dict[str, Any] | None = None) -> bool:
    """Set `attrs` on the trial and tell it; False (nothing written) when the trial was finished by
    someone else meanwhile: failed as stale while its heartbeat lagged, or as a fenced-out
    attempt's. The measurement stands on its own fenced row then; the study just lacks it."""
    try:
        for k, v in (attrs or {}).items():
            trial.set_user_attr(k, v)
        if state is None:
            study.tell(trial, value)
        else:
            study.tell(trial, state=state)
        return True
    except (UpdateFinishedTrialError, ValueError):
        if not study._storage.get_trial(trial._trial_id).state.is_finished():
            raise
        log.info("%s: trial %d was finished by someone else; not told", study.study_name, trial.number)
        return False
