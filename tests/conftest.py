"""Test setup: without a GPU, every Triton kernel runs on Triton's interpreter.

On a GPU machine (the H200 worker) the same tests run on the device instead, so one suite checks
both; `KVTUNE_FORCE_INTERP=1` forces the interpreter anyway.
"""

from __future__ import annotations

import os

import torch

if os.environ.get("KVTUNE_FORCE_INTERP") == "1" or not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from tuner.targets import detect  # noqa: E402


@pytest.fixture(scope="session")
def target_name() -> str:
    return detect().name


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if detect().is_gpu else "cpu"


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Rendered modules go to a per-run directory, so a test run never depends on an old cache.
    os.environ.setdefault("KVTUNE_CACHE_DIR", str(tmp_path_factory.mktemp("kvtune-cache")))


# Tests that take 20-100 s each on the 2-core CI machine (cross-compile tables, interpreter prefill,
# the README's cluster job, the demo, the database chaos and swarm runs). pytest-xdist's worksteal
# hands each worker a contiguous half of the collection and steals from the back of a queue, so
# these go to the front of both halves: each worker starts on its share of them and both queues end
# in short tests, instead of one worker finishing a 90 s test while the other idles (~2 min of the
# suite's wall time, 2026-12-06).
LONG_TESTS = ("xcompile_table_matches_the_issue", "readme_cluster_section", "kvtune_demo_tunes",
              "drops_every_connection", "logits_matches_reference[prefill", "mxfp4_query_logits_matches_reference",
              "eight_workers_two_hundred_jobs", "apart_split_plan", "list_lengths_bound", "killed_mid_trial",
              "survives_its_connections_being_terminated", "sigkill_of_a_participant")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long: list[pytest.Item] = []
    short: list[pytest.Item] = []
    for it in items:
        (long if any(s in it.nodeid for s in LONG_TESTS) else short).append(it)
    if not long:
        return
    first = long[0::2]
    half = max(0, len(items) // 2 - len(first))  # the first worker's share: len(items) // 2 items
    items[:] = first + short[:half] + long[1::2] + short[half:]
