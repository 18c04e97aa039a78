"""The HTTP API through a real uvicorn on loopback, on SQLite and the real PostgreSQL: auth, limits,
validation, jobs, bundles (ETag, misses), kernel sources, health and metrics."""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import httpx
import pytest
from sqlalchemy import func, select

from api.app import create_app
from tuner.runtime.client import ClientError, KvtuneClient
from catalog.settings import Settings
from db import queue
from db.models import Job, LookupMiss
from db.session import Database
from tests.service.procs import ThreadServer
from catalog.keys import make_key

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SEED = {"arch": "interp", "heads": 16, "topk": 512, "window": 128}
PACK = {"kernel": "pack", **SEED, "formats": ["fp8_528"], "buckets": [{"dim": "N", "lo": 1, "hi": 4}], "trials": 3}


class Api:
    def __init__(self, url: str, db: Database) -> None:
        self.url = url
        self.db = db
        self.http = httpx.Client(base_url=url, timeout=30)

    def jobs(self) -> int:
        return self.db.run(lambda s: s.scalar(select(func.count()).select_from(Job)), write=False)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    settings = Settings(database_url=db_url, api_token=TOKEN, max_body_bytes=4096, max_trials=500)
    app = create_app(settings)
    with ThreadServer(app) as srv:
        a = Api(srv.url, app.state.db)
        yield a
        a.http.close()


def test_submit_get_list_cancel(api: Api) -> None:
    r = api.http.post("/v1/tune", json=PACK, headers=AUTH)
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["key_slug"] == make_key("pack", "interp", formats=["fp8_528"]).slug()
    assert job["buckets"] == [{"dim": "N", "lo": 1, "hi": 4, "ctx": 0}] and job["trials"] == 3
    got = api.http.get(f"/v1/jobs/{job['id']}").json()
    assert got["status"] == "queued" and got["progress"]["trials_done"] == 0 and got["trials_by_status"] == {}
    decode = api.http.post("/v1/tune", json={"kernel": "decode", **SEED, "trials": 2,
                                             "buckets": [{"dim": "T", "lo": 1, "hi": 1}]}, headers=AUTH)
    assert decode.status_code == 202, decode.text
    listed = api.http.get("/v1/jobs", params={"kernel": "pack"}).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert len(api.http.get("/v1/jobs").json()["jobs"]) == 2
    assert api.http.get("/v1/jobs", params={"status": "bogus"}).status_code == 422
    c = api.http.delete(f"/v1/jobs/{job['id']}", headers=AUTH)
    assert c.status_code == 200 and c.json()["status"] == "cancelled"
    assert api.http.get(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"
    assert api.http.get("/v1/jobs/999999").status_code == 404
    assert api.http.delete("/v1/jobs/999999", headers=AUTH).status_code == 404
    assert api.http.get("/v1/jobs/99999999999999999999").status_code == 422


def test_cancel_of_succeeded_job_is_409(api: Api) -> None:
    job = api.http.post("/v1/tune", json=PACK, headers=AUTH).json()
    lease = queue.claim(api.db, arch="interp", owner="t", lease_s=30)
    queue.fail(api.db, lease, "x")
    assert api.http.delete(f"/v1/jobs/{job['id']}", headers=AUTH).status_code == 409


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_writes_without_a_valid_token_are_401_and_write_nothing(api: Api, headers: dict[str, str]) -> None:
    job = api.http.post("/v1/tune", json=PACK, headers=AUTH).json()
    before = api.jobs()
    r = api.http.post("/v1/tune", json=PACK, headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert api.http.post("/v1/tune", content=b"{not json", headers=headers).status_code == 401
    assert api.http.delete(f"/v1/jobs/{job['id']}", headers=headers).status_code == 401
    assert api.jobs() == before
    assert api.http.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"


def test_server_without_token_refuses_writes(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, api_token=None))
    with ThreadServer(app) as srv:
        r = httpx.post(f"{srv.url}/v1/tune", json=PACK, headers={"Authorization": "Bearer anything"})
        assert r.status_code == 401 and "KVTUNE_API_TOKEN" in r.json()["detail"]


def test_oversized_bodies_are_413(api: Api) -> None:
    before = api.jobs()
    big = {**PACK, "formats": ["fp8_528"], "pad": "x" * 10_000}
    r = api.http.post("/v1/tune", content=json.dumps(big).encode(), headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 413
    # Chunked, with no Content-Length to trust.
    chunks = iter([b'{"kernel": "pack", "pad": "', b"y" * 3000, b"z" * 3000, b'"}'])
    r = api.http.post("/v1/tune", content=chunks, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 413
    assert api.jobs() == before


BAD_BODIES: list[tuple[str, Any, str]] = [
    ("malformed json", b'{"kernel": "pack",', "not valid JSON"),
    ("not an object", b"[1, 2]", "body"),
    ("invalid utf-8", b'{"kernel": "\xff\xfe"}', ""),
    ("unknown kernel", {**PACK, "kernel": "matmul"}, "unknown kernel"),
    ("dotted kernel path", {**PACK, "kernel": "os:system"}, "unknown kernel"),
    ("unknown arch", {**PACK, "arch": "sm_75"}, "unknown arch"),
    ("unknown format", {**PACK, "formats": ["int3"]}, "unknown record format"),
    ("absurd heads", {**PACK, "heads": 10**9}, "heads"),
    ("negative topk", {**PACK, "topk": -5}, "topk"),
    ("string heads", {**PACK, "heads": "16"}, "heads"),
    ("bool window", {**PACK, "window": True}, "window"),
    ("absurd trials", {**PACK, "trials": 10**7}, "trials"),
    ("zero trials", {**PACK, "trials": 0}, "trials"),
    ("unknown search", {**PACK, "search": "annealing"}, "search"),
    ("nan budget", b'{"kernel":"pack","arch":"interp","heads":16,"topk":512,"window":128,"time_budget_s":NaN}', ""),
    ("huge budget", {**PACK, "time_budget_s": 1e12}, "time_budget_s"),
    ("inverted bucket", {**PACK, "buckets": [{"dim": "N", "lo": 9, "hi": 2}]}, "lo <= hi"),
    ("wrong bucket dim", {**PACK, "buckets": [{"dim": "T", "lo": 1, "hi": 2}]}, "batch dimension"),
    ("huge bucket", {**PACK, "buckets": [{"dim": "N", "lo": 1, "hi": 2**30}]}, "larger"),
    ("absurd bucket", {**PACK, "buckets": [{"dim": "N", "lo": 1, "hi": 10**12}]}, "buckets.0.hi: Input should be less than or equal to 2147483647"),
    ("overlapping buckets", {**PACK, "buckets": [{"dim": "N", "lo": 1, "hi": 8}, {"dim": "N", "lo": 4, "hi": 16}]}, "overlap"),
    ("two pack formats", {**PACK, "formats": ["fp8_528", "nvfp4_288"]}, "one record format"),
    ("extra field", {**PACK, "priority": 1}, "priority"),
    ("missing heads", {k: v for k, v in PACK.items() if k != "heads"}, "heads"),
]


@pytest.mark.parametrize("body,needle", [(b, n) for _, b, n in BAD_BODIES], ids=[i for i, _, _ in BAD_BODIES])
def test_bad_requests_are_422_before_anything_is_queued(api: Api, body: Any, needle: str) -> None:
    before = api.jobs()
    if isinstance(body, bytes):
        r = api.http.post("/v1/tune", content=body, headers={**AUTH, "content-type": "application/json"})
    else:
        r = api.http.post("/v1/tune", json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and needle in detail
    assert api.jobs() == before


def test_bundle_miss_serves_defaults_and_records_the_miss(api: Api) -> None:
    r = api.http.get("/v1/configs", params=SEED)
    assert r.status_code == 200
    b = r.json()
    assert set(b["kernels"]) >= {"pack", "decode"}
    for name, k in b["kernels"].items():
        assert k["tuned"] is False and k["buckets"], name
        assert all(e["default"] is True and e["provenance"] is None for e in k["buckets"])
        # The default's generated source is served by its hash.
        src = api.http.get(f"/v1/kernels/{k['buckets'][0]['source_hash']}")
        assert src.status_code == 200 and src.headers["content-type"].startswith("text/plain") and "triton" in src.text
    assert sorted(b["misses"]) == sorted(k["key_slug"] for k in b["kernels"].values())
    api.http.get("/v1/configs", params=SEED)
    # Misses are counted in memory and written in batches (api/read_path.py): within a flush period.
    want = {slug: 2 for slug in b["misses"]}
    end = time.monotonic() + 10
    while (misses := api.db.run(lambda s: {m.key_slug: m.count for m in s.scalars(select(LookupMiss))},
                                write=False)) != want and time.monotonic() < end:
        time.sleep(0.1)
    assert misses == want


def test_bundle_etag_304_and_client_reuse(api: Api) -> None:
    r = api.http.get("/v1/configs", params=SEED)
    etag = r.headers["etag"]
    again = api.http.get("/v1/configs", params=SEED, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    assert api.http.get("/v1/configs", params=SEED, headers={"If-None-Match": '"other"'}).status_code == 200
    with KvtuneClient(api.url) as c:
        first = c.fetch_bundle("interp", 16, 512, 128)
        assert c.fetch_bundle("interp", 16, 512, 128) == first  # served from the 304
        assert first == r.json()


def test_bundle_query_validation(api: Api) -> None:
    for params in ({**SEED, "arch": "sm_75"}, {**SEED, "heads": "x"}, {**SEED, "heads": 10**9},
                   {**SEED, "formats": "nope"}, {"arch": "interp"}):
        r = api.http.get("/v1/configs", params=params)
        assert r.status_code == 422, (params, r.text)
    assert api.http.get("/v1/kernels/not-a-hash").status_code == 422
    assert api.http.get("/v1/kernels/0123456789abcdef").status_code == 404
    with KvtuneClient(api.url) as c, pytest.raises(ClientError) as e:
        c.fetch_bundle("sm_75", 16, 512, 128)
    assert e.value.status == 422


def test_health_and_metrics(api: Api) -> None:
    assert api.http.get("/healthz").json()["status"] == "ok"
    api.http.post("/v1/tune", json=PACK, headers=AUTH)
    api.http.post("/v1/tune", json=PACK)
    text = api.http.get("/metrics").text
    assert 'kvtune_jobs{status="queued"} 1' in text
    assert 'kvtune_http_requests_total{method="POST",route="/v1/tune",status="202"} 1' in text
    assert 'kvtune_http_requests_total{method="POST",route="unmatched",status="401"} 1' in text
    assert "# TYPE kvtune_lookup_misses_total counter" in text


def test_client_retries_then_gives_up_on_a_dead_server() -> None:
    from tests.service.procs import free_port

    with KvtuneClient(f"http://127.0.0.1:{free_port()}", retries=2, backoff_s=0.01, timeout=0.5) as c:
        with pytest.raises(ClientError, match="3 attempts"):
            c.fetch_bundle("interp", 16, 512, 128)


def test_client_retries_transient_5xx() -> None:
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] < 3:
            return httpx.Response(503, json={"detail": "busy"})
        return httpx.Response(200, json={"kernels": {}}, headers={"etag": '"e1"'})

    with KvtuneClient("http://kvtune.test", transport=httpx.MockTransport(handler), backoff_s=0.01) as c:
        assert c.fetch_bundle("interp", 16, 512, 128) == {"kernels": {}}
    assert calls["n"] == 3
