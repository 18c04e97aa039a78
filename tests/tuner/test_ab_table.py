"""benchmarks/ab_table.py: an A/B of two trees timed in one call as one table, on synthetic result
files (no GPU): rows matched by every field but the time, the ratio head / base, a row only one side
timed left out, a failed side's error kept."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.ab_table import ab_rows, main

PROV = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0", "date": "2026-12-06 10:00 UTC"}


def _row(h: int, t: int, us: float | None, error: str | None = None) -> dict:
    return {"pair": "fp8_584+fp8_584", "H": h, "T": t, "build": "QK/PV split", "us": us, "error": error}


def test_rows_match_by_their_fields_and_give_the_ratio() -> None:
    base = {"rows": [_row(64, 64, 47.5), _row(128, 64, 56.0), _row(128, 1, 28.0), _row(16, 1, 8.0)]}
    head = {"rows": [_row(128, 64, 45.5), _row(64, 64, 43.7), _row(128, 1, None, "mismatch at 3 heads")]}
    got = ab_rows(base, head)
    assert [(r["H"], r["T"], r["base us"], r["head us"], r["ratio"]) for r in got] == [
        (64, 64, 47.5, 43.7, 0.92), (128, 64, 56.0, 45.5, 0.812), (128, 1, 28.0, None, None)]
    assert got[2]["error"] == "mismatch at 3 heads" and got[0]["error"] is None


def test_main_writes_the_table_from_the_calls_files(tmp_path: Path) -> None:
    for side, us in (("base", 56.0), ("head", 45.5)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "decode_hm_h200.json").write_text(json.dumps({"provenance": PROV, "rows": [_row(128, 64, us)]}))
    res = tmp_path / "results"
    assert main([str(tmp_path), "ab_demo", "--title", "A/B: demo", "--intro", "One call.", "--results", str(res)]) == 0
    md = (res / "ab_demo.md").read_text()
    assert md.startswith("# A/B: demo\n") and "NVIDIA H200" in md and "One call." in md
    assert "| fp8_584+fp8_584 | 128 | 64 | QK/PV split | 56.00 | 45.50 | 0.812 |" in md
    assert json.loads((res / "ab_demo.json").read_text())["rows"][0]["ratio"] == 0.812
    (tmp_path / "head" / "decode_hm_h200.json").write_text(json.dumps({"provenance": PROV, "rows": []}))
    assert main([str(tmp_path), "ab_none", "--title", "t", "--results", str(res)]) == 1  # nothing timed twice


def test_abba_runs_average_each_side_and_cancel_a_drift(tmp_path: Path) -> None:
    # ab.sh's abba order: base, head, head2, base2. Both trees time the same 40 us kernel while the
    # GPU drifts 0.4 us faster a run: one base-then-head pass reads a 1% gain that is not there, the
    # two runs a side read none. A second row the head really speeds up by 4 us.
    runs = {"base": (40.0, 50.0), "head": (39.6, 45.6), "head2": (39.2, 45.2), "base2": (38.8, 48.8)}
    for side, (same, faster) in runs.items():
        (tmp_path / side).mkdir()
        rows = [_row(64, 64, same), _row(128, 64, faster)]
        (tmp_path / side / "decode_hm_h200.json").write_text(json.dumps({"provenance": PROV, "rows": rows}))
    docs = {s: json.loads((tmp_path / s / "decode_hm_h200.json").read_text()) for s in runs}
    assert ab_rows(docs["base"], docs["head"])[0]["ratio"] == 0.99  # the drift, read as a gain
    got = ab_rows(docs["base"], docs["head"], docs["head2"], docs["base2"])
    assert [(r["base us"], r["head us"], r["ratio"]) for r in got] == [(39.4, 39.4, 1.0), (49.4, 45.4, 0.919)]
    assert got[0]["runs"] == "40.00 / 39.60 / 39.20 / 38.80"
    res = tmp_path / "results"
    assert main([str(tmp_path), "ab_abba", "--title", "t", "--results", str(res)]) == 0
    md = (res / "ab_abba.md").read_text()
    assert "runs (base / head / head2 / base2) |" in md
    assert "| fp8_584+fp8_584 | 128 | 64 | QK/PV split | 49.40 | 45.40 | 0.919 | 50.00 / 45.60 / 45.20 / 48.80 |" in md
    # A call cut short after head2: one second run without the other is refused, not half-averaged.
    (tmp_path / "base2" / "decode_hm_h200.json").unlink()
    assert main([str(tmp_path), "ab_cut", "--title", "t", "--results", str(res)]) == 1


def test_a_call_on_another_card_is_read_under_its_renamed_stem(tmp_path: Path) -> None:
    # h200_session.sh renames a call's result files for the card it ran on (decode_hm_h100.json on an
    # H100): the default stem finds them without --stem, and the table carries the card it names.
    prov = {**PROV, "gpu": "NVIDIA H100 80GB HBM3"}
    for side, us in (("base", 37.5), ("head", 37.1)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "decode_hm_h100.json").write_text(json.dumps({"provenance": prov, "rows": [_row(128, 64, us)]}))
    res = tmp_path / "results"
    assert main([str(tmp_path), "ab_h100", "--title", "t", "--results", str(res)]) == 0
    md = (res / "ab_h100.md").read_text()
    assert "NVIDIA H100" in md and "| 37.50 | 37.10 | 0.989 |" in md
