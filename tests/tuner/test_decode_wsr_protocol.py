"""The K-buffer hand-over of the register-producer build (MMA=wgmma_wsr: two producer and two
consumer warpgroups, producer and consumer p taking the tiles of parity p, three K buffers), run on
the CPU as a model: the template's own `_kbuf` / `_kready` / `_kempty` (plain integer arithmetic,
taken from the rendered module) drive mbarriers with sm_90's phase-parity waits under random
interleavings of the four partitions. No tile may be read before it is written, no buffer written
while its last tile is still being read, and every schedule must finish. The same model with both
pairs sharing three words a buffer (the first scheme written) does fail: the waits' parity aliases."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from catalog.families.decode import render_wgmma


def _template_fns() -> dict[str, Callable[..., Any]]:
    """`_kbuf`, `_kready`, `_kempty` from the rendered wgmma module, as Python (their bodies are
    integer arithmetic and constexpr branches; the decorator and annotations dropped)."""
    src = render_wgmma("nvfp4_288", "fp8_528").source
    ns: dict[str, Any] = {}
    for name in ("_kbuf", "_kready", "_kempty"):
        body = src.split(f"def {name}(", 1)[1].split("\n\n\n", 1)[0]
        code = f"def {name}(" + body.replace(": gl.constexpr", "")
        exec(code, ns)  # noqa: S102 - the template's own source, rendered here
    return ns


class Barrier:
    """An mbarrier of arrival count 1: its phase advances at each arrival; a wait for parity p
    returns once the phase in progress has another parity (sm_90's try_wait.parity)."""

    def __init__(self) -> None:
        self.completed = 0

    def arrive(self) -> None:
        self.completed += 1

    def passes(self, parity: int) -> bool:
        return (self.completed & 1) != parity


def _run(n_tiles: int, seed: int, buf: Callable[[int], tuple[int, int]], ready_phase: Callable[[int], int],
         empty_phase: Callable[[int], int], n_bars: int, first_free: list[int]) -> str | None:
    """One schedule of a program of `n_tiles` tiles: each partition a generator yielding the
    barrier wait it needs next; the scheduler steps a random partition whose wait passes. The
    hazard found, or None."""
    ready = [Barrier() for _ in range(n_bars)]
    empty = [Barrier() for _ in range(n_bars)]
    for r in first_free:  # the kernel's arrivals for tiles 0-2
        empty[r].arrive()
    holds: list[int | None] = [None, None, None]  # the tile each K buffer holds
    reading: list[int | None] = [None, None, None]  # the tile a consumer is reading from it
    errors: list[str] = []

    def producer(p: int):
        for t in range(p, n_tiles, 2):
            u, r = buf(t)
            yield empty[r], empty_phase(t)
            if reading[u] is not None:
                errors.append(f"tile {t} written into buffer {u} while tile {reading[u]} is read")
            if t >= 3 and holds[u] != ("done", t - 3):
                errors.append(f"tile {t} written into buffer {u} before tile {t - 3} was released ({holds[u]})")
            holds[u] = t
            ready[r].arrive()

    def consumer(c: int):
        for t in range(c, n_tiles, 2):
            u, r = buf(t)
            yield ready[r], ready_phase(t)
            if holds[u] != t:
                errors.append(f"tile {t} read from buffer {u}, which holds {holds[u]}")
            reading[u] = t
            yield None, None  # the tile's MMAs: any other partition may run meanwhile
            reading[u] = None
            holds[u] = ("done", t)
            empty[buf(t + 3)[1]].arrive()

    rng = random.Random(seed)
    parts = {name: gen for name, gen in (("P0", producer(0)), ("P1", producer(1)), ("C0", consumer(0)),
                                         ("C1", consumer(1)))}
    waits: dict[str, tuple[Barrier | None, int | None]] = {}
    for name, gen in list(parts.items()):
        try:
            waits[name] = next(gen)
        except StopIteration:
            del parts[name]
    while parts:
        runnable = [n for n in parts if waits[n][0] is None or waits[n][0].passes(waits[n][1])]
        if not runnable:
            return f"deadlock: {sorted(parts)} wait"
        name = rng.choice(runnable)
        try:
            waits[name] = next(parts[name])
        except StopIteration:
            del parts[name]
        if errors:
            return errors[0]
    return None


@pytest.mark.parametrize("n_tiles", [1, 2, 3, 5, 7, 10, 17])
def test_wsr_hand_over_has_no_hazard_or_deadlock_in_any_schedule(n_tiles: int) -> None:
    fns = _template_fns()
    kbuf, kready, kempty = fns["_kbuf"], fns["_kready"], fns["_kempty"]
    first_free = [kbuf(t, 3)[1] for t in range(3)]
    assert sorted(first_free) == [0, 1, 3]  # tiles 0 and 2 (pair 0), tile 1 (pair 1)
    for seed in range(400):
        got = _run(n_tiles, seed, lambda t: kbuf(t, 3), lambda t: kready(t, 3), lambda t: kempty(t, 3), 6,
                   first_free)
        assert got is None, (n_tiles, seed, got)


def test_wsr_hand_over_with_shared_words_aliases() -> None:
    # The scheme first written: ready / empty word u = i % 3 for both pairs, phases (i // 3) & 1
    # (empty: the first use passing at once). A consumer two tiles ahead of the other pair's
    # producer passes its wait a phase early: the model finds it, so it can find a hazard.
    found = [_run(10, seed, lambda t: (t % 3, t % 3), lambda t: (t // 3) & 1, lambda t: ((t // 3) & 1) ^ 1, 3, [])
             for seed in range(400)]
    assert any(f is not None for f in found)
    # The template's two-buffer form (one producer, one consumer: NBUF 2) is the ws build's.
    fns = _template_fns()
    assert [fns["_kbuf"](i, 2) for i in range(4)] == [(0, 0), (1, 1), (0, 0), (1, 1)]
    assert [(fns["_kready"](i, 2), fns["_kempty"](i, 2)) for i in range(4)] == [(0, 1), (0, 1), (1, 0), (1, 0)]
