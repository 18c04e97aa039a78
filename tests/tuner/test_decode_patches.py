"""benchmarks/patches/: changes prepared for a device call (h200_session.sh applies one to the device's
copy of the tree, times it against the tree as it is and runs its GPU tests). Each must still apply
to this tree, or the call it waits for is wasted, and a patch that claims a static change shows it
here, compiled for sm_90 on the CPU from a patched copy (`_patched_copy`, then
tests/tuner/static_sm90.py). (None waits when the folder is empty: the parameter sets are empty
then, and pytest reports them skipped.)"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.tuner.static_sm90 import loop_barriers, static_profile

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "benchmarks" / "patches").glob("*.patch"))


AFTER = "kvtune-patch-after:"  # a patch's first line naming the patch it is written on top of


def _chain(patch: Path) -> list[Path]:
    """The patches to apply, in order, for `patch`: those it names after AFTER (first line; git
    apply skips text before the first diff), then itself. A stacked patch is A/B'd on a device
    copy its predecessor's A/B left patched (benchmarks/patches/README.md)."""
    first = patch.read_text().splitlines()[0]
    before = _chain(patch.parent / first[len(AFTER):].strip()) if first.startswith(AFTER) else []
    return before + [patch]


def _copy_tree(dest: Path) -> Path:
    # The tracked files as they are in this checkout (uncommitted edits included).
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    return dest


def _patched_copy(patch: Path, dest: Path) -> Path:
    # A copy of the tree, then the patch (after the ones it is written on top of).
    _copy_tree(dest)
    for p in _chain(patch):
        subprocess.run(["git", "apply", str(p)], cwd=dest, capture_output=True, text=True, check=True)
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
def test_patch_applies_to_this_tree(patch: Path, tmp_path: Path) -> None:
    *before, _ = _chain(patch)
    tree = _copy_tree(tmp_path) if before else ROOT
    for p in before:
        assert p.exists(), f"{patch.name} is written on top of {p.name}, which is not here"
        subprocess.run(["git", "apply", str(p)], cwd=tree, capture_output=True, text=True, check=True)
    got = subprocess.run(["git", "apply", "--check", str(patch)], cwd=tree, capture_output=True, text=True)
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


LAZY_RESCALE = ROOT / "benchmarks" / "patches" / "decode_lazy_rescale.patch"


@pytest.mark.skipif(not LAZY_RESCALE.exists(), reason="decode_lazy_rescale.patch has landed or gone")
@pytest.mark.parametrize("fmt", ["nvfp4_288,fp8_528", "fp8_584,fp8_584"])
@pytest.mark.parametrize("cfg", ["MMA=wgmma_ws", "MMA=wgmma"])
def test_lazy_rescale_patch_lets_a_tile_skip_the_rescale(patched_tree: Callable[[Path], Path], fmt: str,
                                                         cfg: str) -> None:
    # The one-warpgroup heads-on-N builds move their running max only when a tile's passes it by
    # more than 2**8: a tile that does not skips the rescale of O (64 multiplies a thread) and the
    # sums (8): each list's MMA loop gains a forward branch over at least 72 instructions, at no
    # more barriers, no spills and at most 4 registers more.
    *before_it, _ = _chain(LAZY_RESCALE)  # its base: the patch it is written on top of, if any
    was = static_profile(fmt, cfg, patched_tree(before_it[-1])) if before_it else static_profile(fmt, cfg)
    now = static_profile(fmt, cfg, patched_tree(LAZY_RESCALE))
    before = [lp["skips"] for lp in was["loops"] if lp["role"] == "mma"][:2]
    after = [lp["skips"] for lp in now["loops"] if lp["role"] == "mma"][:2]
    new = [sorted((Counter(a) - Counter(b)).elements(), reverse=True) for a, b in zip(after, before)]
    assert len(new) == 2 and all(n and n[0] >= 72 for n in new), (before, after)
    assert loop_barriers(now, "mma")[:2] == loop_barriers(was, "mma")[:2]
    assert now["spills"] == was["spills"] == 0 and now["registers"] <= was["registers"] + 4, (now, was)
