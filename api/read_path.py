"""The API's read path: bundles from memory, misses counted in memory, one background thread.

`GET /v1/configs` is what a fleet of engines restarting together hits at once, so a bundle read
must not queue behind SQLite's write lock (one writer at a time) or take a transaction per request.
Here a request is answered from `BundleCache` when its entry was built under the current publish
generation (db/generation.py); the first request of a key after a publish builds the entry from one
read-only snapshot. The background thread of `ReadPath` re-reads the generation every `check_s`
(one small SELECT, whatever the request rate) and writes the in-memory miss counts every `flush_s`
in one transaction (db/misses.py). So a publish is seen within `check_s`, a miss reaches the table
within `flush_s`, and the hot path touches no database at all.

Each uvicorn worker process has its own cache and counter; they agree because every entry is built
from the database, and the ETag is the hash of the entry's body, so two workers serving the same
generation give the same ETag.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable

from db import generation, misses
from db.bundles import BundleRequest, read_bundle, store_sources
from db.clock import utcnow
from db.errors import DomainError
from db.session import Database
from catalog.core import ProblemKey

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = 4096  # distinct requests kept per process (LRU); an entry is ~10 KiB
DEFAULT_MAX_MISS_KEYS = 10_000  # distinct keys counted between two flushes; more are dropped (and counted)
_LOCK_STRIPES = 64


def _body(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


@dataclass(frozen=True)
class Entry:
    body: bytes
    etag: str
    warmup_body: bytes  # the bundle's warmup section (GET /v1/warmup-keys)
    generation: generation.Generation
    miss_keys: tuple[ProblemKey, ...]


class BundleCache:
    """Entries by request; an entry counts only under the generation it was built from."""

    def __init__(self, db: Database, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.db = db
        self.max_entries = max_entries
        self.generation: generation.Generation | None = None
        self._entries: OrderedDict[BundleRequest, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._build_locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self.builds = 0  # entries built (a metric, and what tests check)

    def get(self, req: BundleRequest) -> Entry | None:
        with self._lock:
            e = self._entries.get(req)
            if e is None or e.generation != self.generation:
                return None
            self._entries.move_to_end(req)
            return e

    def observe(self, gen: generation.Generation) -> bool:
        """The generation the poller read; True when it changed (every entry is then dropped)."""
        with self._lock:
            if gen == self.generation:
                return False
            self.generation = gen
            self._entries.clear()
            return True

    def fill(self, req: BundleRequest) -> Entry:
        """Build `req`'s entry (blocking: called from a worker thread). Concurrent requests for the
        same cold key wait for one build instead of each reading the database."""
        with self._build_locks[hash(req) % _LOCK_STRIPES]:
            hit = self.get(req)
            if hit is not None:
                return hit
            built = read_bundle(self.db, req)
            store_sources(self.db, built.unstored_sources)  # once per new key: the next read finds them
            body = _body(built.bundle)
            e = Entry(body, _etag(body), _body(built.bundle["warmup"]), built.generation, built.miss_keys)
            with self._lock:
                self.builds += 1
                if self.generation is None:
                    self.generation = built.generation
                if e.generation == self.generation:  # else built across a publish: serve it, keep nothing
                    self._entries[req] = e
                    self._entries.move_to_end(req)
                    while len(self._entries) > self.max_entries:
                        self._entries.popitem(last=False)
            return e


class MissCounter:
    """Misses by key since the last flush."""

    def __init__(self, max_keys: int = DEFAULT_MAX_MISS_KEYS) -> None:
        self.max_keys = max_keys
        self.dropped = 0
        self._lock = threading.Lock()
        self._counts: dict[str, misses.MissCount] = {}

    def add(self, keys: Iterable[ProblemKey], count: int = 1, now: dt.datetime | None = None) -> None:
        now = now or utcnow()
        with self._lock:
            for key in keys:
                slug = key.slug()
                m = self._counts.get(slug)
                if m is not None:
                    m.count += count
                    m.last_seen = now
                elif len(self._counts) < self.max_keys:
                    self._counts[slug] = misses.MissCount(key, count, now, now)
                else:
                    self.dropped += count

    def take(self) -> dict[str, misses.MissCount]:
        with self._lock:
            batch, self._counts = self._counts, {}
            return batch

    def put_back(self, batch: dict[str, misses.MissCount]) -> None:
        """A batch whose flush failed: its counts wait for the next flush."""
        with self._lock:
            for slug, m in batch.items():
                cur = self._counts.get(slug)
                if cur is None:
                    self._counts[slug] = m
                else:
                    cur.count += m.count
                    cur.first_seen = min(cur.first_seen, m.first_seen)

    def pending(self) -> int:
        with self._lock:
            return sum(m.count for m in self._counts.values())


class ReadPath:
    """The cache, the miss counter and the thread that keeps them in step with the database."""

    def __init__(self, db: Database, *, check_s: float = 0.2, flush_s: float = 1.0,
                 auto_tune_after: int | None = None, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.db = db
        self.check_s = check_s
        self.flush_s = flush_s
        self.auto_tune_after = auto_tune_after or None
        self.cache = BundleCache(db, max_entries)
        self.misses = MissCounter()
        self.flushes = 0  # write transactions the flusher ran (a metric, and what tests check)
        self.auto_jobs: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flush_lock = threading.Lock()

    def refresh(self) -> bool:
        """Read the generation now; True when it changed."""
        return self.cache.observe(generation.current(self.db))

    def flush(self) -> list[int]:
        """Write the pending misses now (one transaction); returns the auto-tune jobs it queued."""
        with self._flush_lock:
            batch = self.misses.take()
            if not batch:
                return []
            try:
                queued = misses.flush(self.db, batch, auto_tune_after=self.auto_tune_after)
            except DomainError:
                self.misses.put_back(batch)
                raise
            self.flushes += 1
            self.auto_jobs += queued
            return queued

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvtune-read-path", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        try:
            self.flush()  # what was counted since the last tick
        except DomainError as e:
            log.warning("dropping %d unflushed misses at shutdown: %s", self.misses.pending(), e)

    def _run(self) -> None:
        # Nothing may end this loop but stop(): a dead thread would leave every cached bundle served
        # forever, whatever is published. A database error is expected (an outage: cached bundles
        # keep being served, counts wait); anything else is a bug, logged with its traceback.
        tick = min(self.check_s, self.flush_s)
        since_flush = 0.0
        while not self._stop.wait(tick):
            since_flush += tick
            due = since_flush >= self.flush_s
            for step, what in ((self.refresh, "publish generation read"), (self.flush, "miss flush")):
                if step is self.flush and not due:
                    continue
                try:
                    step()
                except DomainError as e:
                    log.warning("%s failed (tried again next tick): %s", what, e)
                except Exception:  # noqa: BLE001  (see above)
                    log.exception("%s failed", what)
            if due:
                since_flush = 0.0
