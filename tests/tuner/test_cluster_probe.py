"""benchmarks/cluster_probe.py: the 2-CTA cluster path a 128-head decode build would take (each CTA
converting half of a tile into both CTAs' shared memory, as FlashMLA does), in Gluon with inline PTX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _probe(*args: str) -> subprocess.CompletedProcess:
    # A process of its own: Triton compiles there (this one may run under TRITON_INTERPRET).
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "benchmarks/cluster_probe.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cluster_probe_compiles_two_cta_clusters_with_dsmem_stores_and_bulk_copies_for_sm90() -> None:
    got = _probe()
    assert got.returncode == 0, got.stdout + got.stderr
    for fact in ("cluster of 2", "DSMEM address", "DSMEM store", "cluster barrier", "program id is the cluster's",
                 "bulk copy to the peer", "barrier expects the peer's bytes", "barrier awaited", "remote arrive"):
        assert f"{fact}: yes" in got.stdout, got.stdout


@pytest.mark.skipif(not SM90, reason="launches a 2-CTA cluster on an sm_90 GPU")
def test_cluster_probe_reads_what_the_peer_cta_wrote_on_sm90() -> None:
    got = _probe("--run")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "dsmem store round trip: ok" in got.stdout and "half tiles round trip: ok" in got.stdout, got.stdout


@pytest.mark.parametrize("pair", ["nvfp4_288,fp8_528", "fp8_584,fp8_584"])
def test_the_qk_pv_split_compiles_as_a_two_cta_cluster_for_sm90(pair: str) -> None:
    # The build a 128-head cluster build would grow from (MMA=wgmma_hmpv), unchanged but compiled with
    # num_ctas=2 and every layout replicated on both CTAs: Triton 3.6 takes it whole (warp_specialize,
    # wgmma, mbarriers) within sm_90's 227 KiB of shared memory a CTA; the V4.1 pair without spills.
    # The fp8_584 pair's tail chunk is written as its two swizzle blocks, not through shared-memory
    # slices, which a cluster build cannot take.
    got = _probe("--decode", pair, "MMA=wgmma_hmpv,PREFETCH=1")
    assert got.returncode == 0, got.stdout + got.stderr
    stats = json.loads(got.stdout.strip().splitlines()[-1])
    assert stats["cluster of 2"] and stats["shared_bytes"] <= 227 * 1024, stats
    if pair == "nvfp4_288,fp8_528":
        assert stats["spills"] == 0, stats


def test_a_cluster_render_differs_from_the_served_module_only_in_its_cluster_switch() -> None:
    # render_wgmma(cluster=True) is the served module with CLUSTER on (every layout through _lay gets a
    # CTA layout replicated on both CTAs); nothing else of the kernels' code changes with it.
    from catalog.families.decode import render_wgmma

    for pair in (("fp8_584", "fp8_584"), ("nvfp4_288", "fp8_528")):
        served, cluster = render_wgmma(*pair).source.splitlines(), render_wgmma(*pair, cluster=True).source.splitlines()
        changed = [(a, b) for a, b in zip(served, cluster) if a != b]
        assert len(served) == len(cluster) and changed == [("CLUSTER = False", "CLUSTER = True")], changed
