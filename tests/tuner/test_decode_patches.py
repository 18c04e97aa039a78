"""benchmarks/patches/: changes prepared for a device call (h200_session.sh applies one to the device's
copy of the tree, times it against the tree as it is and runs its GPU tests). Each must still apply
to this tree, or the call it waits for is wasted, and a patch that claims a static change shows it
here, compiled for sm_90 on the CPU from a patched copy (`_patched_copy`, then
tests/tuner/static_sm90.py). (None waits when the folder is empty: the parameter sets are empty
then, and pytest reports them skipped.)"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
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


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """A patched copy of the tree per patch, made once for the module's tests of that patch."""
    trees: dict[Path, Path] = {}

    def tree(patch: Path) -> Path:
        if patch not in trees:
            trees[patch] = _patched_copy(patch, tmp_path_factory.mktemp(patch.stem))
        return trees[patch]
    return tree


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_patch_applies_to_this_tree(patch: Path) -> None:
    got = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr


HM_CHUNKS = ROOT / "benchmarks" / "patches" / "decode_hm_chunk_allocs.patch"


@pytest.mark.skipif(not HM_CHUNKS.exists(), reason="decode_hm_chunk_allocs.patch has landed or gone")
@pytest.mark.parametrize("fmt,was_most,now_most,spills_most", [("fp8_584,fp8_584", 9, 3, 24),
                                                                ("nvfp4_288,fp8_528", 6, 2, 0)])
def test_hm_chunk_allocs_patch_takes_the_producer_barriers_out(patched_tree: Callable[[Path], Path], fmt: str,
                                                                was_most: int, now_most: int, spills_most: int) -> None:
    # The heads-on-M builds' K chunks as allocations of their own (kv_chunks; the 2-CTA cluster's
    # keep one, its peers address the chunks by offset), and the producer's slots in a warp's runs
    # of 8 keys with its e4m3 chunks fetched in that order (_l3w: the slots reach every fetch's
    # layout by shuffles, not through scratch memory). Static sm_90, MMA=wgmma_hmpv (2026-12-07):
    # each producer loop 9 -> 3 barriers a tile on the fp8_584 pair, 6 -> 2 on V4.1; the same
    # shared memory to the allocations' padding; the fp8_584 build spills 24 bytes (QK warpgroup).
    was, now = static_profile(fmt, "MMA=wgmma_hmpv"), static_profile(fmt, "MMA=wgmma_hmpv", patched_tree(HM_CHUNKS))
    assert abs(now["shared_bytes"] - was["shared_bytes"]) <= 128 and now["spills"] <= spills_most, (was, now)
    before, after = loop_barriers(was, "producer"), loop_barriers(now, "producer")
    assert len(before) == len(after) == 2 and max(before) == was_most and max(after) == now_most, (before, after)


STAGED = ROOT / "benchmarks" / "patches" / "decode_staged_barriers.patch"


@pytest.mark.skipif(not STAGED.exists(), reason="decode_staged_barriers.patch has landed or gone")
@pytest.mark.parametrize("fmt,cfg,was,now", [("fp8_584,fp8_584", "MMA=wgmma_ws", [11, 7], [6, 4]),
                                             ("nvfp4_288,fp8_528", "MMA=wgmma_ws", [6, 4], [5, 4]),
                                             ("fp8_584,fp8_584", "MMA=wgmma", [14, 10], [11, 8])])
def test_staged_barriers_patch_takes_barriers_out_of_the_staged_builds(
        patched_tree: Callable[[Path], Path], fmt: str, cfg: str, was: list[int], now: list[int]) -> None:
    # _issue copies a tile's scale rows before its data chunks (after them, Triton's barrier pass
    # put a CTA barrier before the scale rows' copies), and _tail_store writes chunk 3's two halves
    # in one store (two stores into the chunk took a barrier between them). Static sm_90,
    # 2026-12-07: the warp-specialised producer's loops (fp8_584 pair 11 + 7 -> 6 + 4 barriers a
    # tile, V4.1 6 + 4 -> 5 + 4) and the one-warpgroup build's (fp8_584 14 + 10 -> 11 + 8); the same
    # shared memory, no spills.
    role = "producer" if cfg == "MMA=wgmma_ws" else None
    before, after = static_profile(fmt, cfg), static_profile(fmt, cfg, patched_tree(STAGED))
    assert after["shared_bytes"] == before["shared_bytes"] and after["spills"] == before["spills"] == 0, (before, after)
    assert loop_barriers(before, role) == was and loop_barriers(after, role) == now, (before["loops"], after["loops"])
