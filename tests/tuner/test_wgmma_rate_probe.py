"""benchmarks/wgmma_rate_probe.py: the wgmma shapes it times are the decode tile's (m64nNk16 bf16,
A from shared memory K-major as MMA 1 reads K, MN-major as PV reads K^T, or from registers; and the
logits kernel's m64nNk32 e4m3), a tile's waited for once; on an sm_90 GPU its MMAs compute what
they should."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.tuner.probe_scripts import ROOT, SM90, run_probe


def test_rate_probe_issues_the_decode_tiles_wgmma_forms_for_sm90() -> None:
    got = run_probe("wgmma_rate_probe.py", "--static", "--ns", "16,64")
    assert got.returncode == 0, got.stdout + got.stderr
    rows = {tuple(c.strip() for c in r.split("|")[1:3]): r.split("|")[3].strip()
            for r in got.stdout.splitlines() if r.startswith("| ") and not r.startswith("| A operand")}
    want = {"ss": "32 x HGMMA.64x{n}x16.F32.BF16 desc", "ss_t": "32 x HGMMA.64x{n}x16.F32.BF16 desc.tnspA",
            "rs": "32 x HGMMA.64x{n}x16.F32.BF16 R", "ss_fp8": "16 x QGMMA.64x{n}x32.F32.E4M3.E4M3 desc"}
    assert rows == {(mode, str(n)): form.format(n=n) + "; 1 waits" for mode, form in want.items() for n in (16, 64)}, \
        got.stdout


@pytest.mark.skipif(not SM90, reason="times wgmmas on an sm_90 GPU")
def test_rate_probe_mmas_compute_their_products_on_sm90() -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks.wgmma_rate_probe import MODES, run

    for mode in MODES:
        for n in (16, 64):
            spans, sums, want = run(mode, n, grid=4, reps=3)
            torch.cuda.synchronize()
            err = (sums.double() - want[None, :]).abs().max() / want.abs().max()
            # fp8 products accumulate at the tensor core's reduced precision (about 14 bits)
            assert err < (1e-3 if mode == "ss_fp8" else 1e-5), (mode, n, float(err))
            assert bool((spans > 0).all()), (mode, n, spans)
