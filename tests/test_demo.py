"""The main job (`kvtune demo`, what `bash scripts/demo.sh` runs) end to end on this machine: the API
and a worker as processes, a tune job on the interpreter, the bundle in words, then an engine's use of
it through `TunedKernels.from_server` with no compile after warmup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
def test_kvtune_demo_tunes_serves_and_runs_as_an_engine(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)  # the demo finds no GPU and says so itself
    out = subprocess.run([sys.executable, "-m", "kvtune.cli", "demo", "--no-keep-serving"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=880)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    assert "Triton's interpreter runs the kernels in Python on the CPU" in text  # CPU times said to be CPU times
    assert "2/2 trials measured" in text and "tuned against" in text
    assert "tuned:   " in text and "default: " in text and "key tiles" in text  # configs in words
    assert "compiles after warmup: 0" in text and "bucket T1-1:" in text
    assert "/dashboard" in text
