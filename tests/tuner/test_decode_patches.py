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
    """A patched copy of the tree per patch, made once for the module's tests of that patch: a
    patch's static claim compiles from it (tests/tuner/static_sm90.py's `static_profile(fmt, cfg,
    patched_tree(PATCH))` beside `static_profile(fmt, cfg)`)."""
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



MAX_BY_WARP = ROOT / "benchmarks" / "patches" / "decode_max_by_warp.patch"


@pytest.mark.skipif(not MAX_BY_WARP.exists(), reason="decode_max_by_warp.patch has landed or gone")
@pytest.mark.parametrize("fmt", ["nvfp4_288,fp8_528", "fp8_584,fp8_584"])
@pytest.mark.parametrize("cfg,fewer", [("MMA=wgmma_ws", 2), ("MMA=wgmma", 1), ("MMA=wgmma,num_warps=8", 1)])
def test_max_by_warp_patch_takes_barriers_out_of_the_tile_loops(patched_tree: Callable[[Path], Path], fmt: str,
                                                                 cfg: str, fewer: int) -> None:
    # The heads-on-N builds' max over a tile's keys as each warp's max into 256 bytes of shared
    # memory (512 at 32 heads) and one CTA barrier (gl.max across the four key warps took three
    # and two shared-memory round trips): the warp-specialised consumer's tile loops 5 -> 3
    # barriers a trip (its one also serves the K buffer's release; Triton's membar puts one after
    # the release's mbarrier arrive), the one- and two-warpgroup builds' one fewer; registers no
    # more, no spills, the shared memory that much more at most.
    was, now = static_profile(fmt, cfg), static_profile(fmt, cfg, patched_tree(MAX_BY_WARP))
    role = "mma" if "ws" in cfg else None
    before, after = loop_barriers(was, role)[:2], loop_barriers(now, role)[:2]
    assert [b - a for b, a in zip(before, after)] == [fewer, fewer], (before, after)
    assert now["registers"] <= was["registers"] and now["spills"] == was["spills"] == 0, (now, was)
    assert was["shared_bytes"] < now["shared_bytes"] <= was["shared_bytes"] + 512
