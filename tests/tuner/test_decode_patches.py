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

from tests.tuner.static_sm90 import loop_instructions, static_profile

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


UNMASKED = ROOT / "benchmarks" / "patches" / "decode_hm_unmasked_loads.patch"


@pytest.mark.skipif(not UNMASKED.exists(), reason="decode_hm_unmasked_loads.patch has landed or gone")
@pytest.mark.parametrize("fmt,cfg,fewer,spills", [("fp8_584,fp8_584", "MMA=wgmma_hmpv,PREFETCH=1", 40, 0),
                                                  ("nvfp4_288,fp8_528", "MMA=wgmma_hmpv,PREFETCH=1", 15, 0)])
def test_hm_unmasked_loads_patch_shortens_the_producer(patched_tree: Callable[[Path], Path], fmt: str, cfg: str,
                                                        fewer: int, spills: int) -> None:
    # The heads-on-M producer's record bytes loaded unmasked (a slot of -1 reads slot 0's row,
    # zeroed by its scale byte of 0; e4m3 scale bytes unmasked too, then selected): no register
    # zeroing before each masked load. Static sm_90, the 64/128-head T=64 picks (2026-12-07):
    # fp8_584 producer loops 1104 + 1018 -> 1061 + 973 SASS a tile, spills 50 -> 0 bytes; V4.1
    # 887 + 1060 -> 872 + 1004.
    was, now = static_profile(fmt, cfg), static_profile(fmt, cfg, patched_tree(UNMASKED))
    before, after = loop_instructions(was, "producer"), loop_instructions(now, "producer")
    assert len(before) == len(after) == 2 and all(a <= b for a, b in zip(after, before)), (before, after)
    assert sum(before) - sum(after) >= fewer and now["spills"] <= spills, (before, after, now["spills"])
    assert now["shared_bytes"] == was["shared_bytes"]


PV_IN_FLIGHT = ROOT / "benchmarks" / "patches" / "decode_ws_pv_in_flight.patch"


@pytest.mark.skipif(not PV_IN_FLIGHT.exists(), reason="decode_ws_pv_in_flight.patch has landed or gone")
@pytest.mark.parametrize("fmt", ["nvfp4_288,fp8_528", "fp8_584,fp8_584"])
def test_ws_pv_in_flight_patch_waits_once_a_tile(patched_tree: Callable[[Path], Path], fmt: str) -> None:
    # The warp-specialised consumer leaves a tile's PV MMAs in flight and waits for them with the
    # next tile's S (one wgmma wait a trip, not two), with every wgmma still pipelined (a wait
    # before each would be ptxas serializing them: C7514, which waiting for the PV MMAs alone with
    # wait_group 4 brings); registers, spills and shared memory as before.
    was, now = static_profile(fmt, "MMA=wgmma_ws"), static_profile(fmt, "MMA=wgmma_ws", patched_tree(PV_IN_FLIGHT))
    # The two lists' tile loops, first in address order (a span further on runs into the epilogue).
    waits = [[lp["ops"].get("wgmma wait", 0) for lp in p["loops"] if lp["role"] == "mma"][:2] for p in (was, now)]
    assert waits == [[2, 2], [1, 1]], waits
    assert now["ops"]["wgmma wait"] < now["ops"]["wgmma"] // 8, now["ops"]
    kept = ("registers", "spills", "shared_bytes")
    assert [now[k] for k in kept] == [was[k] for k in kept], (now, was)
