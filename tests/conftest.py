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
