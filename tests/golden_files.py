"""Golden files for rendered templates: a template change shows up as a readable diff.

Regenerate with `KVTUNE_UPDATE_GOLDEN=1 pytest tests/...` and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


def check_golden(relpath: str, text: str) -> None:
    path = GOLDEN_DIR / relpath
    if os.environ.get("KVTUNE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path}; run with KVTUNE_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text()
    assert text == expected, f"rendered source differs from {path}; if intended, regenerate with KVTUNE_UPDATE_GOLDEN=1"
