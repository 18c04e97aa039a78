"""benchmarks/' probe scripts run as their tests run them: in a process of their own without
TRITON_INTERPRET (Triton compiles there for the target; the test process may be interpreting)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def run_probe(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python benchmarks/<script> args...` from the repository root; its output, not checked."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
