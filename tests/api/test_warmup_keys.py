"""Warmup keys published with a config come back in the bundle and from GET /v1/warmup-keys
(through a real uvicorn, on SQLite and the real PostgreSQL)."""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from api.app import create_app
from catalog.settings import Settings
from db import configs, jobs, queue
from tests.service.procs import ThreadServer
from catalog.core import Bucket, TrialStatus
from tuner.kernels import get_family
from catalog.keys import make_key
from catalog.results import BucketResult, TrialRecord, TuneResult
from tuner.warmup import WarmupKey, keys_for

TOKEN = "tok"
SEED = {"arch": "sm_90", "heads": 16, "topk": 512, "window": 128, "formats": "mxfp4_68"}


@pytest.fixture
def server(db_url: str) -> Iterator[tuple[str, object]]:
    app = create_app(Settings(database_url=db_url, api_token=TOKEN))
    with ThreadServer(app) as srv:
        yield srv.url, app.state.db


def test_published_keys_are_served_with_the_bundle_and_alone(server: tuple[str, object]) -> None:
    url, db = server
    key = make_key("pack", "sm_90", 16, 512, 128, ("mxfp4_68",))
    fam = get_family("pack")
    bucket = Bucket("N", 1, 64)
    cfg = fam.default_config(key)
    # The keys a worker on an sm_90 GPU would publish (pack's launches do not depend on the device).
    wkeys = keys_for("pack", key, cfg, bucket, "sm_90")
    assert len(wkeys) == 3  # n_tokens: the constant 1, divisible by 16, neither

    jobs.submit(db, jobs.JobSpec(key=key, buckets=(bucket,), trials=1))
    lease = queue.claim(db, arch="sm_90", owner="w", lease_s=30)
    t = TrialRecord(number=0, bucket=bucket, config=cfg, status=TrialStatus.OK, time_us=5.0)
    res = TuneResult(key=key, target="sm_90", buckets=(BucketResult(bucket, t, t, (t,)),), device_name="H200",
                     triton_version="3.6.0", torch_version="2.11")
    src = fam.render(key, cfg)

    def publish(s):  # noqa: ANN001, ANN202
        configs.store_sources(s, [(src.source_hash, src.template, src.source)])
        return configs.publish(s, job_id=lease.job_id, key=key, result=res, source_hashes={bucket.name(): src.source_hash},
                               warmup_keys={bucket.name(): [k.to_json() for k in wkeys]})

    queue.complete(db, lease, publish, progress={})

    with httpx.Client(base_url=url, timeout=30) as http:
        bundle = http.get("/v1/configs", params=SEED).json()
        entry = next(e for e in bundle["kernels"]["pack"]["buckets"] if e["name"] == bucket.name())
        assert entry["default"] is False
        assert entry["warmup"]["triton_version"] == "3.6.0" and entry["warmup"]["target"] == "sm_90"
        assert [WarmupKey.from_json(k) for k in entry["warmup"]["keys"]] == wkeys
        alone = http.get("/v1/warmup-keys", params=SEED).json()
        assert alone == bundle["warmup"]
        assert [WarmupKey.from_json(k) for k in alone["keys"]] == wkeys  # each binary once
        assert alone["sources"] == [src.source_hash] and alone["triton_versions"] == ["3.6.0"]
        # Untuned buckets and kernels are listed as having no keys rather than given invented ones.
        assert "pack/N65-1024" in alone["missing"] and "pack/N1-64" not in alone["missing"]
        assert http.get(f"/v1/kernels/{alone['sources'][0]}").text == src.source
        assert http.get("/v1/warmup-keys", params={**SEED, "heads": 0}).status_code == 422
        assert http.get("/v1/warmup-keys", params={**SEED, "arch": "<script>"}).status_code == 422


def test_worker_enumerates_winner_keys_and_survives_a_family_that_cannot() -> None:
    from kvtune.worker import winner_warmup_keys

    key = make_key("pack", "sm_90", 16, 512, 128, ("mxfp4_68",))
    fam = get_family("pack")
    b = Bucket("N", 1, 64)
    t = TrialRecord(number=0, bucket=b, config=fam.default_config(key), status=TrialStatus.OK, time_us=1.0)
    winners = [BucketResult(b, t, t, (t,))]
    got = winner_warmup_keys(fam, key, winners, "sm_90")
    assert [WarmupKey.from_json(k) for k in got[b.name()]] == keys_for("pack", key, fam.default_config(key), b, "sm_90")
    assert winner_warmup_keys(fam, key, winners, "interp") == {}  # the interpreter compiles nothing

    # A bucket whose keys cannot be enumerated (here: an infeasible config, which the launcher
    # refuses) is left out rather than failing the publish.
    bad = TrialRecord(number=0, bucket=b, config=fam.default_config(key).replace(BLOCK_T=3), status=TrialStatus.OK, time_us=1.0)
    assert winner_warmup_keys(fam, key, [BucketResult(b, bad, bad, (bad,))], "sm_90") == {}
