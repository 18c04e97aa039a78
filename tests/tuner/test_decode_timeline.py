"""benchmarks/decode_timeline.py: the trace build of the wgmma template and the summary of its stamps
(the traced launches themselves run on an sm_90 GPU only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.decode_timeline import (C_DONE, C_PV, C_READY, C_S, C_WAIT, P_DONE, P_FREE, P_ISSUED, P_LANDED, P_SLOTS,
                                        P_TOP, PV_DONE, PV_READY, S_IN, S_READY, TRACE_EVENTS, TRACE_START, TRACE_TILES,
                                        TRACED, summarise)
from catalog.families.decode import render_wgmma


def _program(ghz: float, tiles: list[dict[int, int]], start: int = 1000, start_ns: int = 5_000,
             epilogue: int | None = None) -> list[list[int]]:
    """A program's stamps: tile i's events as cycles after `start`, its start and end at `ghz`
    (`start_ns` on the global timer), its last store `epilogue` cycles after its end (None: the
    build did not stamp it)."""
    prog = [[0] * TRACE_EVENTS for _ in range(TRACE_TILES)]
    for i, ev in enumerate(tiles):
        for e, c in ev.items():
            prog[i][e] = start + c
    last = max(c for ev in tiles for c in ev.values())
    prog[0][TRACE_START:TRACE_START + 4] = [start, start_ns, start + last, start_ns + round(last / ghz)]
    if epilogue is not None:
        prog[1][TRACE_START:TRACE_START + 2] = [start + last + epilogue, start_ns + round((last + epilogue) / ghz)]
    return prog


def test_summarise_reads_each_phase_from_the_stamps() -> None:
    # Two programs of a ws build at 2 GHz (2000 cycles an us): the producer waits 1 us for its
    # data, 0.5 for a buffer, converts in 0.25; the consumer waits 0.1 and computes 1.5; tiles 2 us
    # apart. A third program walked no tile (a split past the lists) and is left out.
    def tile(i: int) -> dict[int, int]:
        b = 4000 * i
        return {P_TOP: b + 2, P_LANDED: b + 2002, P_FREE: b + 3002, P_DONE: b + 3502, C_WAIT: b + 3600,
                C_READY: b + 3800, C_DONE: b + 6800}
    progs = [_program(2.0, [tile(i) for i in range(3)]), _program(2.0, [tile(i) for i in range(3)], start=7),
             [[0] * TRACE_EVENTS for _ in range(TRACE_TILES)]]
    got = summarise(progs, [3, 3, 0])
    assert got["programs"] == 2 and got["clock GHz"] == 2.0
    assert (got["producer data wait"], got["producer empty wait"], got["producer conversion"]) == (1.0, 0.5, 0.25)
    assert (got["consumer ready wait"], got["consumer compute"], got["tile period"]) == (0.1, 1.5, 2.0)
    assert got["program"] == 7.4 and "pv tile" not in got  # 14800 cycles; no PV warpgroup in this build
    assert got["first tile"] == 3.4 and got["tile period p90"] == 2.0  # start to cycle 6800: 3.4 us
    assert "epilogue" not in got and "launch span" not in got and got["start spread"] == 0.0
    # The last stores 0.5 us after the key loop; the second program starts 0.3 us after the first
    # (global timer): the launch spans the first start to the second's last store, 0.3 + 7.4 + 0.5 us.
    two = [_program(2.0, [tile(i) for i in range(3)], epilogue=1000),
           _program(2.0, [tile(i) for i in range(3)], start=7, start_ns=5_300, epilogue=1000)]
    got = summarise(two, [3, 3])
    assert (got["epilogue"], got["start spread"], got["launch span"]) == (0.5, 0.3, 8.2)
    # The QK / PV split's PV warpgroup; a tile past TRACE_TILES is not read.
    pv = _program(1.0, [{PV_READY: 100 * i, PV_DONE: 100 * i + 40} for i in range(1, 4)])
    assert summarise([pv], [TRACE_TILES + 5])["pv tile"] == 0.04
    # The prologue's parts (the split's and the cluster build's, events S_IN / S_READY of tiles 0 and
    # 1): the producer starts 0.1 us in, waits 0.6 for the cluster's start phase and 0.3 for its first
    # slots; the QK warpgroup starts 0.05 in and has the query in shared memory 1.2 later.
    parts = _program(2.0, [{S_IN: 200, S_READY: 1400, P_TOP: 2000, C_WAIT: 2100, C_READY: 2200, C_DONE: 2400},
                           {S_IN: 100, S_READY: 2500}])
    got = summarise([parts], [1])
    assert (got["prologue"], got["producer start"], got["producer cluster wait"]) == (1.0, 0.1, 0.6)
    assert (got["producer first slots"], got["qk start"], got["query"]) == (0.3, 0.05, 1.2)
    # A build that stamps none of them leaves them out.
    assert "query" not in summarise(progs, [3, 3, 0]) and "producer start" not in summarise(progs, [3, 3, 0])
    # The ws producer's data wait in its three parts, its whole trip and the tail after its conversion
    # (tiles 2 us apart; the tail from P_DONE to the next P_TOP is 2 - 1.75 us).
    def ws_tile(i: int) -> dict[int, int]:
        return {**tile(i), P_ISSUED: 4000 * i + 402, P_SLOTS: 4000 * i + 602}
    got = summarise([_program(2.0, [ws_tile(i) for i in range(3)])], [3])
    assert (got["producer copy issue"], got["producer slot loads"], got["producer copy wait"]) == (0.2, 0.1, 0.7)
    assert (got["producer trip"], got["producer loop tail"]) == (2.0, 0.25)
    assert "producer copy issue" not in summarise(progs, [3, 3, 0])  # builds without those stamps
    # Two producers taking the tiles in turn (MMA=wgmma_wsr): a tile's trip starts before the one
    # before it ends its conversion, so no trip or tail is read across them.
    turns = [{P_TOP: 2000 * i + 2, P_DONE: 2000 * i + 3502, C_DONE: 2000 * i + 3800} for i in range(3)]
    got = summarise([_program(2.0, turns)], [3])
    assert "producer trip" not in got and "producer loop tail" not in got and got["tile period"] == 1.0
    # The heads-on-N consumers' tile in parts: the ws consumer's MMA 1 wait (1.0 us) then its
    # softmax to MMA 2 issued (0.5, its C_DONE); the one-warpgroup consumer's MMA 2 wait after (0.2).
    ws_parts = _program(2.0, [{**tile(i), C_S: 4000 * i + 5800} for i in range(3)])
    got = summarise([ws_parts], [3])
    assert (got["consumer mma 1 wait"], got["consumer softmax"]) == (1.0, 0.5) and "consumer mma 2 wait" not in got
    one_wg = _program(2.0, [{**tile(i), C_S: 4000 * i + 5800, C_PV: 4000 * i + 6400} for i in range(3)])
    got = summarise([one_wg], [3])
    assert (got["consumer mma 1 wait"], got["consumer softmax"], got["consumer mma 2 wait"]) == (1.0, 0.3, 0.2)
    assert "consumer mma 1 wait" not in summarise(progs, [3, 3, 0])  # builds without those stamps


def test_trace_build_stamps_the_warp_specialised_kernels_and_compiles_for_sm90() -> None:
    # The served module is the golden one (trace=False is the default render); the trace build
    # gives each warp-specialised kernel a last argument, trace_ptr, and reads the cycle counter.
    # Compiled for sm_90 on the CPU, the ws build's traced kernel keeps its shared memory and does
    # not spill (the probes' stores must not change what they time).
    pair = ("nvfp4_288", "fp8_528")
    plain, traced = render_wgmma(*pair), render_wgmma(*pair, trace=True)
    assert plain.source == render_wgmma(*pair, trace=False).source and "trace_ptr" not in plain.source
    assert "%clock64" in traced.source and "%globaltimer" in traced.source
    for name, _, _ in TRACED:
        head = traced.source.split(f"def {name}(")[1].split("):")[0]
        assert head.rstrip(", \n").endswith("trace_ptr"), name
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from benchmarks.decode_timeline import trace_case; from tuner.compile import _request, "
            "compile_with_stats; print(json.dumps(compile_with_stats(_request(trace_case(('nvfp4_288', 'fp8_528'), "
            "'decode_wgmma_ws_kernel', 16, 4), 'sm_90'))[1]))")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["spills"] == 0 and 0 < stats["registers"] <= 255, stats
    assert stats["shared_bytes"] >= 225344, stats  # wgmma_ws_shared_bytes of the pair



def test_a_run_records_the_traced_kernels_spills() -> None:
    # The trace build's kernels, launched through its module, hand back Triton's compiled kernels;
    # a run keeps them and reports the largest spill (none where no launch said).
    from types import SimpleNamespace

    from benchmarks.decode_timeline import _traced_module, trace_spills

    launched: list = []
    mod = _traced_module(("nvfp4_288", "fp8_528"), buf="the trace buffer", launched=launched)
    bound = mod.decode_wgmma_hmpv_kernel
    calls = []

    class FakeKernel:  # a JIT function's launch: kernel[grid](*args, **kwargs) -> compiled kernel
        def __getitem__(self, grid):
            def go(*a, **kw):
                calls.append((grid, a, kw))
                return SimpleNamespace(n_spills=108 if kw.get("SPLIT") else 20)
            return go

    bound.kernel = FakeKernel()
    bound[(64, 1, 2)](1, 2, SPLIT=True)
    bound[(64, 1, 2)](3, SPLIT=False)
    assert calls[0] == ((64, 1, 2), (1, 2), {"SPLIT": True, "trace_ptr": "the trace buffer"})
    assert trace_spills(launched) == 108
    assert trace_spills([]) is None and trace_spills([SimpleNamespace()]) is None
