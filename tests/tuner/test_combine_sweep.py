"""benchmarks/combine_sweep.py: decode_combine at every tile it times gives the picked tile's output
(the sweep's own check), here on its smoke shape under Triton's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_combine_sweep_smoke_merges_alike_at_every_tile(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    got = subprocess.run([sys.executable, "benchmarks/combine_sweep.py", "--smoke", "--out", str(tmp_path),
                          "--name", "sweep"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stdout + got.stderr
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert [(r["T"], r["H"], r["P"]) for r in rows] == [(2, 24, 3)]
    tiles = rows[0]["tiles"]
    assert {(e["block_d"], e["warps"]) for e in tiles} >= {(16, 4), (64, 8)}
    assert all(e["same"] and e["us"] is None for e in tiles), tiles
