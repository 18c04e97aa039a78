"""db/dashboard.py on its own: versions and staleness, the roofline floor, the tune body a miss
button sends, and a study's progress series built from trials a worker recorded (db.queue)."""

from __future__ import annotations

import pytest

from api.schemas import TuneRequest
from db import dashboard, migrate, queue
from db.session import Database
from tests.dashboard import seed
from catalog.core import Bucket, TrialStatus
from catalog.families.pack import pack_bytes
from catalog.keys import make_key
from catalog.results import TrialRecord


def test_versions_and_newest() -> None:
    assert dashboard.version_key("3.6.0") == (3, 6, 0)
    assert dashboard.version_key("3.10.0+git1a2b") == (3, 10, 0)
    assert dashboard.version_key("fake") is None and dashboard.version_key("") is None
    # Numeric, not string, order: 3.10 is newer than 3.9; unparseable versions never win.
    assert dashboard.newest_versions({"sm_90": {"3.9.1", "3.10.0", "fake"}, "interp": {"fake"}}) == {"sm_90": "3.10.0"}


def test_roofline_floor() -> None:
    key = make_key("pack", "sm_90", formats=["fp8_528"])
    b = Bucket("N", 1, 64)
    assert dashboard.roofline_floor_us(key, b) == pytest.approx(pack_bytes("fp8_528", 64) / 4.272e12 * 1e6)
    assert dashboard.roofline_floor_us(make_key("pack", "interp"), b) is None  # no bandwidth for CPU timings
    assert dashboard.roofline_floor_us(make_key("pack", "gfx950"), b) is None  # not measured: "-", not a guess
    odd = make_key("pack", "sm_90").__class__("nonesuch", "sm_90", 1, 1, 1)
    assert dashboard.roofline_floor_us(odd, b) is None


@pytest.mark.parametrize("kernel, kwargs", [("pack", {"formats": ["mxfp4_68"]}), ("decode", {"heads": 64, "topk": 2048}),
                                            ("logits", {"topk": 1024})])
def test_tune_body_is_a_valid_request_for_the_same_key(kernel: str, kwargs: dict) -> None:
    key = make_key(kernel, "gfx950", **kwargs)
    body = dashboard.tune_body(key.to_json())
    req = TuneRequest(**body)  # what POST /v1/tune will accept
    assert make_key(req.kernel, req.arch, req.heads, req.topk, req.window, req.formats) == key


def test_study_progress_from_recorded_trials(db_url: str) -> None:
    db = Database(db_url)
    migrate.upgrade(db)
    key = make_key("pack", "interp", formats=["fp8_528"])
    job_id = seed.submit_job(db, key, trials=5)
    lease = queue.claim(db, arch="interp", owner="t", lease_s=60)
    assert lease is not None and lease.job_id == job_id
    b = Bucket("N", 1, 4)
    outcomes = [(TrialStatus.OK, 10.0), (TrialStatus.COMPILE_ERROR, None), (TrialStatus.OK, 12.0),
                (TrialStatus.OK, 7.5), (TrialStatus.OK, 9.0)]
    # Optuna numbers 0, 2, 4...: the odd ones were pruned duplicates, never run nor recorded.
    for i, (status, t) in enumerate(outcomes):
        rec = TrialRecord(number=2 * i, bucket=b, config=seed.TUNED_CFG.replace(BLOCK=i), status=status, time_us=t)
        queue.record_trial(db, lease, rec, progress={"trials_done": i + 1}, best={})
    got = dashboard.study_progress(db, job_id)
    assert got["job"]["status"] == "running" and got["job"]["trials_done"] == 5
    (s,) = got["series"]
    # x counts the trials measured: improvements only (the 1st, then the 4th), then the last (5th)
    # carrying the best forward; the winner's own Optuna number is kept for the tables.
    assert s["best"] == [[1, 10.0], [4, 7.5], [5, 7.5]]
    assert (s["trials"], s["failed"], s["best_us"], s["best_number"]) == (5, 1, 7.5, 6)
    assert dashboard.latest_job_with_trials(db) == job_id
    detail = dashboard.job_detail(db, job_id)
    assert detail["trials_by_status"] == {"compile_error": 1, "ok": 4} and detail["published"] == []
    db.dispose()
