"""benchmarks/patches/: changes prepared for a device call (h200_session.sh applies one to the device's
copy of the tree, times it against the tree as it is and runs its GPU tests). Each must still apply
to this tree, or the call it waits for is wasted, and a patch that claims a static change shows it
here, compiled for sm_90 on the CPU from a patched copy (`_patched_copy`, then
tests/tuner/static_sm90.py). (None waits when the folder is empty: the parameter sets are empty
then, and pytest reports them skipped.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tuner.static_sm90 import loop_barriers, static_profile

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


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_patch_applies_to_this_tree(patch: Path) -> None:
    got = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr


WS_BARRIERS = ROOT / "benchmarks" / "patches" / "decode_ws_barriers.patch"


@pytest.fixture(scope="module")
def ws_barriers_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _patched_copy(WS_BARRIERS, tmp_path_factory.mktemp("ws_barriers"))


@pytest.mark.skipif(not WS_BARRIERS.exists(), reason="decode_ws_barriers.patch has landed or gone")
@pytest.mark.parametrize("cfg,producer_fewer", [("MMA=wgmma_ws", True), ("MMA=wgmma_hmws", False)])
def test_ws_barriers_patch_takes_barriers_out_of_the_ws_tiles(ws_barriers_tree: Path, cfg: str,
                                                              producer_fewer: bool) -> None:
    # A warp-specialised consumer's _attend starts without a fence and CTA barrier (its mbarrier
    # wait orders the producer's fenced stores of the tile, its previous tile's end barrier every
    # warp's reads of p_smem), and the ws producer holds its slots in the scale rows' layout too
    # instead of converting them through scratch memory (two barriers an issue). From a patched
    # copy (V4.1 pair, 2026-12-07: ws producer 8 + 5 -> 6 + 4, consumer 6 -> 5 a tile; the
    # heads-on-M ws consumer 9 -> 8): the same shared memory, no spills.
    fmt = "nvfp4_288,fp8_528"
    was, now = static_profile(fmt, cfg), static_profile(fmt, cfg, ws_barriers_tree)
    assert now["shared_bytes"] == was["shared_bytes"] and now["spills"] == was["spills"] == 0, (was, now)
    assert loop_barriers(now, "mma") == [b - 1 for b in loop_barriers(was, "mma")], (was["loops"], now["loops"])
    before, after = loop_barriers(was, "producer"), loop_barriers(now, "producer")
    if producer_fewer:
        assert len(after) == len(before) and all(a < b for a, b in zip(after, before)), (before, after)
    else:
        assert after == before
