"""benchmarks/patches/: changes prepared for a device call (h200_session.sh applies one to the device's
copy of the tree, times it against the tree as it is and runs its GPU tests). Each must still apply
to this tree, or the call it waits for is wasted, and a patch that claims a static change shows it
here, compiled for sm_90 on the CPU from a patched copy. A patch prepared on top of another names it in
its header ("Applies after: NAME.patch", text git apply skips) and is checked on the tree with that one
applied. (None waits when the folder is empty: the parameter sets are empty then, and pytest reports
them skipped.)"""

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


def _applies_after(patch: Path) -> list[Path]:
    # The patches this one is prepared on top of, in order (its header's "Applies after:" lines).
    head = patch.read_text().split("\ndiff --git", 1)[0]
    return [patch.parent / line.split(":", 1)[1].strip() for line in head.splitlines()
            if line.startswith("Applies after:")]


def _patched_copy(patch: Path, dest: Path) -> Path:
    # The tracked files as they are in this checkout (uncommitted edits included), then the patches
    # it applies after, then the patch.
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    for p in [*_applies_after(patch), patch]:
        subprocess.run(["git", "apply", str(p)], cwd=dest, capture_output=True, text=True, check=True)
    return dest


def _static(tree: Path, fmt: str, cfg: str) -> dict[str, Any]:
    # benchmarks/static_profile.py's profile of one decode build (its loops included), compiled for
    # sm_90 from `tree`.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "benchmarks/static_profile.py", "decode", "--fmt", fmt, "--cfg", cfg,
                          "--json"], cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    (got,) = json.loads(out)
    assert got["config"] == cfg, out
    return got


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_patch_applies_to_this_tree(patch: Path, tmp_path: Path) -> None:
    bases = _applies_after(patch)
    assert all(b.exists() for b in bases), f"{patch.name} applies after a patch that is gone: {bases}"
    if not bases:
        got = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
        return
    _patched_copy(patch, tmp_path)  # raises CalledProcessError (git apply's message) where one does not apply


CHUNK_ALLOCS = ROOT / "benchmarks" / "patches" / "decode_chunk_allocs.patch"


@pytest.fixture(scope="module")
def chunk_allocs_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One patched copy for both builds' checks (copying the tree is most of a check's time).
    return _patched_copy(CHUNK_ALLOCS, tmp_path_factory.mktemp("chunk_allocs"))


@pytest.mark.skipif(not CHUNK_ALLOCS.exists(), reason="decode_chunk_allocs.patch has landed or gone")
@pytest.mark.parametrize("cfg", ["MMA=wgmma", "MMA=wgmma_ws"])
def test_chunk_allocs_patch_takes_barriers_out_of_the_tile_loops(chunk_allocs_tree: Path, cfg: str) -> None:
    # K's four 128-dim chunks and the stage rows' four as allocations of their own (the seed shape's
    # picks: MMA=wgmma at T <= 8, wgmma_ws at T = 64). Triton's shared-memory barrier pass tells
    # accesses apart by allocation only, so the tree takes a CTA barrier between every two chunks'
    # stores and every two chunks' cp.async copies (and the ws producer's slots took two more a
    # tile through a layout conversion). From a patched copy (V4.1 pair): no tile loop with more
    # barriers, a third fewer in all (2026-12-07: wgmma 12 + 12 -> 6 + 6 a tile, the ws producer's
    # 17 + 11 -> 8 + 5), the same shared memory, no more spills.
    fmt = "nvfp4_288,fp8_528"
    was, now = _static(ROOT, fmt, cfg), _static(chunk_allocs_tree, fmt, cfg)
    assert now["shared_bytes"] == was["shared_bytes"] and now["spills"] <= was["spills"], (was, now)
    before = [lp["ops"].get("barrier", 0) for lp in was["loops"]]
    after = [lp["ops"].get("barrier", 0) for lp in now["loops"]]
    assert len(before) == len(after) and all(a <= b for a, b in zip(after, before)), (before, after)
    # The loops that convert records: the producer's in the warp-specialised build (its consumer's
    # loops read K only through the MMAs), every tile loop in the other.
    converting = [i for i, lp in enumerate(was["loops"]) if lp["role"] == "producer"] or range(len(before))
    assert sum(after[i] for i in converting) <= 0.7 * sum(before[i] for i in converting), (before, after)

