"""benchmarks/cluster_probe.py: the 2-CTA cluster path a 128-head decode build would take (each CTA
converting half of a tile into both CTAs' shared memory, as FlashMLA does), in Gluon with inline PTX."""

from __future__ import annotations

import subprocess

import pytest

from tests.tuner.probe_scripts import SM90, run_probe


def _probe(*args: str) -> subprocess.CompletedProcess:
    return run_probe("cluster_probe.py", *args)


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
