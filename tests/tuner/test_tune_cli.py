"""`kvtune tune` end to end on the interpreter, and the key/bucket mapping the CLI and API share."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.core import Bucket, ProblemKey, TrialStatus
from catalog.keys import make_key, parse_buckets
from catalog.families.pack import pack_key
from catalog.results import TuneResult

REPO = Path(__file__).resolve().parents[2]


def test_kvtune_tune_pack_on_the_interpreter(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "kvtune.cli", "tune", "--kernel", "pack", "--arch", "interp", "--trials", "3",
         "--formats", "mxfp4_68", "--buckets", "1-16", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("bucket"))
    assert lines[header].split()[:5] == ["bucket", "default", "us", "tuned", "us"]
    row = lines[header + 2].split()
    assert row[0] == "N1-16"
    default_us, tuned_us, speedup, trials = float(row[1]), float(row[2]), row[3], int(row[4])
    assert 0 < tuned_us <= default_us and speedup.endswith("x") and trials == 3
    assert "cpu-interpreter" in proc.stdout
    assert "trial" in proc.stderr  # the progress bar

    doc = json.loads(out.read_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", doc["finished_at"]), doc["finished_at"]
    res = TuneResult.from_json(doc)
    assert res.key == pack_key("mxfp4_68", "interp") and res.target == "interp" and res.search == "tpe"
    (b,) = res.buckets
    assert b.bucket == Bucket("N", 1, 16) and len(b.trials) == 3
    assert b.default.number == 0 and b.default.status is TrialStatus.OK
    assert b.best is not None and b.best.ok and b.best.time_us == pytest.approx(tuned_us, abs=0.01)
    assert all(r.timing == "cpu-interpreter" for r in b.trials if r.ok)
    assert all(r.config["backend"] in ("soft", "swar") for r in b.trials)  # ptx/gfx950 are illegal on the interpreter
    # The seed after the default: its tiles with the other backend the interpreter runs.
    assert b.trials[1].config == b.default.config.replace(backend="swar")


def test_make_key_per_kernel() -> None:
    assert make_key("pack", "sm_90", formats=["mxfp4_68"]) == pack_key("mxfp4_68", "sm_90")
    assert make_key("decode", "sm_90", 16, 512, 128) == ProblemKey(
        "decode", "sm_90", 16, 512, 128, ("nvfp4_288", "fp8_528"), 512)
    assert make_key("logits", "gfx950", 16, 1024, 128) == ProblemKey(
        "logits", "gfx950", 64, 1024, 0, ("mxfp4_68", "fp8"), 128)
    assert make_key("logits", "sm_90", formats=["fp8_132", "bf16"]).formats == ("fp8_132", "bf16")
    with pytest.raises(ValueError):
        make_key("decode", "sm_90", formats=["nvfp4_288"])
    with pytest.raises(ValueError):
        make_key("attn", "sm_90")


def test_parse_buckets() -> None:
    defaults = [Bucket("T", 1, 1, ctx=4096)]
    assert parse_buckets("1-1,2-4, 5", defaults) == [Bucket("T", 1, 1, 4096), Bucket("T", 2, 4, 4096),
                                                      Bucket("T", 5, 5, 4096)]
    assert parse_buckets("1-64@8192", defaults) == [Bucket("T", 1, 64, 8192)]
    with pytest.raises(ValueError, match="bad bucket"):
        parse_buckets("4-2", defaults)
