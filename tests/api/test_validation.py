"""Issue 24's validation faults, each through a real uvicorn on loopback (SQLite and PostgreSQL): the
two-format bundle 500 that dropped the connection, unbounded bucket ctx, database data errors taken
for an outage, and idempotent POST /v1/tune."""

from __future__ import annotations

import threading
from typing import Iterator

import httpx
import pytest
from sqlalchemy import func, select

from api.app import create_app
from catalog.core import Bucket
from catalog.keys import make_key
from catalog.settings import Settings
from db import jobs
from db.errors import InvalidData, InvalidRequest
from db.models import Job
from db.session import Database
from tests.db.fixtures import db  # noqa: F401  (fixture)
from tests.service.procs import ThreadServer

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SEED = {"arch": "interp", "heads": 16, "topk": 512, "window": 128}
PACK = {"kernel": "pack", **SEED, "formats": ["fp8_528"], "buckets": [{"dim": "N", "lo": 1, "hi": 4}], "trials": 3}
LOGITS = {"kernel": "logits", **SEED, "trials": 2}


class Api:
    def __init__(self, url: str, db: Database) -> None:
        self.db = db
        self.http = httpx.Client(base_url=url, timeout=60)

    def jobs(self) -> int:
        return self.db.run(lambda s: s.scalar(select(func.count()).select_from(Job)), write=False)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    app = create_app(Settings(database_url=db_url, api_token=TOKEN))
    with ThreadServer(app) as srv:
        a = Api(srv.url, app.state.db)
        yield a
        a.http.close()


# -- 1. a bundle for formats some family cannot take -----------------------------------------------

def test_the_decode_pair_bundle_serves_decode_and_says_what_is_unavailable(api: Api) -> None:
    for _ in range(2):  # on one keep-alive connection: the first answer must not have closed it
        r = api.http.get("/v1/configs", params={**SEED, "formats": "nvfp4_288,fp8_528"})
        assert r.status_code == 200, r.text
        b = r.json()
        assert list(b["kernels"]) == ["decode"] and b["kernels"]["decode"]["buckets"]
        assert "logits reads" in b["unavailable"]["logits"] and "one record format" in b["unavailable"]["pack"]
    for fmts in ("fp8_528,fp8_528", "fp8_528,nvfp4_288"):
        r = api.http.get("/v1/configs", params={**SEED, "formats": fmts})
        assert r.status_code == 200 and list(r.json()["kernels"]) == ["decode"], r.text
    # The logits pair with its query dtype (a format name of a key, not a record format).
    r = api.http.get("/v1/configs", params={**SEED, "formats": "mxfp4_68,fp8"})
    assert r.status_code == 200 and list(r.json()["kernels"]) == ["logits"], r.text
    assert api.http.get("/v1/warmup-keys", params={**SEED, "formats": "nvfp4_288,fp8_528"}).status_code == 200


def test_a_tune_request_its_family_cannot_render_is_a_422_that_names_it(api: Api) -> None:
    r = api.http.post("/v1/tune", json={**LOGITS, "formats": ["nvfp4_288", "fp8_528"]}, headers=AUTH)
    assert r.status_code == 422 and "logits reads" in r.json()["detail"], r.text
    r = api.http.post("/v1/tune", json={"kernel": "decode", **SEED, "formats": ["mxfp4_68", "fp8"]}, headers=AUTH)
    assert r.status_code == 422 and "decode tile reads" in r.json()["detail"], r.text
    # More local heads than the decode kernels take: refused before any trial would fail on it,
    # and a bundle for that shape says why decode is missing instead of serving a default it cannot run.
    r = api.http.post("/v1/tune", json={"kernel": "decode", **{**SEED, "heads": 128}}, headers=AUTH)
    assert r.status_code == 422 and "decode takes 1..64 local heads" in r.json()["detail"], r.text
    b = api.http.get("/v1/configs", params={**SEED, "heads": 128}).json()
    assert "decode" not in b["kernels"] and "1..64 local heads" in b["unavailable"]["decode"]
    assert "logits" in b["kernels"] and "pack" in b["kernels"]
    assert api.jobs() == 0
    # On sm_90, for the records its wgmma path reads, 128 heads are a shape with a kernel: served
    # with that path as the default (the Triton tile stops at 64 heads).
    b = api.http.get("/v1/configs", params={**SEED, "arch": "sm_90", "heads": 128}).json()
    assert all(e["default_config"]["MMA"] == "wgmma" for e in b["kernels"]["decode"]["buckets"]), b


def test_an_unexpected_error_is_a_500_body_and_the_connection_stays(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from api import read_path

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(read_path, "read_bundle", boom)  # what the read path builds a bundle with
    r = api.http.get("/v1/configs", params=SEED)
    assert r.status_code == 500 and r.json() == {"detail": "internal server error"}
    assert api.http.get("/healthz").status_code == 200  # the same connection still answers


# -- 2. bounds on what is stored; data errors are the request's, not an outage ---------------------

@pytest.mark.parametrize("ctx,needle", [(10**60, "less than or equal to 2147483647"), (2**31 - 1, "ctx=2147483647 is longer"),
                                        (-1, "greater than or equal to 0")])
def test_bucket_ctx_is_bounded(api: Api, ctx: int, needle: str) -> None:
    body = {**LOGITS, "buckets": [{"dim": "T", "lo": 1, "hi": 8, "ctx": ctx}]}
    r = api.http.post("/v1/tune", json=body, headers=AUTH)
    assert r.status_code == 422 and needle in r.json()["detail"], r.text
    assert api.jobs() == 0
    ok = api.http.post("/v1/tune", json={**LOGITS, "buckets": [{"dim": "T", "lo": 1, "hi": 8, "ctx": 1 << 24}]}, headers=AUTH)
    assert ok.status_code == 202, ok.text


@pytest.mark.parametrize("field", ["heads", "topk", "window", "trials", "seed", "max_workers"])
def test_every_stored_integer_is_bounded(api: Api, field: str) -> None:
    body = {**PACK, field: 2**31, **({"distributed": True} if field == "max_workers" else {})}
    r = api.http.post("/v1/tune", json=body, headers=AUTH)
    assert r.status_code == 422 and field in r.json()["detail"], r.text
    for lo, hi in ((2**31, 2**31), (1, 2**31)):
        r = api.http.post("/v1/tune", json={**PACK, "buckets": [{"dim": "N", "lo": lo, "hi": hi}]}, headers=AUTH)
        assert r.status_code == 422, r.text
    assert api.jobs() == 0


def test_a_value_its_column_cannot_hold_is_invalid_data_not_unavailable(db: Database) -> None:  # noqa: F811
    key = make_key("pack", "interp", formats=["fp8_528"])
    # SQLite: the driver refuses an int over 64 bits (2**70); PostgreSQL: "integer out of range" (a DataError).
    with pytest.raises(InvalidData, match="refused a value"):
        jobs.submit(db, jobs.JobSpec(key=key, trials=2**70 if db.is_sqlite else 2**40))
    if not db.is_sqlite:  # "value too long for type character varying(64)"
        with pytest.raises(InvalidRequest, match="refused a value"):
            jobs.submit(db, jobs.JobSpec(key=key, buckets=(Bucket("N", 1, 2),), idempotency_key="k" * 300))
    assert issubclass(InvalidData, InvalidRequest)  # answered 422 by the API


# -- 4. Idempotency-Key ---------------------------------------------------------------------------

def test_a_retry_with_the_same_idempotency_key_returns_the_first_job(api: Api) -> None:
    h = {**AUTH, "Idempotency-Key": "retry-1"}
    first = api.http.post("/v1/tune", json=PACK, headers=h)
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    again = api.http.post("/v1/tune", json={**PACK, "search": "tpe", "seed": 0}, headers=h)  # defaults spelled out
    assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"] and again.headers["location"] == first.headers["location"]
    assert api.jobs() == 1
    other = api.http.post("/v1/tune", json={**PACK, "trials": 4}, headers=h)
    assert other.status_code == 422 and "different request" in other.json()["detail"], other.text
    assert api.jobs() == 1
    # Without a key, or with another key, every submission is a job of its own.
    assert api.http.post("/v1/tune", json=PACK, headers=AUTH).json()["id"] != first.json()["id"]
    assert api.http.post("/v1/tune", json=PACK, headers={**AUTH, "Idempotency-Key": "retry-2"}).status_code == 202
    assert api.jobs() == 3
    assert api.http.post("/v1/tune", json=PACK, headers={**AUTH, "Idempotency-Key": ""}).status_code == 422


def test_concurrent_retries_with_one_key_make_one_job(api: Api) -> None:
    ids: list[int] = []
    errors: list[str] = []

    def post() -> None:
        with httpx.Client(base_url=str(api.http.base_url), timeout=60) as c:
            r = c.post("/v1/tune", json=PACK, headers={**AUTH, "Idempotency-Key": "race"})
            (ids.append(r.json()["id"]) if r.status_code == 202 else errors.append(r.text))

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ids) == 6 and len(set(ids)) == 1
    assert api.jobs() == 1
