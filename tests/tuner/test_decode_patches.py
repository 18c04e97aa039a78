"""benchmarks/patches/: changes prepared for a device call (h200_session.sh applies one to the device's
copy of the tree, times it against the tree as it is and runs its GPU tests). Each must still apply
to this tree and build what it says, or the call it waits for is wasted. (None waits when the folder
is empty: the first test's parameter set is empty then, and pytest reports it skipped.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "benchmarks" / "patches").glob("*.patch"))


def _patched_copy(patch: Path, dest: Path) -> Path:
    # The tracked files as they are in this checkout (uncommitted edits included), then the patch.
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    subprocess.run(["git", "apply", str(patch)], cwd=dest, capture_output=True, text=True, check=True)
    return dest


def _static(tree: Path, fmt: str, cfg: str) -> dict[str, Any]:
    # benchmarks/static_profile.py's profile of one decode build (its innermost loops included),
    # compiled for sm_90 from `tree`.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "benchmarks/static_profile.py", "decode", "--fmt", fmt, "--cfg", cfg,
                          "--json"], cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    (got,) = json.loads(out)
    assert got["config"] == cfg, out
    return got


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_patch_applies_to_this_tree(patch: Path) -> None:
    got = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr


PREFETCH_SPLIT = ROOT / "benchmarks" / "patches" / "prefetch_split_lines.patch"


@pytest.mark.skipif(not PREFETCH_SPLIT.exists(), reason="prefetch_split_lines.patch has landed or gone")
def test_prefetch_split_lines_patch_shortens_the_producer_loops(tmp_path: Path) -> None:
    # A key's L2 prefetch lines split between two halves of the producer warps, a key a lane as the
    # slots lie (h200_session.sh ab-decode): compiled on the CPU for sm_90 from a patched copy, both
    # producer loops of the QK / PV split with PREFETCH=1 shorter than the tree's, by 5% or more
    # together (fp8_584 pair: 1108 + 1021 -> 1014 + 993 SASS a tile), no more spills (42 -> 32 bytes),
    # the same shared memory: what the A/B weighs is then only how the prefetch travels (each line
    # still prefetched once, as in the tree).
    copy = _patched_copy(PREFETCH_SPLIT, tmp_path)
    fmt, cfg = "fp8_584,fp8_584", "MMA=wgmma_hmpv,PREFETCH=1"
    was, now = _static(ROOT, fmt, cfg), _static(copy, fmt, cfg)
    assert now["shared_bytes"] == was["shared_bytes"] and now["spills"] <= was["spills"], (was, now)
    assert now["ops"]["prefetch"] == was["ops"]["prefetch"] >= 8, (was["ops"], now["ops"])  # as many lines a thread
    before = [lp["instructions"] for lp in was["loops"] if lp["role"] == "producer"]
    after = [lp["instructions"] for lp in now["loops"] if lp["role"] == "producer"]
    assert len(before) == len(after) == 2, (was["loops"], now["loops"])
    assert all(a < b for a, b in zip(after, before)) and sum(after) <= 0.95 * sum(before), (before, after)
