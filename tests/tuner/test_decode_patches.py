"""benchmarks/patches/: changes prepared for a device call (h200_session.sh applies one to the device's
copy of the tree, times it against the tree as it is and runs its GPU tests). Each must still apply
to this tree and build what it says, or the call it waits for is wasted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def _static_row(copy: Path, fmt: str, cfg: str) -> dict[str, str]:
    # benchmarks/static_profile.py's row of one decode build, compiled for sm_90 from `copy`.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "benchmarks/static_profile.py", "decode", "--fmt", fmt, "--cfg", cfg],
                         cwd=copy, env=env, capture_output=True, text=True, check=True).stdout
    rows = [[c.strip() for c in r.split("|")[1:-1]] for r in out.splitlines() if r.startswith("| ")]
    got = dict(zip(rows[0], rows[-1]))
    assert got["config"] == cfg, out
    return got


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_patch_applies_to_this_tree(patch: Path) -> None:
    got = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr


def test_hmpv_store_smem_patch_builds_the_split_without_scratch_or_spills(tmp_path: Path) -> None:
    # The QK / PV split's O stored through the K tiles' shared memory (h200_session.sh ab-store-smem):
    # compiled on the CPU for sm_90 from a patched copy, no shared memory past the buffers the
    # patched wgmma_hmpv_shared_bytes counts (214096 bytes), 16-byte stores of O (STG.E.128: 68
    # st.global, 260 from the accumulator's layout) and the V4.1 pair without spills (the tree's
    # convert_layout: 256 bytes).
    copy = _patched_copy(ROOT / "benchmarks" / "patches" / "hmpv_store_smem.patch", tmp_path)
    got = _static_row(copy, "nvfp4_288,fp8_528", "MMA=wgmma_hmpv,PREFETCH=1")
    assert int(got["spills"]) == 0 and int(got["shared_bytes"]) == 214096 and int(got["st.global"]) <= 80, got


def test_o_store_epilogues_patch_stores_whole_rows_without_spills_or_shared_memory(tmp_path: Path) -> None:
    # Every other wgmma build's O by _store_rows (h200_session.sh ab-store-epilogues): compiled on the
    # CPU for sm_90 from a patched copy, the heads-on-N build with one warpgroup and the heads-on-M one
    # store O in 16-byte vectors (st.global 72 -> 24 and 132 -> 36, the m / l words included), with
    # no spills and no shared memory past the tree's (the conversions' scratch reuses dead buffers).
    copy = _patched_copy(ROOT / "benchmarks" / "patches" / "o_store_epilogues.patch", tmp_path)
    for cfg, shared, st_max in (("MMA=wgmma", 166144, 24), ("MMA=wgmma_hm", 221696, 36)):
        got = _static_row(copy, "fp8_584,fp8_584", cfg)
        assert int(got["spills"]) == 0 and int(got["shared_bytes"]) == shared and int(got["st.global"]) <= st_max, got
