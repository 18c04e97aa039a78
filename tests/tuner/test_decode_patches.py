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


HM_SLOTS = ROOT / "benchmarks" / "patches" / "decode_hm_producer_slots.patch"


@pytest.fixture(scope="module")
def hm_slots_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _patched_copy(HM_SLOTS, tmp_path_factory.mktemp("hm_slots"))


@pytest.mark.skipif(not HM_SLOTS.exists(), reason="decode_hm_producer_slots.patch has landed or gone")
@pytest.mark.parametrize("fmt,was_most,now_most", [("fp8_584,fp8_584", 9, 6), ("nvfp4_288,fp8_528", 6, 5)])
def test_hm_producer_slots_patch_takes_the_slot_conversions_out(hm_slots_tree: Path, fmt: str, was_most: int,
                                                                 now_most: int) -> None:
    # The heads-on-M producer (MMA=wgmma_hmpv, the 128-head T=64 pick) loads its slots in a warp's
    # runs of 8 keys and takes the e4m3 chunks in that order (_l3w), so the slots reach each
    # fetch's layout by shuffles, not through scratch memory and its CTA barriers (static sm_90,
    # 2026-12-07: fp8_584 pair 9 -> 6 barriers a tile in each producer loop, V4.1 pair 6 -> 5),
    # with no new spills and the same shared memory.
    was, now = static_profile(fmt, "MMA=wgmma_hmpv"), static_profile(fmt, "MMA=wgmma_hmpv", hm_slots_tree)
    assert now["shared_bytes"] == was["shared_bytes"] and now["spills"] == was["spills"] == 0, (was, now)
    before, after = loop_barriers(was, "producer"), loop_barriers(now, "producer")
    assert len(before) == len(after) == 2 and max(before) == was_most and max(after) == now_most, (before, after)
