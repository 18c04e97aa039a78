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

from tests.tuner.static_sm90 import static_profile

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


def test_a_stacked_patch_applies_after_the_one_it_names(tmp_path: Path) -> None:
    # Written on top of another (first line "kvtune-patch-after: NAME.patch"): its chain is that
    # one's chain, then itself, so both the applies test and a claim's patched copy apply them in
    # that order.
    (tmp_path / "a.patch").write_text("diff --git a/x b/x\n")
    (tmp_path / "b.patch").write_text(f"{AFTER} a.patch\n\ndiff --git a/x b/x\n")
    (tmp_path / "c.patch").write_text(f"{AFTER} b.patch\n\ndiff --git a/x b/x\n")
    assert _chain(tmp_path / "a.patch") == [tmp_path / "a.patch"]
    assert _chain(tmp_path / "c.patch") == [tmp_path / "a.patch", tmp_path / "b.patch", tmp_path / "c.patch"]




PDL_WAIT = ROOT / "benchmarks" / "patches" / "decode_pdl_wait.patch"


@pytest.mark.skipif(not PDL_WAIT.exists(), reason="decode_pdl_wait.patch has landed or gone")
def test_pdl_wait_patch_adds_one_instruction_to_each_build(patched_tree: Callable[[Path], Path]) -> None:
    # Each wgmma build's programs wait for the grid before them first (griddepcontrol.wait: one
    # SASS instruction), so the launcher may launch them as its programmatic dependents; nothing
    # else of a build changes (registers, spills, shared memory, every other instruction).
    fmt = "nvfp4_288,fp8_528"
    for cfg in ("MMA=wgmma", "MMA=wgmma_ws", "MMA=wgmma_hmpv,PREFETCH=1"):
        was, now = static_profile(fmt, cfg), static_profile(fmt, cfg, patched_tree(PDL_WAIT))
        assert (now["registers"], now["spills"], now["shared_bytes"]) == \
            (was["registers"], was["spills"], was["shared_bytes"]), (cfg, now, was)
        assert now["sass"] == was["sass"] + 1 and now["ops"] == was["ops"], (cfg, now["ops"], was["ops"])


PARTIAL_ROWS = ROOT / "benchmarks" / "patches" / "decode_partial_rows.patch"


@pytest.mark.skipif(not PARTIAL_ROWS.exists(), reason="decode_partial_rows.patch has landed or gone")
def test_partial_rows_patch_stores_partials_in_vectors(patched_tree: Callable[[Path], Path]) -> None:
    # The heads-on-N builds' partial O stored by _store_rows through the free K buffers: a
    # thread's 64 one-value stores become 16 16-byte ones (plus the 8 of the (max, sum) pairs), four
    # CTA barriers more, the same shared memory, no spills, registers within one of before.
    for fmt, cfg in (("nvfp4_288,fp8_528", "MMA=wgmma"), ("nvfp4_288,fp8_528", "MMA=wgmma_ws"),
                     ("fp8_584,fp8_584", "MMA=wgmma,num_warps=8")):
        was, now = static_profile(fmt, cfg), static_profile(fmt, cfg, patched_tree(PARTIAL_ROWS))
        assert (was["ops"]["st.global"], now["ops"]["st.global"]) == (72, 24), (fmt, cfg, now["ops"], was["ops"])
        assert now["ops"]["barrier"] == was["ops"]["barrier"] + 4, (fmt, cfg, now["ops"], was["ops"])
        assert now["spills"] == was["spills"] == 0 and now["shared_bytes"] == was["shared_bytes"], (fmt, cfg, now, was)
        assert abs(now["registers"] - was["registers"]) <= 1, (fmt, cfg, now["registers"], was["registers"])


FMA_HEAD_SUM = ROOT / "benchmarks" / "patches" / "logits_fma_head_sum.patch"


@pytest.mark.skipif(not FMA_HEAD_SUM.exists(), reason="logits_fma_head_sum.patch has landed or gone")
def test_fma_head_sum_patch_leaves_the_tensor_core_mma_1(patched_tree: Callable[[Path], Path]) -> None:
    # The logits wgmma kernel's head sum on the FMA pipe (fp32 weights in registers): its 4 bf16
    # m64n8k16 wgmmas a tile and their wait go, MMA 1's 4 e4m3 ones stay; the loop gains ~45 SASS
    # (32 relu maxima, the FMAs, 4 shuffles) and the registers 68 -> 85 (6 programs an SM, not 7).
    was = static_profile("mxfp4_68", "dot=wgmma", kernel="logits")
    now = static_profile("mxfp4_68", "dot=wgmma", patched_tree(FMA_HEAD_SUM), kernel="logits")
    assert (was["ops"]["wgmma"], now["ops"]["wgmma"]) == (8, 4) and now["ops"]["wgmma wait"] == 1, (now, was)
    assert now["spills"] == was["spills"] == 0 and 40 <= now["loop"] - was["loop"] <= 50, (now, was)
    assert (was["registers"], now["registers"]) == (68, 85), (now, was)


MMA1_RS = ROOT / "benchmarks" / "patches" / "decode_mma1_rs.patch"


@pytest.mark.skipif(not MMA1_RS.exists(), reason="decode_mma1_rs.patch has landed or gone")
def test_mma1_rs_patch_reads_k_into_registers_with_one_warpgroup(patched_tree: Callable[[Path], Path]) -> None:
    # The one-warpgroup build's MMA 1 takes each K chunk as its A fragment (32 ldmatrix a list's
    # tile), not serialized (the same wgmma waits) and without spills; two warpgroups and ws as before.
    for fmt in ("nvfp4_288,fp8_528", "fp8_584,fp8_584"):
        was, now = static_profile(fmt, "MMA=wgmma"), static_profile(fmt, "MMA=wgmma", patched_tree(MMA1_RS))
        assert (was["ops"].get("ldmatrix", 0), now["ops"].get("ldmatrix", 0)) == (0, 64), (fmt, now["ops"])
        assert now["ops"]["wgmma wait"] == was["ops"]["wgmma wait"] and now["ops"]["wgmma"] == was["ops"]["wgmma"]
        assert now["spills"] == 0 and now["registers"] <= 255 and now["sass"] < was["sass"], (fmt, now, was)
        for cfg in ("MMA=wgmma,num_warps=8", "MMA=wgmma_ws"):
            a, b = static_profile(fmt, cfg), static_profile(fmt, cfg, patched_tree(MMA1_RS))
            assert (a["sass"], a["ops"], a["registers"]) == (b["sass"], b["ops"], b["registers"]), (fmt, cfg)
