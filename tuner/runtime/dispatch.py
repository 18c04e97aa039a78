"""Counting the calls no tuned bucket covers, and reporting the counts to the server in the
background.

A miss is counted on the calling thread under a lock (a dict increment: no I/O, no allocation
beyond a new key's first count). A daemon thread wakes every `interval_s` (or as soon as
`batch` misses are pending), swaps the counts out and sends them in one request; a failed send
puts them back, so a dead server costs the serving threads nothing and loses no counts while the
process lives (bounded by `max_keys` distinct keys).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable, Mapping

from catalog.core import ProblemKey

MissKey = tuple[ProblemKey, str, int]  # (the key, bucket dimension, size)


class MissCounter:
    """Miss counts since the last report, plus running totals for this process."""

    def __init__(self, max_keys: int = 4096) -> None:
        self._lock = threading.Lock()
        self._pending: Counter[MissKey] = Counter()
        self.totals: Counter[MissKey] = Counter()
        self.max_keys = max_keys
        self.pending_calls = 0
        self.wake = threading.Event()
        self.batch = 0  # set by a reporter: wake it once this many misses are pending

    def count(self, key: ProblemKey, dim: str, n: int) -> None:
        k = (key, dim, n)
        with self._lock:
            if k in self._pending or len(self._pending) < self.max_keys:
                self._pending[k] += 1
            self.totals[k] += 1
            self.pending_calls += 1
            full = self.batch and self.pending_calls >= self.batch
        if full:
            self.wake.set()

    def take(self) -> Counter[MissKey]:
        with self._lock:
            out, self._pending = self._pending, Counter()
            self.pending_calls = 0
        return out

    def put_back(self, counts: Mapping[MissKey, int]) -> None:
        with self._lock:
            for k, v in counts.items():
                if k in self._pending or len(self._pending) < self.max_keys:
                    self._pending[k] += v
                    self.pending_calls += v

    def total(self) -> int:
        with self._lock:
            return sum(self.totals.values())


def miss_payload(counts: Mapping[MissKey, int], device: str, triton: str) -> dict[str, Any]:
    """The body of `POST /v1/misses` (api/routes/misses.py): one item per (key, dimension, size)
    with its count, the key as its JSON fields."""
    items = sorted(counts.items(), key=lambda kv: (kv[0][0].slug(), kv[0][1], kv[0][2]))
    return {"device": device, "triton": triton,
            "misses": [{**k.to_json(), "dim": d, "n": n, "count": c} for (k, d, n), c in items]}


class MissReporter:
    """A daemon thread that sends a MissCounter's counts through `send(payload)` in batches."""

    def __init__(self, counter: MissCounter, send: Callable[[dict[str, Any]], Any], *, device: str, triton: str,
                 interval_s: float = 30.0, batch: int = 1024) -> None:
        self.counter = counter
        self.send = send
        self.device, self.triton = device, triton
        self.interval_s = interval_s
        self.sent = 0  # reports delivered
        self.failed = 0  # reports that raised (their counts were put back)
        self.last_error: str | None = None
        self._stop = threading.Event()
        counter.batch = batch
        self._thread = threading.Thread(target=self._run, name="kvtune-miss-reporter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.counter.wake.wait(self.interval_s)
            self.counter.wake.clear()
            self.flush()

    def flush(self) -> bool:
        """Send what is pending now (on the calling thread). True when nothing is left to send."""
        counts = self.counter.take()
        if not counts:
            return True
        try:
            self.send(miss_payload(counts, self.device, self.triton))
        except Exception as e:  # noqa: BLE001 - any failure of the server or the network: keep the counts
            self.counter.put_back(counts)
            self.failed += 1
            self.last_error = f"{type(e).__name__}: {e}"
            return False
        self.sent += 1
        return True

    def close(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        self.counter.wake.set()
        self._thread.join(timeout_s)
