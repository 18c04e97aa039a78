"""benchmarks/static_profile.py's profile of one decode build (or logits config), compiled for sm_90
on the CPU from a tree (this checkout or a patched copy of it): registers, spills, shared memory and
each innermost tile loop's instruction classes. For tests that hold a static claim (test_decode_barriers,
test_decode_patches)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def static_profile(fmt: str, cfg: str, tree: Path = ROOT, kernel: str = "decode") -> dict[str, Any]:
    """`kernel` "decode" (fmt: comp,win) or "logits" (fmt: the cache format, fp8 query)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "benchmarks/static_profile.py", kernel, "--fmt", fmt, "--cfg", cfg,
                          "--json"], cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    (got,) = json.loads(out)
    assert got["config"] == cfg, out
    return got


def loop_barriers(profile: dict[str, Any], role: str | None = None) -> list[int]:
    """CTA barriers a trip of each tile loop (in address order), of one role's loops or all."""
    return [lp["ops"].get("barrier", 0) for lp in profile["loops"] if role is None or lp["role"] == role]

