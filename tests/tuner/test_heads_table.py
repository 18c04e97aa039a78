"""benchmarks/heads_table.py: issue 28's table from bench_decode runs, on synthetic runs (no GPU):
the default column is the sweep's first row only where it was timed, the wgmma rows split by build and warps,
the best row is the minimum of every timed config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.heads_table import load_tunes, resident, table

PROV = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0", "date": "2026-12-02 01:59 UTC"}


def _cfg(mma: str, warps: int, splits: int = 0) -> dict[str, Any]:
    return {"BLOCK_N": 64 if mma == "wgmma" else 32, "LISTS": "both", "PREFETCH": 0, "backend": "soft",
            "MMA": mma, "num_warps": warps, "NUM_SPLITS": splits}


def _run(heads: int, main: dict[int, list[dict[str, Any]]], base: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"provenance": PROV, "shape": {"heads": heads, "topk": 512, "window": 128, "page_size": 64},
            "pair": "nvfp4_288+fp8_528", "baseline_pair": "fp8_584+fp8_584",
            "per_T": [{"T": t, "sweep": main[t], "fp8_584_sweep": base[t]} for t in (1, 8, 64)]}


def test_the_table_takes_defaults_wgmma_rows_and_bests_from_the_runs() -> None:
    tri, wg4, wg8 = _cfg("heads_m", 8), _cfg("wgmma", 4), _cfg("wgmma", 8, 1)
    r64 = _run(64, {t: [{"config": tri, "us": 30.0 + t}, {"config": wg4, "us": 10.0 + t}, {"config": wg8, "us": 12.0 + t / 2}]
                    for t in (1, 8, 64)},
               {t: [{"config": tri, "us": 40.0 + t}] for t in (1, 8, 64)})
    # Past 64 heads the default (a Triton config) is an error row: no default, the wgmma rows stay.
    hm = _cfg("wgmma_hm", 8)
    r128 = _run(128, {t: [{"config": tri, "error": "ValueError: at most 64 heads"}, {"config": wg8, "us": 20.0 + t}]
                      for t in (1, 8, 64)},
                {t: [{"config": tri, "error": "ValueError: wgmma path only"}, {"config": hm, "us": 30.0 + t / 4}]
                 for t in (1, 8, 64)})
    text = table({64: r64, 128: r128})
    lines = text.splitlines()
    row = {tuple(c.strip() for c in line.split("|")[1:4]): [c.strip() for c in line.split("|")[4:7]]
           for line in lines if line.startswith("| kvtune")}
    assert row[("kvtune default config", "nvfp4_288 + fp8_528", "64")] == ["31.0", "38.0", "94.0"]
    assert row[("kvtune wgmma, 1 warpgroup", "nvfp4_288 + fp8_528", "64")] == ["11.0", "18.0", "74.0"]
    assert row[("kvtune wgmma, 2 warpgroups", "nvfp4_288 + fp8_528", "64")] == ["12.5", "16.0", "44.0"]
    assert row[("kvtune best timed", "nvfp4_288 + fp8_528", "64")] == ["11.0", "16.0", "44.0"]
    assert row[("kvtune default config", "nvfp4_288 + fp8_528", "128")] == ["-", "-", "-"]
    assert row[("kvtune wgmma, 2 warpgroups", "nvfp4_288 + fp8_528", "128")] == ["21.0", "28.0", "84.0"]
    assert ("kvtune wgmma, 1 warpgroup", "nvfp4_288 + fp8_528", "128") not in row
    # The heads-on-M build has a row of its own (8 warps, like the two-warpgroup build).
    assert row[("kvtune wgmma, heads on M", "fp8_584 + fp8_584", "128")] == ["30.2", "32.0", "46.0"]
    assert ("kvtune wgmma, 2 warpgroups", "fp8_584 + fp8_584", "128") not in row
    assert row[("kvtune best timed", "fp8_584 + fp8_584", "128")] == ["30.2", "32.0", "46.0"]
    assert "| fp8_584+fp8_584 | 128 | 64 | wgmma, heads on M, splits auto | 46.00 |" in lines
    assert "| nvfp4_288+fp8_528 | 64 | 64 | wgmma, 2 warpgroups, splits 1 | 44.00 |" in lines
    assert "| FlashMLA sm90 V4 (issue 28) | fp8_584 + fp8_584 | 64 | 11.9 | 14.4 | 40.5 |" in lines


def test_the_done_when_lines_are_checked_on_the_best_configs() -> None:
    wg = _cfg("wgmma", 4)
    fast = {t: [{"config": wg, "us": {1: 11.0, 8: 14.0, 64: 40.0}[t]}] for t in (1, 8, 64)}
    slow = {t: [{"config": wg, "us": {1: 11.5, 8: 15.0, 64: 41.0}[t]}] for t in (1, 8, 64)}
    runs = {16: _run(16, fast, slow), 64: _run(64, fast, slow)}
    lines = table(runs).splitlines()
    assert "Runs: H=16 2026-12-02 01:59 UTC; H=64 2026-12-02 01:59 UTC." in lines
    # fp8_584 at 64 heads: 11.5 <= 11.9, 15.0 > 14.4 -> does not hold; 128 heads not run.
    assert "- fp8_584 pair at H=64 at least as fast as FlashMLA at 64 heads (T=1 11.5 vs 11.9, T=8 15.0 vs 14.4, " \
           "T=64 41.0 vs 40.5 us): does NOT hold" in lines
    # Fewer heads are held to FlashMLA's 64-head figures (it pads them to 64).
    assert "- fp8_584 pair at H=16 at least as fast as FlashMLA at 64 heads (T=1 11.5 vs 11.9, T=8 15.0 vs 14.4, " \
           "T=64 41.0 vs 40.5 us): does NOT hold" in lines
    assert "- fp8_584 pair at H=32 vs FlashMLA: not measured" in lines
    assert "- fp8_584 pair at H=128 vs FlashMLA: not measured" in lines
    assert "- fp8_584 pair faster at H=16 than at H=64 at every T: does NOT hold" in lines  # equal is not faster
    assert "- V4.1 pair faster than the fp8_584 pair at every (H, T) measured (6): holds" in lines
    runs[64] = _run(64, slow, fast)
    assert "- V4.1 pair faster than the fp8_584 pair at every (H, T) measured (6): does NOT hold at " \
           "[(64, 1), (64, 8), (64, 64)]" in table(runs).splitlines()


def _tune(buckets: list[tuple[int, int, dict[str, Any], float]]) -> dict[str, Any]:
    """A `kvtune tune` result file's shape: per bucket, its T range and the best trial."""
    return {"buckets": [{"bucket": {"dim": "T", "lo": lo, "hi": hi, "ctx": 0},
                         "best": {"config": cfg, "time_us": us}} for lo, hi, cfg, us in buckets]}


def test_tuned_configs_get_rows_of_their_own_and_decide_the_flashmla_lines(tmp_path: Path) -> None:
    wg, hm = _cfg("wgmma", 4), _cfg("wgmma_hmpv", 4)
    picks = {t: [{"config": wg, "us": {1: 12.0, 8: 15.0, 64: 42.0}[t]}] for t in (1, 8, 64)}
    runs = {64: _run(64, picks, picks)}
    # The tune's buckets hold T = 1, 8 and 64 (T=8 in 5-8), each faster than the picks and FlashMLA.
    (tmp_path / "tune_decode_h64_fp8_584_fp8_584_h200.json").write_text(json.dumps({**_tune(
        [(1, 1, wg, 11.0), (2, 4, wg, 99.0), (5, 8, wg, 14.0), (33, 64, hm, 39.0)]), "finished_at": "2026-12-06 20:13 UTC"}))
    tunes = load_tunes(tmp_path, [64, 128], ["fp8_584+fp8_584", "nvfp4_288+fp8_528"])
    assert list(tunes) == [(64, "fp8_584+fp8_584")]
    lines = table(runs, tunes).splitlines()
    assert "| kvtune tuned config (`kvtune tune`) | fp8_584 + fp8_584 | 64 | 11.0 | 14.0 | 39.0 |" in lines
    assert "| fp8_584+fp8_584 | 64 | 64 | wgmma, heads on M, QK/PV split, splits auto | 39.00 | 2026-12-06 20:13 UTC |" \
        in lines
    assert "- fp8_584 pair at H=64 at least as fast as FlashMLA at 64 heads (T=1 11.0 vs 11.9, T=8 14.0 vs 14.4, " \
           "T=64 39.0 vs 40.5 us): holds" in lines
    # Without the tune the same picks do not hold; the V4.1 line compares the runs' picks either way
    # (equal here: not faster).
    untuned = table(runs).splitlines()
    assert not any(line.startswith("| kvtune tuned config") for line in untuned)
    assert "- fp8_584 pair at H=64 at least as fast as FlashMLA at 64 heads (T=1 12.0 vs 11.9, T=8 15.0 vs 14.4, " \
           "T=64 42.0 vs 40.5 us): does NOT hold" in untuned
    for text in (lines, untuned):
        assert "- V4.1 pair faster than the fp8_584 pair at every (H, T) measured (3): does NOT hold at " \
               "[(64, 1), (64, 8), (64, 64)]" in text


def test_l2_resident_builds_sit_beside_flashmla_128_head_figures_for_reading() -> None:
    # `h200_session.sh resident`'s run: only the fp8_584 pair's L2 rows are read (a DRAM row and the
    # V4.1 pair's are left out), each build a row, and the best of them per T against FlashMLA's
    # 128-head figures (taken L2-resident) as a reading, not one of the done-when lines.
    def row(build: str, t: int, us: float | None, records: str = "L2",
            pair: str = "fp8_584+fp8_584") -> dict[str, Any]:
        return {"pair": pair, "H": 128, "T": t, "build": build, "records": records, "us": us,
                "error": None if us else "hang"}

    doc = {"provenance": PROV, "pairs": ["fp8_584+fp8_584"],
           "rows": [row("split", 1, 14.0), row("split", 8, 16.0), row("split", 64, 28.0),
                    row("ws", 1, 11.5), row("ws", 8, 15.0), row("ws", 64, None),
                    row("split", 64, 1.0, records="DRAM"), row("split", 1, 1.0, pair="nvfp4_288+fp8_528")]}
    lines = resident(doc)
    assert "| FlashMLA sm90 V4 (issue 28) | 128 | 12.0 | 15.3 | 29.5 |" in lines
    assert "| kvtune split | 128 | 14.0 | 16.0 | 28.0 |" in lines and "| kvtune ws | 128 | 11.5 | 15.0 | - |" in lines
    assert lines[-1] == ("- best of these at 128 heads against FlashMLA, both L2-resident "
                         "(T=1 11.5 vs 12.0, T=8 15.0 vs 15.3, T=64 28.0 vs 29.5 us): as fast or faster at every T")
    doc["rows"][1]["us"] = 15.4  # the split's T=8; ws's 15.0 still best
    doc["rows"][4]["us"] = 15.4
    assert resident(doc)[-1].endswith("behind at T=8")
    r = _run(128, {t: [{"config": _cfg("wgmma", 4), "us": 9.0}] for t in (1, 8, 64)},
             {t: [{"config": _cfg("wgmma", 4), "us": 20.0}] for t in (1, 8, 64)})
    assert "Records L2-resident" in table({128: r}, l2_run=doc) and "Records L2-resident" not in table({128: r})


def test_bench_decode_hm_times_the_builds_each_pair_takes() -> None:
    # Every build reads both of issue 28's pairs (the heads-on-M build the V4.1 pair since
    # 2026-12-04): bench_decode_hm times each on each; a build a pair's space refuses is left out
    # (rows, not failures).
    from benchmarks.bench_decode_hm import _runs

    v4 = set(_runs(("fp8_584", "fp8_584"), 64))
    assert v4 == {"wgmma 1 warpgroup, splits auto", "wgmma 2 warpgroups, splits auto", "wgmma 2 warpgroups, splits 1",
                  "heads on M, splits auto", "heads on M, splits 1", "warp-specialised, splits auto",
                  "warp-specialised, splits 1", "heads on M warp-specialised, splits auto",
                  "heads on M warp-specialised, splits 1", "heads on M QK/PV split, splits auto",
                  "heads on M QK/PV split, splits 1", "warp-specialised, splits auto, L2 prefetch",
                  "heads on M warp-specialised, splits auto, L2 prefetch",
                  "heads on M QK/PV split, splits auto, L2 prefetch", "warp-specialised, shared tiles, splits auto",
                  "warp-specialised, register producers, splits auto", "warp-specialised, register producers, splits 1"}
    # Past 16 heads the warp-specialised build sharing tiles between head groups, past 64 the split's
    # and the split's 2-CTA cluster build (two 64-head groups).
    wss, hmpvs = "warp-specialised, shared tiles, splits auto", "heads on M QK/PV split, shared tiles, splits auto, L2 prefetch"
    cluster = {f"heads on M QK/PV split, 2-CTA cluster, splits {s}, L2 prefetch" for s in ("auto", "1")}
    assert wss in v4
    assert set(_runs(("nvfp4_288", "fp8_528"), 16)) == v4 - {wss}
    assert set(_runs(("fp8_528", "nvfp4_288"), 128)) == v4 | {hmpvs} | cluster


def test_bench_decode_hm_puts_each_prefetch_row_beside_its_build() -> None:
    # The ", L2 prefetch" rows over the same build's (pair, H, T) row without it; a failed row or
    # one without its base is left out.
    from benchmarks.bench_decode_hm import _prefetch_ratios

    rows = [{"pair": "p", "H": 16, "T": 64, "build": "warp-specialised, splits auto", "us": 20.0},
            {"pair": "p", "H": 16, "T": 64, "build": "warp-specialised, splits auto, L2 prefetch", "us": 15.0},
            {"pair": "p", "H": 64, "T": 64, "build": "warp-specialised, splits auto, L2 prefetch", "us": 30.0},
            {"pair": "p", "H": 16, "T": 64, "build": "heads on M warp-specialised, splits auto", "us": 50.0},
            {"pair": "p", "H": 16, "T": 64, "build": "heads on M warp-specialised, splits auto, L2 prefetch",
             "us": None}]
    lines = _prefetch_ratios(rows)
    assert lines[-1] == "| p | 16 | 64 | warp-specialised, splits auto | 20.00 | 15.00 | 0.750 |"
    assert sum(line.startswith("| p |") for line in lines) == 1
    assert _prefetch_ratios(rows[:1]) == []


def test_bench_decode_hm_times_builds_in_the_order_asked() -> None:
    # --only patterns pick the builds and order them (the first pattern each label matches, `=label`
    # that label alone; the dict's order among equals), so a build never run on a GPU, which may
    # hang, can go last.
    from benchmarks.bench_decode_hm import _ordered

    runs = {"a, splits auto": 1, "b, splits auto": 2, "a, splits auto, L2 prefetch": 3, "c": 4}
    assert [lb for lb, _ in _ordered(runs, ["b,", "a, splits auto"])] == [
        "b, splits auto", "a, splits auto", "a, splits auto, L2 prefetch"]
    assert [lb for lb, _ in _ordered(runs, ["=c", "=a, splits auto"])] == ["c", "a, splits auto"]
    assert [lb for lb, _ in _ordered(runs, None)] == list(runs)
    assert _ordered(runs, ["zzz"]) == []
